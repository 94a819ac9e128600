"""Hang diagnosis on the rank's node: each rank arms faulthandler on SIGUSR1 when its run starts;
when the run reaches ``run_timeout_s`` the driver runs :func:`capture` on each rank's node (a Ray
task pinned there), which signals the rank, reads the stack it wrote, and fetches PyTorch's NCCL
flight-recorder dump if there is one (asking for it through its trigger pipe first).

faulthandler writes from its C signal handler, so a rank stuck inside a C call (a collective,
a lock wait) still dumps every thread's Python stack. Imports nothing from ``orchestrator``.

May import: contract.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import time

from workloads.contract import NCCL_TRACE_PREFIX, STACK_FILE_PREFIX, RankDiagnostic

DUMP_SIGNAL = signal.SIGUSR1


def stack_path(run_id: str, rank: int) -> str:
    return f"{STACK_FILE_PREFIX}{run_id}-r{rank}.txt"


def pid_path(run_id: str, rank: int) -> str:
    return stack_path(run_id, rank) + ".pid"


class Armed:
    """faulthandler registered on SIGUSR1, writing to this rank's stack file until ``disarm``.
    The rank's pid is written beside it: a rank forked by a launcher (``workloads.launcher``) is
    not the process Ray placed, so the capture signals whichever process armed."""

    def __init__(self, run_id: str, rank: int):
        self.path = stack_path(run_id, rank)
        self.pid_path = pid_path(run_id, rank)
        self.file = open(self.path, "w")  # noqa: SIM115 - must stay open for the signal handler
        faulthandler.register(DUMP_SIGNAL, file=self.file, all_threads=True, chain=False)
        with open(self.pid_path, "w") as f:
            f.write(str(os.getpid()))

    def disarm(self) -> None:
        faulthandler.unregister(DUMP_SIGNAL)
        self.file.close()
        for path in (self.path, self.pid_path):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)


def _read_when_settled(path: str, wait_s: float, binary: bool) -> str | bytes | None:
    """The file's content once it exists, is non-empty and stopped growing; None after wait_s."""
    deadline = time.monotonic() + wait_s
    last = -1
    while time.monotonic() < deadline:
        size = os.path.getsize(path) if os.path.exists(path) else 0
        if size and size == last:
            with open(path, "rb" if binary else "r", errors=None if binary else "replace") as f:
                return f.read()
        last = size
        time.sleep(0.2)
    return None


def _trigger_nccl_dump(run_id: str, rank: int) -> bool:
    """Ask the rank's flight recorder for a dump through its pipe; False when nobody reads the
    pipe (no process group: no dump will come) or there is no pipe."""
    pipe = f"{NCCL_TRACE_PREFIX}{run_id}-{rank}.pipe"
    if not os.path.exists(pipe):
        return False
    try:
        fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return False  # no reader: the process group is gone
    try:
        os.write(fd, b"1\n")
    finally:
        os.close(fd)
    return True


def capture(run_id: str, rank: int, pid: int, wait_s: float = 5.0) -> RankDiagnostic:
    """On the rank's node: its Python stack and NCCL trace. Never raises."""
    errors = []
    stack = None
    path = stack_path(run_id, rank)
    try:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} missing: the rank never armed (not started?)")
        with contextlib.suppress(OSError, ValueError), open(pid_path(run_id, rank)) as f:
            pid = int(f.read())  # the process that armed (a forked rank: not Ray's worker)
        os.kill(pid, DUMP_SIGNAL)
        stack = _read_when_settled(path, wait_s, binary=False)
        if stack is None:
            errors.append(f"no stack written to {path} within {wait_s:.0f} s")
        else:
            os.remove(path)  # the rank is killed next: nobody else cleans it up
            with contextlib.suppress(FileNotFoundError):
                os.remove(pid_path(run_id, rank))
    except Exception as exc:  # noqa: BLE001 - a diagnosis must not fail the run's cleanup
        errors.append(f"python stack: {type(exc).__name__}: {exc}")
    trace = None
    dump = f"{NCCL_TRACE_PREFIX}{run_id}-{rank}"
    try:
        # wait for a dump only if one exists or a reader took the trigger: a pipe left by a
        # process group that is gone would cost wait_s for nothing
        if _trigger_nccl_dump(run_id, rank) or os.path.exists(dump):
            trace = _read_when_settled(dump, wait_s, binary=True)
        if trace is not None:
            os.remove(dump)
    except Exception as exc:  # noqa: BLE001
        errors.append(f"nccl trace: {type(exc).__name__}: {exc}")
    return RankDiagnostic(
        rank=rank,
        pid=pid,
        python_stack=stack,
        nccl_trace=trace,
        error="; ".join(errors) or None,
    )
