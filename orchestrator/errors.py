"""Exit codes and the one error printer every command uses.

Imports nothing from linksweep: every driver module may import it.
"""

from __future__ import annotations

import sys

EXIT_OK = 0
EXIT_FAILED = 1  # the sweep ran, and at least one run failed (stored as a row)
EXIT_BAD_INPUT = 2  # bad file, flag or database: nothing ran, nothing was written
EXIT_INTERRUPTED = 130  # Ctrl-C: finished runs are stored


def err(msg: str) -> None:
    """Print one message for the user on stderr, prefixed with the program's name."""
    print(f"linksweep: {msg}", file=sys.stderr)
