"""Claims module implementation (being written)."""
