"""Claims module block (being written)."""
