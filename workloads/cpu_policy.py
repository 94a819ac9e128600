"""Scheduling policy of the processes around the ranks (Linux; elsewhere every call is a no-op).

On a CPU-only node the ranks of a run fill every core and every step waits for the slowest
rank, so a helper process that wakes up and preempts a rank delays the whole step. Helpers put
under ``SCHED_IDLE`` run only in the cores' idle moments (a rank waiting in a collective) and
never preempt a rank; a nice-19 thread still may. Used for the embedded cluster's daemons
(``orchestrator/daemons.py``) and for the fork launcher once its fork server is up (a Ray
worker's main thread wakes every 10 ms); a forked rank puts itself back to the normal policy.

May import: nothing (the standard library only).
"""

from __future__ import annotations

import contextlib
import os


def idle_process(pid: int) -> bool:
    """Every thread of ``pid`` to ``SCHED_IDLE`` (threads started later inherit it). False
    where the kernel refused or has no such policy. Needs no privilege for one's own processes."""
    idle = getattr(os, "SCHED_IDLE", None)
    if idle is None:
        return False
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(ProcessLookupError):  # a thread that just ended
                os.sched_setscheduler(int(tid), idle, os.sched_param(0))
    except OSError:
        return False
    return True


def normal_self() -> bool:
    """This thread back to the normal policy (``SCHED_OTHER``) if it is not there; True when it
    is there afterwards. Leaving ``SCHED_IDLE`` needs privilege or an RLIMIT_NICE that allows
    it: without, the caller stays idle and gets False."""
    if not hasattr(os, "sched_getscheduler"):
        return True
    try:
        if os.sched_getscheduler(0) != os.SCHED_OTHER:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        return True
    except OSError:
        return False
