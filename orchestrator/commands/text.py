"""Plain text the inspecting commands print (``topo``, ``doctor``, ``transports``): aligned
columns, the topology matrix, the NVML inventory, a node's section. Pure string functions of
the parsed reports.

May import: orchestrator.topology.discovery, orchestrator.topology.matrix.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.topology import matrix
from orchestrator.topology.discovery import NodeReport, parse_report_topo


def grid(header: Sequence[str], rows: Sequence[Sequence[object]], indent: str = "  ") -> str:
    """Left-aligned columns, two spaces apart; None shows as '-'."""
    cells = [[str(h) for h in header]] + [["-" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join(
        indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in cells
    )


def topo_table(t: matrix.Topology) -> str:
    header = ["", *t.gpus, *t.nics, "CPU Affinity", "NUMA Affinity"]
    rows = []
    for a in t.gpus:
        rows.append(
            [
                a,
                *("X" if a == b else t.links[(a, b)] for b in t.gpus),
                *(t.nic_links[(a, nic)] for nic in t.nics),
                t.cpu_affinity.get(a),
                t.numa_affinity.get(a),
            ]
        )
    text = grid(header, rows)
    if t.nic_legend:
        text += "\n  NICs: " + ", ".join(f"{k}={v}" for k, v in t.nic_legend.items())
    return text


def _fmt_w(w: float | None) -> str | None:
    return None if w is None else f"{w:.0f}"


def inventory_table(inventory: list[dict]) -> str:
    header = [
        "gpu",
        "name",
        "pci_bus_id",
        "mem_GB",
        "pcie_gen",
        "pcie_width",
        "power_W/default",
        "temp_C",
        "nvlinks",
    ]
    rows = []
    for g in inventory:
        mem = g.get("memory_total_bytes")
        rows.append(
            [
                g.get("index"),
                g.get("name"),
                g.get("pci_bus_id"),
                None if mem is None else f"{mem / 1e9:.1f}",
                f"{g.get('pcie_gen_current')}/{g.get('pcie_gen_max')}",
                f"x{g.get('pcie_width_current')}/x{g.get('pcie_width_max')}",
                f"{_fmt_w(g.get('power_limit_w'))}/{_fmt_w(g.get('power_default_limit_w'))}",
                None if g.get("temp_c") is None else f"{g['temp_c']:.0f}",
                g.get("nvlink_active_count"),
            ]
        )
    return grid(header, rows)


def node_title(r: NodeReport) -> str:
    return (
        f"== node {r.hostname or '?'} ({r.ip or '?'}, Ray node {r.node_id[:12]}): "
        f"Ray advertises {r.cpus:g} CPU, {r.gpus:g} GPU"
    )


def print_node(r: NodeReport) -> bool:
    """The node's title, then its topology and inventory, or why its probe failed; True when
    the probe answered (the caller may print more of it)."""
    print(node_title(r))
    if r.error is not None:
        print(f"probe failed: {r.error}")
        return False
    print_node_topology(r)
    return True


def print_node_topology(r: NodeReport) -> None:
    t = parse_report_topo(r)
    if t is not None:
        print("topology (nvidia-smi topo -m):")
        print(topo_table(t))
    elif r.topo_text is None:
        print(f"topology: no GPUs / nvidia-smi not found: {r.topo_status}")
    else:
        print(f"topology: {r.topo_status}; the text as nvidia-smi printed it:")
        print(r.topo_text.rstrip())
    if r.nvml_ok and r.inventory:
        print("GPUs (NVML):")
        print(inventory_table(r.inventory))
    elif r.nvml_ok:
        print(f"GPUs (NVML): none ({r.nvml_status})")
    else:
        print(f"GPUs (NVML): no GPUs / NVML absent: {r.nvml_status or 'not probed'}")


def p2p_table(p2p: list[list[bool | None]]) -> str:
    n = len(p2p)
    names = [f"GPU{i}" for i in range(n)]
    rows = [
        [names[i], *("X" if v is None else ("yes" if v else "NO") for v in p2p[i])]
        for i in range(n)
    ]
    return grid(["", *names], rows)
