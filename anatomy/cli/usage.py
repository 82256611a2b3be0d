"""What every subcommand shares with the command table: the error for bad command-line input.

Subcommands import from here, never from ``anatomy.cli.main`` (main imports the subcommands; the reverse would be an
import cycle, see tests/test_imports.py).
"""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the command line: printed as one line naming the argument, exit code 2."""
