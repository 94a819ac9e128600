"""Is a ``running`` sweep's driver still alive? The rule is pure; two small helpers look.

The driver stores its host, pid and a heartbeat (every ``HEARTBEAT_S``) in its ``sweeps`` row.
A ``running`` sweep is dead when, on the driver's own host, its pid no longer exists, or, seen
from any host, its heartbeat is older than ``STALE_S``. Whoever next opens the database marks
such a sweep ``interrupted`` (``db.py``), so every command that lists sweeps shows the truth.
A fleet check's row has a driver too: ``DRIVER_TABLES`` names each such table.

May import: queries.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Callable
from typing import Any, NamedTuple

from orchestrator.store import queries as Q
from orchestrator.store.queries import Query

HEARTBEAT_S = 15.0
STALE_S = 180.0  # 12 missed heartbeats: the driver (or its host) is gone


class DriverTable(NamedTuple):
    """A table whose rows each have a driver process and its heartbeat (a sweep, a fleet check)."""

    key: str
    running: Query
    """The rows still ``running``, with their driver's host, pid and heartbeat."""
    when_driver_gone: dict[str, Any]
    """What a row whose driver is gone gets, beside ``interrupted`` and its finish time."""


DRIVER_TABLES = {
    "sweeps": DriverTable("sweep_id", Q.RUNNING_SWEEPS, {}),
    "fleet_checks": DriverTable(
        "fleet_id", Q.RUNNING_FLEETS, {"error": "its driver stopped before the end"}
    ),
}


def this_host() -> str:
    return socket.gethostname()


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True  # no /proc: trust kill(0)


def driver_gone(
    sweep: dict,
    host: str,
    now: dt.datetime,
    alive: Callable[[int], bool] = pid_alive,
    stale_s: float = STALE_S,
) -> bool:
    """True when ``sweep`` (a ``sweeps`` row) says ``running`` but its driver is gone."""
    if sweep.get("status") != "running":
        return False
    pid = sweep.get("driver_pid")
    if sweep.get("driver_host") == host and pid is not None and not alive(int(pid)):
        return True
    beat = sweep.get("heartbeat_at") or sweep.get("started_at")
    if beat is None:
        return False
    if beat.tzinfo is None:
        beat = beat.replace(tzinfo=dt.timezone.utc)
    return (now - beat).total_seconds() > stale_s
