"""Claims module add_norm (being written)."""
