"""The embedded cluster's own daemons yield the CPU to the ranks it measures.

On a CPU-only machine the ranks of a run fill every core, and every step waits for the slowest
rank: a background process that takes a core for a moment delays the step by that moment. The
Ray processes linksweep starts for itself (GCS, dashboard, log monitor, autoscaler monitor,
dashboard and runtime-env agents) need ~2-3% of a core between them, at nice 0 like the ranks.
Reniced to 19 they still run, but in the ranks' idle moments (a rank waiting in a collective)
rather than by preempting one. Not the raylet: the workers it starts inherit its niceness, and
a process cannot lower its niceness without privilege (the ranks run at 0). Never a cluster
linksweep joined: only the embedded one (``scheduler.connect``).
"""

from __future__ import annotations

import contextlib
import os

from orchestrator.watchdog import descendants

NICE = 19

DAEMON_MARKERS = (
    b"gcs_server",
    b"log_monitor.py",
    b"dashboard/dashboard.py",
    b"autoscaler/_private/monitor.py",
    b"ray::DashboardAgent",
    b"dashboard/agent.py",
    b"ray::RuntimeEnvAgent",
    b"runtime_env/agent/main.py",
)


def is_daemon(cmdline: bytes) -> bool:
    """Whether a process's command line (``/proc/PID/cmdline``) is one of the cluster's daemons
    (not the raylet, not a worker). Pure."""
    head = b" ".join(cmdline.split(b"\0")[:3])  # program, maybe "-u", script: not the options
    return any(m in head for m in DAEMON_MARKERS)  # (the raylet's options name the agents' scripts)


def yield_to_ranks() -> list[int]:
    """Renice the daemons among this process's descendants to ``NICE``; returns their pids.
    Those already at ``NICE`` or gone are skipped quietly (a /proc scan: ~1 ms)."""
    done = []
    for pid in descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            if is_daemon(cmdline) and os.getpriority(os.PRIO_PROCESS, pid) < NICE:
                os.setpriority(os.PRIO_PROCESS, pid, NICE)
                done.append(pid)
        except OSError:
            continue
    return done


def yield_quietly() -> None:
    with contextlib.suppress(Exception):  # a help for timing, never a reason to fail a sweep
        yield_to_ranks()
