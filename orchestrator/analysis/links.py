"""What each link of a sweep physically is: one ``link_descriptions`` row per link. Pure.

A link in a sweep file is only env vars (``GLOO_SOCKET_IFNAME: ls-slow``,
``NCCL_P2P_DISABLE: "1"``). ``describe_links`` turns them, plus what the emulated cluster
recorded at ``cluster up`` (its tc rate and delay per interface), into a row a reader can
understand without the code: kind, interface, rate, delay, rated rate in GB/s (the unit of
busbw) and one line of text. On GPUs the topology class and the transport NCCL really used are
per run (``runs.link_class``, ``runs.effective_transport``); the ``link_overview`` view joins
them with these rows and with the measured busbw.

Off the emulated cluster, a link's rated rate comes from the GPU inventory and topology the
sweep recorded first (``gpus``, ``gpu_links``): NVLink links x per-link rate, or the GPUs' PCIe
generation x width (``orchestrator.analysis.rated``, which says why each figure and where it cannot be
known). The class a run really gets depends on its GPUs; a link is rated only when every GPU pair
a ``pack`` run could get gives the same rate, otherwise NULL with each class's rate in words.

``link_label`` writes a link's name with its rated rate and measured busbw, the way every table
and the headline show it: ``slow (tc 500mbit = 0.0625 GB/s; measured busbw 0.055 GB/s = 88%)``.

May import: rated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.analysis.rated import Rated, idle_gen_text, rated_link, share_words

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
    gpus: Sequence[Mapping[str, Any]] = (),
    gpu_links: Sequence[Mapping[str, Any]] = (),
    placements: Sequence[str] = ("pack",),
) -> list[dict[str, Any]]:
    """One ``link_descriptions`` row per link of the sweep file.

    ``links``: the spec's ``links`` (name -> env). ``emulated``: the emulated cluster's shapes
    by interface (``orchestrator.emulated.describe.recorded_link_shapes``), ``{}`` elsewhere.
    ``gpus``, ``gpu_links``: the sweep's inventory and topology rows (``discovery.node_rows``);
    ``placements``: the spec's ``grid.placement``.
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
            rated = rate_off_emulated(env, gpus, gpu_links, placements)
            text += f"; rated: {rated.text}"
            if rated.faults:
                text += "; PCIE TRAINED BELOW MAXIMUM: " + "; ".join(rated.faults)
            extra = [*rated.notes, idle_gen_text(rated.idle_gen)]
            text += "".join(f"; {x}" for x in extra if x)
            row |= {"rated_gbps": rated.gbps, "rated_source": rated.source, "description": text}
        out.append(row)
    return out


def rate_off_emulated(
    env: Mapping[str, str],
    gpus: Sequence[Mapping[str, Any]],
    gpu_links: Sequence[Mapping[str, Any]],
    placements: Sequence[str] = ("pack",),
) -> Rated:
    """The rated rate of a link that is not the emulated cluster's: the rate of the GPU pairs
    its runs can get (``pack``: any pair of one node's topology), when they all agree; NULL with
    each class's rate in words when they differ; ``spread`` runs cross nodes (NET: not rated)."""
    p2p_off = str(env.get("NCCL_P2P_DISABLE")) == "1" or env.get("NCCL_P2P_LEVEL") == "LOC"
    shm_off = str(env.get("NCCL_SHM_DISABLE")) == "1"
    if "pack" not in placements:
        return rated_link("NET", gpus)
    if not gpus:
        return rated_link("unknown", ())
    by_gpu = {(g.get("node"), f"GPU{g.get('gpu_index')}"): g for g in gpus}
    pairs: dict[tuple, Rated] = {}
    for r in gpu_links:
        ends = tuple(sorted((r["gpu_a"], r["gpu_b"])))
        ga, gb = by_gpu.get((r["node"], ends[0])), by_gpu.get((r["node"], ends[1]))
        if (r["node"], *ends) in pairs or ga is None or gb is None:
            continue
        pairs[(r["node"], *ends)] = rated_link(
            r["link"], [ga, gb], p2p_off=p2p_off, shm_off=shm_off
        )
    if not pairs:
        return Rated(None, None, "no two GPUs on one node in the topology: no GPU pair to rate")
    faults = tuple(dict.fromkeys(f for x in pairs.values() for f in x.faults))
    notes = tuple(dict.fromkeys(n for x in pairs.values() for n in x.notes))
    idle = tuple(dict.fromkeys(n for x in pairs.values() for n in x.idle_gen))
    spread = "; spread runs cross nodes (NET): not rated" if "spread" in placements else ""
    distinct = {(x.gbps, x.source, x.text) for x in pairs.values()}
    if len(distinct) == 1:
        one = next(iter(pairs.values()))
        every = "every GPU pair, " if len(pairs) > 1 else ""
        return Rated(one.gbps, one.source, every + one.text + spread, faults, notes, idle)
    words = sorted({x.text for x in pairs.values()})
    return Rated(
        None, None, "depends on the GPUs a run gets (see link_classes): " + " | ".join(words)
        + spread, faults, notes, idle,
    )  # fmt: skip


def fmt_gbps(x: float | None) -> str:
    """GB/s with 3 significant digits, never in e-notation."""
    if x is None:
        return "–"
    return f"{x:.3g}" if x >= 0.001 else f"{x:.6f}".rstrip("0")


def share_text(overview: Mapping[str, Any]) -> str | None:
    """``88% of the tc rate 500mbit`` / ``71% of PCIe``: measured busbw as a share of the rated
    rate (``link_overview.busbw_share``); None without both. Above 100% it says why that can
    happen (NVLS reduces in the switch), never clipped (``rated.share_words``)."""
    share = overview.get("busbw_share")
    if share is None:
        return None
    what = {"tc": f"the tc rate {overview.get('rate')}", "nvlink": "NVLink", "pcie": "PCIe"}
    source = overview.get("rated_source")
    return share_words(share, source, what.get(source, "the rated rate"))


def link_label(name: str, overview: Mapping[str, Any] | None) -> str:
    """``slow (tc 500mbit = 0.0625 GB/s; measured busbw 0.055 GB/s = 88% of the tc rate
    500mbit)``; NVLink/PCIe links ``(NVLink 300 GB/s; ...)``; the bare name without data."""
    if not overview:
        return name
    parts = []
    rated = overview.get("rated_gbps")
    if overview.get("rate"):
        parts.append(f"tc {overview['rate']}" + (f" = {fmt_gbps(rated)} GB/s" if rated else ""))
    elif overview.get("kind") == "emulated":
        parts.append("unshaped")
    elif rated and overview.get("rated_source") in ("nvlink", "pcie"):
        src = "NVLink" if overview["rated_source"] == "nvlink" else "PCIe"
        parts.append(f"{src} {fmt_gbps(rated)} GB/s")
    if overview.get("delay"):
        parts.append(f"+{overview['delay']}")
    if overview.get("measured_busbw_gbps") is not None:
        share = share_text(overview)
        parts.append(
            f"measured busbw {fmt_gbps(overview['measured_busbw_gbps'])} GB/s"
            + (f" = {share}" if share else "")
        )
    return f"{name} ({'; '.join(parts)})" if parts else name
