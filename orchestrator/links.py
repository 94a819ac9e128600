"""What each link of a sweep physically is: one ``link_descriptions`` row per link. Pure.

A link in a sweep file is only env vars (``GLOO_SOCKET_IFNAME: ls-slow``,
``NCCL_P2P_DISABLE: "1"``). ``describe_links`` turns them, plus what the emulated cluster
recorded at ``cluster up`` (its tc rate and delay per interface), into a row a reader can
understand without the code: kind, interface, rate, delay, rated rate in GB/s (the unit of
busbw) and one line of text. On GPUs the topology class and the transport NCCL really used are
per run (``runs.link_class``, ``runs.effective_transport``); the ``link_overview`` view joins
them with these rows and with the measured busbw.

``link_label`` writes a link's name with its rated rate and measured busbw, the way every table
and the headline show it: ``slow (tc 500mbit = 0.0625 GB/s; measured 0.060 GB/s)``.

May import: nothing (the standard library only).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

IFACE_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")

# What a link's NCCL env asks for, in words (the usual ways to push traffic off a fast path).
NCCL_MEANINGS = {
    ("NCCL_P2P_DISABLE", "1"): "NCCL P2P off (no NVLink/PCIe peer-to-peer; via host memory)",
    ("NCCL_SHM_DISABLE", "1"): "NCCL shared memory off",
    ("NCCL_IB_DISABLE", "1"): "InfiniBand off (TCP sockets)",
    ("NCCL_NET_GDR_LEVEL", "0"): "GPUDirect RDMA off",
    ("NCCL_P2P_LEVEL", "LOC"): "NCCL P2P only within one GPU",
}


def describe_links(
    links: Mapping[str, Mapping[str, str]],
    emulated: Mapping[str, Mapping[str, Any]],
    sweep_id: str,
) -> list[dict[str, Any]]:
    """One ``link_descriptions`` row per link of the sweep file.

    ``links``: the spec's ``links`` (name -> env). ``emulated``: the emulated cluster's shapes
    by interface (``orchestrator.emulated.describe.recorded_link_shapes``), ``{}`` elsewhere.
    """
    out = []
    for name, env in links.items():
        env = dict(env or {})
        iface = next((env[v] for v in IFACE_VARS if env.get(v)), None)
        shape = emulated.get(iface) if iface else None
        row = {
            "sweep_id": sweep_id,
            "link": name,
            "kind": "host",
            "interface": iface,
            "rate": None,
            "delay": None,
            "rated_gbps": None,
            "rated_source": None,
            "description": "",
        }
        if shape is not None:
            rate, delay = shape.get("rate"), shape.get("delay")
            parts = [f"tc rate {rate}" if rate else "unshaped (no tc rate)"]
            if delay:
                parts.append(f"+{delay} one-way delay")
            row |= {
                "kind": "emulated",
                "rate": rate,
                "delay": delay,
                "rated_gbps": shape.get("rated_gbps"),
                "rated_source": "tc" if shape.get("rated_gbps") is not None else None,
                "description": f"emulated link {iface} between network namespaces: "
                + ", ".join(parts),
            }
        else:
            meanings = [
                NCCL_MEANINGS[(k, str(v))] for k, v in env.items() if (k, str(v)) in NCCL_MEANINGS
            ]
            nccl = any(k.startswith("NCCL_") for k in env)
            row["kind"] = "nccl" if nccl or not env else "host"
            if meanings:
                text = "; ".join(meanings)
            elif not env:
                text = "no env change: NCCL's default path (NVLink/P2P where the GPUs allow), or "
                text += "loopback/host network with gloo on CPU"
            else:
                text = "env " + " ".join(f"{k}={v}" for k, v in env.items())
            if iface:
                text += f"; traffic on interface {iface}"
            row["description"] = text
        out.append(row)
    return out


def fmt_gbps(x: float | None) -> str:
    """GB/s with 3 significant digits, never in e-notation."""
    if x is None:
        return "–"
    return f"{x:.3g}" if x >= 0.001 else f"{x:.6f}".rstrip("0")


def link_label(name: str, overview: Mapping[str, Any] | None) -> str:
    """``slow (tc 500mbit = 0.0625 GB/s; measured 0.060 GB/s)``; the bare name without data."""
    if not overview:
        return name
    parts = []
    if overview.get("rate"):
        rated = overview.get("rated_gbps")
        parts.append(f"tc {overview['rate']}" + (f" = {fmt_gbps(rated)} GB/s" if rated else ""))
    elif overview.get("kind") == "emulated":
        parts.append("unshaped")
    if overview.get("delay"):
        parts.append(f"+{overview['delay']}")
    if overview.get("measured_busbw_gbps") is not None:
        parts.append(f"measured busbw {fmt_gbps(overview['measured_busbw_gbps'])} GB/s")
    return f"{name} ({'; '.join(parts)})" if parts else name
