"""What the emulated cluster's links are, as `cluster up` recorded them, for `linksweep run`.

`cluster up` writes every link's shape (tc rate, delay) into its state file before it builds
anything; `recorded_link_shapes` reads it back so a sweep can store, next to each link's name,
what that link physically was; `recorded_node_ips` gives its nodes' addresses, node 0 first.
Reading only: nothing here changes the cluster.

May import: raynodes, shapes.
"""

from __future__ import annotations

import os
from typing import Any

from orchestrator.emulated.raynodes import read_state
from orchestrator.emulated.shapes import (
    CTL_LINK,
    DEFAULT_STATE_DIR,
    IFACE_PREFIX,
    EmulatedError,
    LinkShape,
)


def shapes_by_interface(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"ls-slow": {"link": "slow", "rate": "500mbit", "delay": None, "rated_gbps": 0.0625}}``
    for every user link of a recorded state (not ``ctl``, Ray's own). Pure."""
    out = {}
    for link in (state.get("plan") or {}).get("links") or []:
        shape = LinkShape(link["name"], link.get("rate"), link.get("delay"))
        bits = shape.rate_bits_per_s
        out[shape.ifname] = {
            "link": shape.name,
            "rate": shape.rate,
            "delay": shape.delay,
            "rated_gbps": None if bits is None else bits / 8 / 1e9,
        }
    out.pop(IFACE_PREFIX + CTL_LINK, None)
    return out


def recorded_link_shapes(
    address: str | None, state_dir: str | os.PathLike[str] = DEFAULT_STATE_DIR
) -> dict[str, dict[str, Any]]:
    """The shapes of the emulated cluster at ``address``, by interface; ``{}`` when no emulated
    cluster is recorded or the sweep runs on another cluster (or an unreadable state file)."""
    try:
        state = read_state(state_dir)
    except (EmulatedError, OSError):
        return {}
    if not state or not address or not state.get("address"):
        return {}
    if str(address).split("://")[-1] != str(state["address"]):
        return {}
    return shapes_by_interface(state)


def recorded_node_ips(state_dir: str | os.PathLike[str] = DEFAULT_STATE_DIR) -> list[str]:
    """The Ray IPs (ctl addresses) of the emulated nodes recorded in ``state_dir``, node 0
    first; ``[]`` when no cluster is recorded there."""
    state = read_state(state_dir)
    return [n["ip"] for n in state["plan"]["nodes"]] if state else []
