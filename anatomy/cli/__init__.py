"""The command line: a thin command table over library functions."""
