"""tests/integration/rayports.py: the ports the tests' own Ray heads and rendezvous bind are ports
nothing else on the machine takes meanwhile (the kernel's ephemeral range is what every other
process draws from)."""

from __future__ import annotations

import socket

from tests.integration.rayports import QUIET_LOW, _ephemeral, free_port, head_ports, quiet_range


def test_the_quiet_range_sits_below_the_kernels_ephemeral_range_and_above_rays_workers():
    assert quiet_range((32768, 60999)) == range(QUIET_LOW, 32768)  # Linux's default
    assert quiet_range((20500, 60999)) == range(61000, 65536)  # too little room below it
    assert quiet_range((1024, 65535)) == range(0)  # none at all: free_port says so


def test_a_free_port_is_outside_the_ephemeral_range_bindable_and_never_handed_out_twice():
    low, high = _ephemeral()
    ports = [free_port() for _ in range(20)] + list(head_ports().values())
    assert len(set(ports)) == len(ports)
    assert all(not low <= p <= high and p >= QUIET_LOW for p in ports), ports
    with socket.socket() as s:
        s.bind(("", ports[0]))  # free on every address, as the check promised
