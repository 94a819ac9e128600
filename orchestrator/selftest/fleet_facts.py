"""``linksweep selftest``'s fleet checks, pure: the SQL that reads the selftest's one fleet check
back, the facts it gives (:class:`FleetFacts`), and the problems of the ``fleet`` and
``fleet_gpu`` checks (:func:`fleet_problems`, :func:`fleet_gpu_problems`).

``fleet`` proves the check ran end to end on every node: it finished, every node's compute probe
trained, every intra-node and inter-node all_reduce was measured, health was read. Suspects do
not fail it (a real fleet may have a slow node; naming it is the check's job): they are listed in
the detail and in ``fleet.txt``. ``fleet_gpu`` proves the GPU paths: the probe ran on CUDA, NVML
read PCIe gen and width per GPU at idle and under load, and a node with two GPUs or more measured
its intra-node all_reduce over NCCL.

The selftest's database holds one fleet check, so the SQL needs no parameter.

May import: nothing (the standard library only).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

FLEET_CHECKS_SQL = """
SELECT fleet_id, status, error, n_nodes, pairs_mode, wall_s, n_suspects
FROM fleet_checks ORDER BY started_at, fleet_id
"""
FLEET_NODES_SQL = """
SELECT fleet_id, node_id, hostname, ip, gpus, compute_status, compute_error,
       compute_tokens_per_s, compute_device, health, health_note
FROM fleet_nodes ORDER BY ip, hostname, node_id
"""
FLEET_PAIRS_SQL = """
SELECT fleet_id, link, kind, node_a, node_b, backend, status, error, busbw_gbps
FROM fleet_pairs ORDER BY link, kind, round, node_a, node_b
"""
FLEET_SUSPECTS_SQL = "SELECT kind, hostname, ip, partner_ip, link, why FROM fleet_suspects"


@dataclass(frozen=True)
class FleetFacts:
    """The selftest's fleet check: whether ``run_fleet`` returned (``why_not`` when it raised)
    and the rows it stored (a check that raised still stores its row, status failed)."""

    ran: bool
    why_not: str = ""
    checks: tuple[dict, ...] = ()
    """Rows of :data:`FLEET_CHECKS_SQL`."""
    nodes: tuple[dict, ...] = ()
    """Rows of :data:`FLEET_NODES_SQL` (``health`` is the JSON text, or None)."""
    pairs: tuple[dict, ...] = ()
    """Rows of :data:`FLEET_PAIRS_SQL`."""
    suspects: tuple[dict, ...] = ()
    """Rows of :data:`FLEET_SUSPECTS_SQL`."""


def _first_line(text) -> str:
    return (str(text or "").splitlines() or [""])[0]


def _host(n: dict) -> str:
    return n["hostname"] or n["node_id"]


def _health(n: dict) -> dict:
    """A node's stored health JSON as a dict (``{}`` when none)."""
    h = n.get("health")
    if isinstance(h, str):
        try:
            h = json.loads(h)
        except ValueError:
            return {}
    return h if isinstance(h, dict) else {}


def suspects_text(facts: FleetFacts) -> str:
    """The suspects, one phrase each; ``none`` when the check named none."""
    if not facts.suspects:
        return "suspects: none"
    named = [
        f"{s['kind']} {s['hostname'] or s['ip']}"
        + (f"-{s['partner_ip']}" if s["partner_ip"] else "")
        + (f" ({s['why']})" if s["why"] else "")
        for s in facts.suspects
    ]
    return f"suspects ({len(named)}, see fleet.txt): " + "; ".join(named)


def _check_row(facts: FleetFacts) -> tuple[dict | None, list[str]]:
    if len(facts.checks) != 1:
        why = f" ({facts.why_not})" if facts.why_not else ""
        return None, [f"{len(facts.checks)} fleet checks stored, expected 1{why}"]
    (check,) = facts.checks
    if check["status"] != "ok":
        return check, [f"status {check['status']}: {_first_line(check['error'] or facts.why_not)}"]
    return check, []


