"""Topology discovery at sweep start: what every Ray node has, before any run is planned.

One probe per alive Ray node (``workloads.probe.probe_node``, run everywhere by
``raycluster.nodes.run_on_every_node``: pinned to the node, 0 CPUs, so it schedules even while
the node's CPUs are busy) reports ``nvidia-smi topo -m`` text, NVML's GPU inventory and versions, and
torch's CUDA peer-access matrix as a ``contract.NodeReport``.

Everything after the probe is pure and tested without Ray: ``node_rows`` (rows for the ``nodes``,
``gpus`` and ``gpu_links`` tables), ``links_by_node`` and ``doctor_findings``. A probe that fails
or does not answer becomes a ``NodeReport`` with ``error`` set, never an exception: one broken
node must not hide what the others have.

May import: matrix, orchestrator.raycluster.nodes, workloads.contract, workloads.probe,
workloads.telemetry.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.topology.matrix import Topology, TopoParseError, parse_topo
from workloads.contract import NodeReport

__all__ = [
    "Finding",
    "NodeReport",
    "as_report",
    "capture_on_every_node",
    "discover_nodes",
    "doctor_findings",
    "has_gpus",
    "links_by_node",
    "node_rows",
    "parse_report_topo",
]

CUDA_PROBE_TIMEOUT_S = 90.0  # import torch + cuInit on a cold node with 8 GPUs stays well under
TOPO_TIMEOUT_S = 20.0  # nvidia-smi topo -m answers in < 1 s; minutes mean a hung driver

# Columns of orchestrator.store.TABLES, in table order (``test_discovery`` checks they agree).
GPU_COLUMNS = (
    "name",
    "uuid",
    "pci_bus_id",
    "memory_total_bytes",
    "pcie_gen_current",
    "pcie_gen_max",
    "pcie_width_current",
    "pcie_width_max",
    "power_limit_w",
    "power_default_limit_w",
    "nvlink_active_count",
)

_NV_RE = re.compile(r"^NV\d+$")


_REPORT_FIELDS = {f.name for f in dataclasses.fields(NodeReport)}


def as_report(report: NodeReport | Mapping[str, Any]) -> NodeReport:
    """A ``NodeReport`` from a report or a dict (unknown keys ignored, missing ones default)."""
    if isinstance(report, NodeReport):
        return report
    known = {k: v for k, v in report.items() if k in _REPORT_FIELDS}
    known.setdefault("node_id", "")
    known["inventory"] = list(known.get("inventory") or [])
    return NodeReport(**known)


@dataclass(frozen=True)
class Finding:
    """One thing ``linksweep doctor`` has to say about a node (or, with ``node="*"``, the cluster)."""

    node: str
    """Hostname, or ``"*"`` for findings about the whole cluster."""
    code: str
    """Stable identifier: ``probe_failed``, ``cpu_only``, ``no_gpus``, ``topo_unreadable``,
    ``p2p_blocked_on_nvlink``, ``p2p_unavailable``, ``p2p_unmapped``, ``ray_gpus_missing``,
    ``ray_gpus_logical``, ``versions_differ``, or a ``DoctorWarning`` code
    (``pcie_width_below_max``, ``power_limit_below_default``, ``hot``...)."""
    message: str
    """What was seen and what it means for link benchmarks."""
    invalidates: bool
    """True when link comparisons measured as things stand would not be trustworthy."""
    gpu: int | None = None
    """The GPU index the finding is about, if one."""
    node_id: str = ""
    """Ray node id of ``node`` (hostnames need not be unique); empty for cluster findings."""


def _check_topo(report: NodeReport) -> NodeReport:
    """Mark a report whose topo text does not parse (``topo_status``), keeping the text."""
    if report.topo_text is None:
        return report
    try:
        parse_topo(report.topo_text)
    except TopoParseError as exc:
        return dataclasses.replace(report, topo_status=f"topo parse error: {exc}")
    return report


def discover_nodes(timeout_s: float = 120.0, skip: Collection[str] = ()) -> list[NodeReport]:
    """Probe every alive Ray node once (but those in ``skip``: node ids a sweep keeps off, never
    touched), in parallel; one report per node, sorted by hostname.

    Assumes a Ray connection (``raycluster.session.connect``). A probe that raises, lands on a dead node
    or has not answered after ``timeout_s`` becomes a report with ``error`` set.
    """
    from orchestrator.raycluster.nodes import run_on_every_node
    from workloads.probe import probe_node

    reports = []
    for answer in run_on_every_node(probe_node, timeout_s, skip):
        n = answer.node
        base = {k: n[k] for k in ("node_id", "hostname", "ip", "cpus", "gpus")}
        if answer.error is not None:
            error = answer.error.replace("no answer", "no answer from the discovery probe", 1)
            reports.append(as_report({**base, "error": error}))
            continue
        found: NodeReport = answer.result
        # The driver's ids win: they are what Ray's node table and placement groups use.
        merged = dataclasses.replace(
            found,
            node_id=base["node_id"],
            ip=base["ip"],
            cpus=base["cpus"],
            gpus=base["gpus"],
            hostname=found.hostname or base["hostname"],
        )
        reports.append(_check_topo(merged))
    return sorted(reports, key=lambda r: (r.hostname or "", r.ip or "", r.node_id))


def capture_on_every_node(
    timeout_s: float = 120.0,
) -> list[tuple[str, dict[str, dict[str, str | None]]]]:
    """``workloads.probe.capture_nvidia_smi`` on every alive Ray node, in parallel: one
    ``(hostname, captures)`` per node, sorted by hostname. A node whose task fails or does not
    answer gets every capture with ``text`` None and the error as its ``status``.

    Assumes a Ray connection. The hostname is the node's own where it answered (the one
    ``discover_nodes`` reports), Ray's otherwise."""
    from orchestrator.raycluster.nodes import run_on_every_node
    from workloads.probe import NVIDIA_SMI_CAPTURES, capture_nvidia_smi

    out = []
    for answer in run_on_every_node(capture_nvidia_smi, timeout_s):
        host = answer.node["hostname"] or answer.node["ip"] or answer.node["node_id"]
        if answer.error is not None:
            why = answer.error.replace("no answer", "no answer from the capture task", 1)
            out.append(
                (host, {name: {"text": None, "status": why} for name, *_ in NVIDIA_SMI_CAPTURES})
            )
            continue
        hostname, captures = answer.result
        out.append((hostname or host, captures))
    return sorted(out, key=lambda hc: hc[0])


