"""Exit codes, the one error printer every command uses, and the text a failed run stores.

May import: nothing (the standard library only).
"""

from __future__ import annotations

import re
import sys

EXIT_OK = 0
EXIT_FAILED = 1  # the sweep ran, and at least one run failed (stored as a row)
EXIT_BAD_INPUT = 2  # bad file, flag or database: nothing ran, nothing was written


def err(msg: str) -> None:
    """Print one message for the user on stderr, prefixed with the program's name."""
    print(f"linksweep: {msg}", file=sys.stderr)


# --- the text stored in runs.error for a failed run (pure) ---


def first_line(exc: BaseException) -> str:
    """The root cause's type and first line (Ray wraps a task's exception)."""
    cause = getattr(exc, "cause", None)
    shown = cause if cause is not None else exc
    text = str(shown).strip().splitlines()
    return f"{type(shown).__name__}: {text[0] if text else ''}".strip()


def error_text(exc: BaseException) -> str:
    """The root cause first (Ray wraps worker exceptions), then Ray's full text, bounded."""
    cause = getattr(exc, "cause", None)
    head = f"{type(cause).__name__}: {cause}" if cause is not None else ""
    body = str(exc)
    text = f"{head}\n{body}" if head and head not in body[:200] else body
    return text.strip()[:8000]


def ranks_error_text(failures: dict[int, BaseException], world_size: int) -> str:
    """One line per failed rank (its exception's last line, where a traceback names the
    cause) with the device the rank chose (its ``rank N device:`` note, so every failed rank's
    decision reaches ``runs.nodes``, not only the lowest one's), then the full text of the
    lowest failed rank's error, bounded."""
    lines = [f"{len(failures)} of {world_size} rank(s) failed"]
    for rank in sorted(failures):
        lines.append(f"rank {rank}: {_cause_line(failures[rank])}")
        lines.extend(_device_notes(failures[rank]))
    first = failures[min(failures)]
    return ("\n".join(lines) + "\n\n" + error_text(first)).strip()[:8000]


_DEVICE_NOTE = re.compile(r"^rank \d+ device: ")


def _device_notes(exc: BaseException) -> list[str]:
    """The ``rank N device: ...`` lines a rank added to its exception: as notes of the
    exception itself, or inside the text of Ray's wrapper (its ``cause`` or its message)."""
    found: list[str] = []
    for e in (exc, getattr(exc, "cause", None)):
        if e is None:
            continue
        candidates = [*getattr(e, "__notes__", ()), *str(e).splitlines()]
        found += [c.strip() for c in candidates if _DEVICE_NOTE.match(c.strip())]
    return list(dict.fromkeys(found))


_EXC_LINE = re.compile(r"^\w[\w.]*(Error|Exception|Failure|Interrupt)\b.*:")


def _cause_line(exc: BaseException) -> str:
    """The last line of a rank's traceback text (``Type: message``), else its first line."""
    text = str(getattr(exc, "cause", None) or exc)
    found = [ln.strip() for ln in text.splitlines() if _EXC_LINE.match(ln.strip())]
    return found[-1] if found else first_line(exc)
