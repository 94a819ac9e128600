"""The embedded cluster's own daemons yield the CPU to the ranks it measures.

On a CPU-only machine the ranks of a run fill every core, and every step waits for the slowest
rank: a background process that takes a core for a moment delays the step by that moment. The
Ray processes linksweep starts for itself (GCS, dashboard, log monitor, autoscaler monitor,
dashboard and runtime-env agents) need ~2-3% of a core between them, at nice 0 like the ranks.
Reniced to 19 and under ``SCHED_IDLE`` they still run, but in the ranks' idle moments (a rank
waiting in a collective) rather than by preempting one. Not the raylet: the workers it starts
inherit its niceness and policy, and a process cannot leave either without privilege (the ranks
run at 0, normal policy). Never a cluster linksweep joined: only the embedded one
(``raycluster.session.connect``).

May import: watchdog, workloads.cpu_policy.
"""

from __future__ import annotations

import contextlib
import os

from orchestrator.watchdog import descendants
from workloads.cpu_policy import idle_process

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


QUIET_ENV = {
    # The dashboard and runtime-env agents check that their raylet lives every 0.4 s.
    "RAY_DASHBOARD_AGENT_CHECK_PARENT_INTERVAL_S": "2",
    # The dashboard agent's reporter gathers node and worker stats (psutil over every Ray
    # process) every 5 s, for a dashboard the embedded cluster does not start.
    "REPORTER_UPDATE_INTERVAL_MS": "60000",
}
"""Environment for the embedded cluster's processes (read once, when each starts): slower
housekeeping clocks for what nobody reads there. A variable the user set is left alone."""


def quiet_env(environ: dict[str, str]) -> dict[str, str]:
    """What to add to ``environ`` before the embedded cluster starts. Pure."""
    return {k: v for k, v in QUIET_ENV.items() if k not in environ}


def is_daemon(cmdline: bytes) -> bool:
    """Whether a process's command line (``/proc/PID/cmdline``) is one of the cluster's daemons
    (not the raylet, not a worker). Pure."""
    head = b" ".join(cmdline.split(b"\0")[:3])  # program, maybe "-u", script: not the options
    return any(m in head for m in DAEMON_MARKERS)  # (the raylet's options name the agents' scripts)


def yield_to_ranks() -> list[int]:
    """Renice the daemons among this process's descendants to ``NICE`` and put them under
    ``SCHED_IDLE`` (:func:`idle_process`); returns their pids. Those already at ``NICE`` or
    gone are skipped quietly (a /proc scan: ~1 ms)."""
    done = []
    for pid in descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            if is_daemon(cmdline) and os.getpriority(os.PRIO_PROCESS, pid) < NICE:
                os.setpriority(os.PRIO_PROCESS, pid, NICE)
                idle_process(pid)
                done.append(pid)
        except OSError:
            continue
    return done


def yield_quietly() -> None:
    with contextlib.suppress(Exception):  # a help for timing, never a reason to fail a sweep
        yield_to_ranks()
