"""A dead driver leaves no embedded Ray behind: a small watchdog process per driver.

Ray starts the embedded cluster's own processes (gcs_server, raylet...) with
``PR_SET_PDEATHSIG`` (SIGKILL when the driver dies), but the processes *those* start (workers,
rank actors, agents) are re-parented and can outlive a ``kill -9``'d driver by a long time.
The watchdog (``python -m orchestrator.watchdog PID``, started by the driver before
``ray.init``, in its own session so a terminal's signals do not reach it) keeps a fresh list of
every descendant of the driver. When the driver dies, or closes the watchdog's stdin on its way
out, the watchdog SIGKILLs every listed process still alive (the same process: pid and start
time both match), waits until they are gone, and exits.

No Ray here: /proc and signals only (Linux).

May import: nothing (the standard library only).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

POLL_S = 2.0
"""How often the descendant list is refreshed. A driver's death is seen at once (its end of the
pipe closes); this only bounds how young a process can be and still be missing from the list,
and those are found by their markers at reaping time. Each refresh reads every /proc entry: at
0.1 s that took ~2% of a core, at 0.5 s ~0.5%, taken from the ranks on a machine whose cores
they fill."""
REAP_WAIT_S = 10.0


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, start time) of a live, non-zombie process, else None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[1]), int(fields[19])


def descendants(root: int | list[int]) -> dict[int, int]:
    """pid -> start time of every live descendant of ``root`` (one pid or several; the roots
    themselves not included)."""
    children: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                children.setdefault(st[0], []).append(int(name))
                starts[int(name)] = st[1]
    out: dict[int, int] = {}
    todo = [root] if isinstance(root, int) else list(root)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out[child] = starts[child]
                todo.append(child)
    return out


def _signal_same(procs: dict[int, int], sig: int) -> list[int]:
    """Send ``sig`` to each (pid, start time) that is still that process; returns those hit."""
    hit = []
    for pid, start in procs.items():
        st = _stat(pid)
        if st is not None and st[1] == start:
            try:
                os.kill(pid, sig)
                hit.append(pid)
            except ProcessLookupError:
                pass
    return hit


def reap(procs: dict[int, int], wait_s: float = REAP_WAIT_S) -> list[int]:
    """Freeze each (pid, start time) still alive and whatever it forked since the last look
    (SIGSTOP), then SIGKILL them all and wait until gone. Returns those killed."""
    procs = dict(procs)
    _signal_same(procs, signal.SIGSTOP)
    procs.update(descendants(list(procs)))  # children forked after the last snapshot
    _signal_same(procs, signal.SIGSTOP)
    killed = _signal_same(procs, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if all((st := _stat(p)) is None or st[1] != procs[p] for p in killed):
            break
        time.sleep(0.05)
    return killed


MARKER_ENV = "LINKSWEEP_DRIVER_PID"
"""Set in the driver's env after the watchdog starts: every Ray process inherits it."""


def _marked(pid: int, markers: list[bytes]) -> bool:
    """Whether the process's command line or environment names one of ``markers`` (the Ray
    session's folder; ``LINKSWEEP_DRIVER_PID=<pid>``). A worker forked just before the driver
    died is not in the last snapshot, and Ray renames workers only once they are up."""
    for part in ("cmdline", "environ"):
        try:
            with open(f"/proc/{pid}/{part}", "rb") as f:
                data = f.read()
        except OSError:
            return False
        if any(m in data for m in markers):
            return True
    return False


def marked_processes(markers: list[bytes], exclude: set[int]) -> dict[int, int]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in exclude and _marked(int(name), markers):
            st = _stat(int(name))
            if st is not None:
                out[int(name)] = st[1]
    return out


def watch(driver_pid: int) -> None:
    """Until stdin closes (the driver died or is done): track the driver's descendants; lines
    written to stdin are extra markers (the Ray session folder) to find stragglers by."""
    me = os.getpid()
    known: dict[int, int] = {}
    markers = [f"{MARKER_ENV}={driver_pid}\0".encode()]
    while True:
        current = descendants(driver_pid)
        current.pop(me, None)
        known.update(current)
        for pid in [p for p in known if p not in current]:
            st = _stat(pid)
            if st is None or st[1] != known[pid]:
                del known[pid]  # gone by itself
        ready, _, _ = select.select([sys.stdin], [], [], POLL_S)
        if ready:
            data = os.read(sys.stdin.fileno(), 4096)
            if not data:
                break
            markers += [line.encode() for line in data.decode().split() if line]
    known.update(marked_processes(markers, {me, os.getppid()}))
    reap(known)


class Watchdog:
    """The driver's handle: ``stop()`` (on a clean exit, after ``ray.shutdown``) closes the
    pipe, so the watchdog reaps whatever is left and exits; ``stop`` waits for that."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.watchdog", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,  # never hold the caller's pipes open past the driver
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def tell(self, marker: str) -> None:
        """One more marker of the cluster's processes (e.g. the Ray session folder)."""
        if self.proc.stdin is not None:
            self.proc.stdin.write(marker.encode() + b"\n")
            self.proc.stdin.flush()

    def stop(self, timeout_s: float = REAP_WAIT_S + 5) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()


if __name__ == "__main__":
    watch(int(sys.argv[1]))
