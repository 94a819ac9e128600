"""The files NCCL and PyTorch's NCCL flight recorder leave on a rank's node, read and removed.

The driver sets ``NCCL_DEBUG_FILE`` per run (``orchestrator/planner.run_env``); NCCL expands it
per process. :func:`read_nccl_log` reads this process's log into the rank's record and removes it.
:func:`collect_run_files` is what the driver runs on each node a run used once the run is over
(``raycluster/runs.collect_leftovers``): it reads the NCCL logs no rank read (a failed or hung
run returns no record) and removes every file of the run from /tmp.

May import: contract.
"""

from __future__ import annotations

import contextlib
import glob
import os
import socket
from dataclasses import dataclass, field

from workloads.contract import NCCL_TRACE_PREFIX, STACK_FILE_PREFIX

NCCL_LOG_PREFIX = "/tmp/linksweep-nccl-"
"""``orchestrator/planner.run_env`` sets ``NCCL_DEBUG_FILE={prefix}{run_id}-%h-%p.log``."""


def nccl_hostname(hostname: str) -> str:
    """The hostname as NCCL writes it into file names: cut at the first ``.``, with ``%`` and
    ``/`` replaced by ``-`` (NVIDIA/nccl ``src/debug.cc`` ``getHostNameForLog(.., '.')`` over
    ``src/misc/utils.cc`` ``getHostName``)."""
    short = hostname.split(".", 1)[0]
    return short.replace("%", "-").replace("/", "-")


def expand_debug_file(pattern: str, hostname: str, pid: int) -> str:
    """``NCCL_DEBUG_FILE`` expanded as NCCL's ``ncclDebugInit`` does: ``%h`` -> the short
    hostname (:func:`nccl_hostname`), ``%p`` -> the pid, ``%%`` -> ``%``; any other ``%x`` and a
    trailing ``%`` stay as written."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c != "%" or i + 1 >= len(pattern):
            out.append(c)
            i += 1
            continue
        code = pattern[i + 1]
        if code == "%":
            out.append("%")
        elif code == "h":
            out.append(nccl_hostname(hostname))
        elif code == "p":
            out.append(str(pid))
        else:
            out.append("%" + code)
        i += 2
    return "".join(out)


def read_nccl_log() -> str | None:
    """NCCL writes NCCL_DEBUG output to NCCL_DEBUG_FILE (set by the orchestrator, per pid)."""
    pattern = os.environ.get("NCCL_DEBUG_FILE")
    if not pattern:
        return None
    path = expand_debug_file(pattern, socket.gethostname(), os.getpid())
    texts = []
    for p in glob.glob(glob.escape(path)):
        with open(p, errors="replace") as f:
            texts.append(f.read())
        os.remove(p)
    return "".join(texts) or None


@dataclass(frozen=True)
class RunLeftovers:
    """What one node still held of a run after it ended: unread NCCL logs, and what was removed."""

    hostname: str
    nccl_logs: dict[str, str] = field(default_factory=dict)
    """Path -> text of every NCCL log of the run no rank read (a failed or hung run's)."""
    removed: tuple[str, ...] = ()
    """Every path removed: those logs, flight-recorder dumps and pipes, stack and pid files."""
    errors: tuple[str, ...] = ()
    """Files that could not be read or removed, with why."""


def run_file_patterns(run_id: str) -> tuple[str, ...]:
    """Glob patterns of every /tmp file a run can leave on a node."""
    esc = glob.escape
    return (
        f"{esc(NCCL_TRACE_PREFIX + run_id)}-*",  # flight-recorder dumps and trigger pipes
        f"{esc(STACK_FILE_PREFIX + run_id)}-r*",  # faulthandler stacks and their .pid files
        f"{esc(NCCL_LOG_PREFIX + run_id)}-*.log",  # NCCL_DEBUG_FILE of every process
    )


def collect_run_files(run_id: str) -> RunLeftovers:
    """On a node the run used: read the run's NCCL logs, remove every file of the run. Never
    raises (a cleanup must not fail the sweep)."""
    logs: dict[str, str] = {}
    removed: list[str] = []
    errors: list[str] = []
    trace_prefix = NCCL_TRACE_PREFIX + run_id + "-"
    for pattern in run_file_patterns(run_id):
        for path in sorted(glob.glob(pattern)):
            try:
                if path.endswith(".log") and not path.startswith(trace_prefix):
                    with open(path, errors="replace") as f:
                        logs[path] = f.read()
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
                removed.append(path)
            except OSError as exc:
                errors.append(f"{path}: {type(exc).__name__}: {exc}")
    return RunLeftovers(socket.gethostname(), logs, tuple(removed), tuple(errors))
