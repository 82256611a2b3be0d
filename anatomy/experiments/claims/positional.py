"""Claims module positional (being written)."""