def fleet_problems(facts: FleetFacts) -> list[str]:
    """Why the ``fleet`` check fails: one line each, empty when it passes."""
    check, problems = _check_row(facts)
    if check is None:
        return problems
    nodes = facts.nodes
    if not nodes or len(nodes) != check["n_nodes"]:
        problems.append(f"{len(nodes)} node row(s) stored for n_nodes {check['n_nodes']}")
    for n in nodes:
        if n["compute_status"] != "ok":
            problems.append(
                f"{_host(n)}: compute probe {n['compute_status']}: "
                f"{_first_line(n['compute_error'])}"
            )
        elif not n["compute_tokens_per_s"] or n["compute_tokens_per_s"] <= 0:
            problems.append(f"{_host(n)}: compute probe tokens/s {n['compute_tokens_per_s']}")
        if not _health(n) and not n["health_note"]:
            problems.append(f"{_host(n)}: no health read")
    links = sorted({p["link"] for p in facts.pairs}) or ["default"]
    for link in links:
        intra = {p["node_a"]: p for p in facts.pairs if p["link"] == link and p["kind"] == "intra"}
        for n in nodes:
            p = intra.get(n["node_id"])
            if p is None:
                problems.append(f"{_host(n)}: no intra-node row for link {link}")
            elif p["status"] == "skipped" and (n["gpus"] or 0) != 1:
                problems.append(f"{_host(n)}: intra-node skipped with {n['gpus']} GPU(s)")
            elif p["status"] not in ("ok", "skipped"):
                problems.append(f"{_host(n)}: intra-node {p['status']}: {_first_line(p['error'])}")
        inter = [p for p in facts.pairs if p["link"] == link and p["kind"] == "inter"]
        want = len(nodes) * (len(nodes) - 1) // 2 if check["pairs_mode"] == "all" else None
        if len(nodes) >= 2 and (not inter or (want is not None and len(inter) != want)):
            expected = want if want is not None else "at least 1"
            problems.append(f"link {link}: {len(inter)} inter-node pair(s), expected {expected}")
        host = {n["node_id"]: _host(n) for n in nodes}
        problems += [
            f"pair {host.get(p['node_a'], p['node_a'])}-{host.get(p['node_b'], p['node_b'])} "
            f"({link}): {p['status']}: {_first_line(p['error'])}"
            for p in inter
            if p["status"] != "ok"
        ]
    return problems


def fleet_detail(facts: FleetFacts) -> str:
    """The passing check's detail: what was measured, the wall time, and the suspects."""
    (check,) = facts.checks
    rates = [n["compute_tokens_per_s"] for n in facts.nodes]
    intra = [p["busbw_gbps"] for p in facts.pairs if p["kind"] == "intra" and p["busbw_gbps"]]
    n_inter = sum(p["kind"] == "inter" for p in facts.pairs)
    return (
        f"{len(facts.nodes)} node(s), compute {min(rates):.0f}-{max(rates):.0f} tokens/s, "
        f"intra busbw {', '.join(f'{b:.2f}' for b in intra) or '-'} GB/s, "
        f"{n_inter} inter-node pair(s), {check['wall_s'] or 0:.0f} s; {suspects_text(facts)}"
    )


def _pcie_read(gpus: list) -> bool:
    return bool(gpus) and all(
        isinstance(g, dict)
        and g.get("pcie_gen_current") is not None
        and g.get("pcie_width_current") is not None
        for g in gpus
    )


def fleet_gpu_problems(facts: FleetFacts) -> list[str]:
    """Why the ``fleet_gpu`` check fails on a cluster with CUDA: one line each, empty when the
    GPU nodes' probe ran on CUDA, NVML read PCIe at idle and under load, and every node with
    two GPUs or more measured its intra-node all_reduce over NCCL."""
    check, problems = _check_row(facts)
    if check is None:
        return problems
    gpu_nodes = [n for n in facts.nodes if (n["gpus"] or 0) >= 1]
    if not gpu_nodes:
        problems.append("no fleet node has a GPU (Ray num_gpus 0 everywhere)")
    for n in gpu_nodes:
        device = n["compute_device"] or ""
        if not device.startswith("cuda"):
            problems.append(f"{_host(n)}: compute probe on {device or 'nothing'}, expected cuda")
        health = _health(n)
        idle = (health.get("idle") or {}).get("gpus") or []
        loaded = (health.get("under_load") or {}).get("gpus") or []
        if len(idle) < int(n["gpus"]) or not _pcie_read(idle):
            note = n["health_note"] or "no per-GPU PCIe gen/width"
            problems.append(f"{_host(n)}: idle health of {len(idle)} GPU(s): {note}")
        if not _pcie_read(loaded):
            problems.append(f"{_host(n)}: no under-load PCIe reading ({len(loaded)} GPU(s))")
        if n["gpus"] >= 2:
            problems += [
                f"{_host(n)}: intra-node ({p['link']}) backend {p['backend']}, expected nccl"
                for p in facts.pairs
                if p["kind"] == "intra" and p["node_a"] == n["node_id"] and p["backend"] != "nccl"
            ]
    return problems


def fleet_gpu_detail(facts: FleetFacts) -> str:
    gpu_nodes = [n for n in facts.nodes if (n["gpus"] or 0) >= 1]
    devices = sorted({n["compute_device"] for n in gpu_nodes})
    backends = sorted({p["backend"] for p in facts.pairs if p["kind"] == "intra" and p["backend"]})
    return (
        f"{len(gpu_nodes)} GPU node(s), probe on {', '.join(devices)}, PCIe read idle and under "
        f"load, intra-node over {', '.join(backends) or '-'}"
    )