# ---------------------------------------------------------------------------------------------
# Pure: reports -> table rows, link lookup, doctor findings.
# ---------------------------------------------------------------------------------------------


def parse_report_topo(report: NodeReport | Mapping[str, Any]) -> Topology | None:
    """The report's parsed topology, or None (no text, or text that does not parse)."""
    report = as_report(report)
    if report.topo_text is None:
        return None
    try:
        return parse_topo(report.topo_text)
    except TopoParseError:
        return None


def _nvml_column(report: NodeReport) -> str:
    if report.error is not None:
        return f"absent: discovery probe failed: {report.error}"
    if report.nvml_ok:
        return "ok"
    return f"absent: {report.nvml_status or 'not probed'}"


def _node_name(report: NodeReport) -> str:
    return report.hostname or report.ip or report.node_id


def node_rows(
    sweep_id: str, reports: Iterable[NodeReport | Mapping[str, Any]]
) -> dict[str, list[dict]]:
    """Rows for the ``nodes``, ``gpus`` and ``gpu_links`` tables, keyed by table name.

    ``nodes.node`` (and ``gpus.node``, ``gpu_links.node``) is the hostname. ``gpu_links`` holds
    every ordered pair of distinct GPUs of a topology that parses; a node whose text does not
    parse keeps it in ``topo_text`` and gets no link rows (its report's ``topo_status`` says why).
    """
    out: dict[str, list[dict]] = {"nodes": [], "gpus": [], "gpu_links": []}
    for raw in reports:
        r = as_report(raw)
        node = _node_name(r)
        out["nodes"].append(
            {
                "sweep_id": sweep_id,
                "node": node,
                "node_id": r.node_id,
                "ip": r.ip,
                "cpus": float(r.cpus),
                "gpus": float(r.gpus),
                "topo_text": r.topo_text,
                "driver_version": r.driver_version,
                "cuda_version": r.cuda_version,
                "nvml": _nvml_column(r),
            }
        )
        for gpu in r.inventory:
            out["gpus"].append(
                {
                    "sweep_id": sweep_id,
                    "node": node,
                    "gpu_index": int(gpu["index"]),
                    **{c: gpu.get(c) for c in GPU_COLUMNS},
                }
            )
        topo = parse_report_topo(r)
        if topo is not None:
            for (a, b), link in topo.links.items():
                out["gpu_links"].append(
                    {"sweep_id": sweep_id, "node": node, "gpu_a": a, "gpu_b": b, "link": link}
                )
    return out


