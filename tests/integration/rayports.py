"""Free ports for the `ray start --head` processes some integration tests start beside the
session cluster (which holds Ray's default ports, e.g. the dashboard agent's 52365)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

QUIET_LOW = 20000
"""The lowest port handed out here: above Ray's default worker ports (10002-19999)."""


def quiet_range(ephemeral: tuple[int, int]) -> range:
    """Ports the kernel never hands out itself (outside ``ip_local_port_range``, whence every
    ``bind(0)`` and outgoing connection takes one) and Ray never takes by default: a port chosen
    here stays free until the process it is meant for binds it, whatever the other lane's
    processes do meanwhile. A port from ``bind(0)``, released and bound again a moment later,
    can be taken in between: seen, a token head's ``ray_client_server`` port ("Address already
    in use"; ``ray start --block`` then stopped the whole head). Pure."""
    low, high = ephemeral
    if low - QUIET_LOW >= 1000:
        return range(QUIET_LOW, low)
    return range(max(QUIET_LOW, high + 1), 65536)


def _ephemeral() -> tuple[int, int]:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(low), int(high)


_given: set[int] = set()
"""Ports this process handed out: never twice (one head's seven ports are seven)."""


def free_port() -> int:
    """A port in :func:`quiet_range` free on every address now, not handed out before."""
    ports = quiet_range(_ephemeral())
    for port in random.sample(ports, min(200, len(ports))):
        if port in _given:
            continue
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            _given.add(port)
            return port
    raise RuntimeError(f"no free port among 200 tried in {ports}")


def head_ports() -> dict[str, int]:
    """Every port option of `ray start --head` besides the GCS and dashboard ports, each free."""
    names = (
        "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--metrics-export-port",
        "--runtime-env-agent-port", "--ray-client-server-port", "--node-manager-port",
        "--object-manager-port",
    )  # fmt: skip
    return {name: free_port() for name in names}
