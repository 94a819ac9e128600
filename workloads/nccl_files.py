"""The files NCCL and PyTorch's NCCL flight recorder leave on a rank's node, read and removed.

The driver sets ``NCCL_DEBUG_FILE`` per run (``orchestrator/planner.run_env``); NCCL expands it
per process. :func:`read_nccl_log` reads this process's log into the rank's record and removes it.

May import: nothing (the standard library only).
"""

from __future__ import annotations

import glob
import os
import socket


def read_nccl_log() -> str | None:
    """NCCL writes NCCL_DEBUG output to NCCL_DEBUG_FILE (set by the orchestrator, per pid)."""
    pattern = os.environ.get("NCCL_DEBUG_FILE")
    if not pattern:
        return None
    path = pattern.replace("%h", socket.gethostname()).replace("%p", str(os.getpid()))
    texts = []
    for p in glob.glob(path):
        with open(p, errors="replace") as f:
            texts.append(f.read())
        os.remove(p)
    return "".join(texts) or None