def links_by_node(gpu_links_rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[tuple, str]]:
    """``gpu_links`` rows -> ``{node: {("GPU0", "GPU1"): "NV2", ...}}``, the shape that
    ``orchestrator.topology.matrix.run_link_class`` takes for one node."""
    out: dict[str, dict[tuple, str]] = {}
    for row in gpu_links_rows:
        out.setdefault(row["node"], {})[(row["gpu_a"], row["gpu_b"])] = row["link"]
    return out


def has_gpus(report: NodeReport | Mapping[str, Any]) -> bool:
    """Any physical GPU seen on the node, by NVML, CUDA or nvidia-smi."""
    r = as_report(report)
    topo = parse_report_topo(r)
    return bool(r.inventory) or r.cuda_device_count > 0 or bool(topo and topo.gpus)


def _physical_gpu_count(r: NodeReport, topo: Topology | None) -> int:
    return max(len(r.inventory), r.cuda_device_count, len(topo.gpus) if topo else 0)


def _p2p_findings(node: str, r: NodeReport, topo: Topology | None) -> list[Finding]:
    if r.p2p is None:
        if has_gpus(r):
            return [
                Finding(
                    node,
                    "p2p_unavailable",
                    f"No P2P access matrix: {r.cuda_status or 'not probed'}. Whether GPUs can "
                    "reach each other directly is unknown; only the transports recorded per run "
                    "tell what NCCL used.",
                    invalidates=False,
                )
            ]
        return []
    if topo is None or len(r.p2p) != len(topo.gpus):
        have = "no readable topology" if topo is None else f"{len(topo.gpus)} GPUs in topo -m"
        return [
            Finding(
                node,
                "p2p_unmapped",
                f"P2P matrix has {len(r.p2p)} GPUs but there is {have}, so P2P cannot be "
                "matched against the link types.",
                invalidates=False,
            )
        ]
    out: list[Finding] = []
    pcie_blocked = []
    n = len(r.p2p)
    for i in range(n):
        for j in range(i + 1, n):
            if r.p2p[i][j] is not False and r.p2p[j][i] is not False:
                continue
            link = topo.links.get((f"GPU{i}", f"GPU{j}"), "?")
            if _NV_RE.match(link):
                out.append(
                    Finding(
                        node,
                        "p2p_blocked_on_nvlink",
                        f"GPU{i} and GPU{j} share {link} but CUDA reports no peer access between "
                        "them (IOMMU/ACS, a VM, or a driver fault). NCCL will route their "
                        "traffic through host memory, so an NVLink variant measures SHM.",
                        invalidates=True,
                        gpu=i,
                    )
                )
            else:
                pcie_blocked.append(f"GPU{i}-GPU{j} ({link})")
    if pcie_blocked:
        out.append(
            Finding(
                node,
                "p2p_unavailable",
                f"No CUDA peer access over PCIe for {', '.join(pcie_blocked)}. NCCL uses SHM "
                "(through host memory) for these pairs whatever the variant asks; a PCIe P2P "
                "variant on them measures the same thing as an SHM variant.",
                invalidates=False,
            )
        )
    return out


