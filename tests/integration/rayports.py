"""Free ports for the `ray start --head` processes some integration tests start beside the
session cluster (which holds Ray's default ports, e.g. the dashboard agent's 52365)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port free on 127.0.0.1 now (bound for a moment, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def head_ports() -> dict[str, int]:
    """Every port option of `ray start --head` besides the GCS and dashboard ports, each free."""
    names = (
        "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--metrics-export-port",
        "--runtime-env-agent-port", "--ray-client-server-port", "--node-manager-port",
        "--object-manager-port",
    )  # fmt: skip
    return {name: free_port() for name in names}
