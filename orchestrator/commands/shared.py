"""What several commands do alike: read a file named on the command line, join the cluster.

May import: orchestrator.errors, orchestrator.raycluster.reach, orchestrator.raycluster.session.
"""

from __future__ import annotations

from orchestrator.errors import err


def read_text(path: str, what: str) -> str | None:
    """The file's text, or None after saying on stderr why it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        err(f"{what} {path}: no such file")
    except IsADirectoryError:
        err(f"{what} {path}: is a directory, expected a text file")
    except OSError as exc:
        err(f"{what} {path}: cannot read: {exc.strerror or exc}")
    return None


def join_cluster(address: str | None) -> bool:
    """Connect to the Ray cluster (embedded when no address and no RAY_ADDRESS). False after
    saying on stderr, in one line, why it cannot be joined (the caller exits 2)."""
    from orchestrator.raycluster.reach import ClusterUnreachable
    from orchestrator.raycluster.session import connect

    try:
        connect(address)
    except ClusterUnreachable as exc:
        err(str(exc))
        return False
    return True