def _node_findings(r: NodeReport, answered: list[NodeReport]) -> list[Finding]:
    """The findings about one node; ``answered`` are all nodes whose probe ran."""
    from workloads.telemetry import doctor_warnings

    node = _node_name(r)
    out: list[Finding] = []
    if r.error is not None:
        out.append(
            Finding(
                node,
                "probe_failed",
                f"Could not probe this node: {r.error}. Its GPUs and links are unchecked, "
                "and runs placed there may fail the same way.",
                invalidates=True,
            )
        )
        return out
    topo = parse_report_topo(r)
    physical = _physical_gpu_count(r, topo)
    if physical == 0:
        if r.gpus > 0:
            out.append(
                Finding(
                    node,
                    "ray_gpus_logical",
                    f"Ray advertises {r.gpus:g} GPU(s) here but none is physically present "
                    f"({r.nvml_status or r.topo_status}): they are logical resources, and "
                    "ranks placed on them run without CUDA.",
                    invalidates=False,
                )
            )
        elif any(has_gpus(o) for o in answered):
            out.append(
                Finding(
                    node,
                    "no_gpus",
                    f"No GPUs on this node ({r.nvml_status or r.topo_status}); GPU runs "
                    "are not placed here.",
                    invalidates=False,
                )
            )
        return out
    if r.gpus == 0:
        out.append(
            Finding(
                node,
                "ray_gpus_missing",
                f"{physical} GPU(s) here but Ray advertises none (start Ray with "
                "--num-gpus): sweeps run the CPU path (gloo) on this node.",
                invalidates=False,
            )
        )
    if r.topo_text is not None and topo is None:
        out.append(
            Finding(
                node,
                "topo_unreadable",
                f"nvidia-smi topo -m output could not be read ({r.topo_status}); runs here "
                "get link class 'unknown'.",
                invalidates=False,
            )
        )
    elif r.topo_text is None:
        out.append(
            Finding(
                node,
                "topo_unreadable",
                f"No nvidia-smi topo -m output ({r.topo_status}); runs here get link class "
                "'unknown'.",
                invalidates=False,
            )
        )
    for w in doctor_warnings(r.inventory):
        out.append(Finding(node, w.code, w.message, w.invalidates, gpu=w.gpu))
    out.extend(_p2p_findings(node, r, topo))
    return out


def doctor_findings(reports: Iterable[NodeReport | Mapping[str, Any]]) -> list[Finding]:
    """Everything ``linksweep doctor`` warns about, from discovery reports; pure.

    Per node: a failed probe, GPUs that Ray does not advertise (or advertises without hardware),
    an unreadable topology, ``telemetry.doctor_warnings`` on the NVML inventory (PCIe below max,
    power limit below default, hot GPU, NVLink down), and CUDA P2P access against the topo link
    (no peer access on an ``NV#`` pair invalidates). Cluster-wide (``node="*"``): no GPUs anywhere
    (``cpu_only``), and NCCL/driver/CUDA versions that differ between GPU nodes.
    """
    reps = [as_report(r) for r in reports]
    out: list[Finding] = []
    answered = [r for r in reps if r.error is None]
    for r in reps:
        out.extend(dataclasses.replace(f, node_id=r.node_id) for f in _node_findings(r, answered))

    if answered and not any(has_gpus(r) for r in answered):
        out.append(
            Finding(
                "*",
                "cpu_only",
                "no GPUs found on any node: link variants cannot differ on this cluster; "
                "the CPU path (gloo) still runs sweeps",
                invalidates=False,
            )
        )
    gpu_nodes = [r for r in answered if has_gpus(r)]
    for label, attr in (
        ("NCCL", "nccl_version"),
        ("driver", "driver_version"),
        ("CUDA", "cuda_version"),
    ):
        seen = {getattr(r, attr) for r in gpu_nodes if getattr(r, attr)}
        if len(seen) > 1:
            detail = ", ".join(f"{_node_name(r)}={getattr(r, attr)}" for r in gpu_nodes)
            out.append(
                Finding(
                    "*",
                    "versions_differ",
                    f"{label} versions differ between nodes ({detail}). Cross-node (spread) "
                    "runs mix them and pack runs on different nodes are not like for like; "
                    "compare variants measured on the same node.",
                    invalidates=False,
                )
            )
    return out
