"""A fleet check's measurements and verdict turned into rows of ``fleet_checks``,
``fleet_nodes``, ``fleet_pairs`` and ``fleet_rounds``. Pure: no Ray, no database.

The driver (``orchestrator/fleet/loop.py``) measures (``raycluster/fleet.py`` returns each busbw
measurement as a :class:`BenchResult`, defined here with the rows it becomes);
``orchestrator/fleet/suspects.py`` judges; this module only lays the results out as the schema
(``orchestrator/store/schema.py``) has them.

May import: suspects, workloads.fleet_contract.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.fleet.suspects import Failed, Verdict
from workloads.fleet_contract import ComputeRecord, HealthRecord


@dataclass(frozen=True)
class BenchResult:
    kind: str
    """intra (a node alone) or inter (a pair)."""
    node_a: str
    node_b: str
    """Node ids; intra: node_b == node_a."""
    world_size: int
    backend: str | None
    ifname: str | None
    """The interface gloo was bound to; None for NCCL."""
    msg_bytes: int
    times_s: tuple[float, ...]
    """Per timed iteration, max over ranks."""
    time_s: float | None
    """Median of times_s."""
    busbw_gbps: float | None
    status: str
    """ok, failed or skipped."""
    error: str | None
    wall_s: float
    """This measurement, from its start to its answer."""

    @classmethod
    def unmeasured(cls, kind, a, b, world, backend, msg_bytes, status, error, wall_s):
        """A failed or skipped measurement: no times, no busbw, and why."""
        return cls(
            kind, a, b, world, backend, None, msg_bytes, (), None, None, status, error, wall_s
        )


DEFAULT_LINK = "default"
"""The link name of a check without ``--sweep``: the network each node's Ray IP is on."""


def pair_row(fleet_id: str, link: str, result: Any, round_index: int | None) -> dict[str, Any]:
    """One ``fleet_pairs`` row from a :class:`BenchResult` (verdict columns empty)."""
    return {
        "fleet_id": fleet_id,
        "link": link,
        "kind": result.kind,
        "round": round_index,
        "node_a": result.node_a,
        "node_b": result.node_b,
        "world_size": result.world_size,
        "backend": result.backend,
        "ifname": result.ifname,
        "msg_bytes": result.msg_bytes,
        "time_s": result.time_s,
        "busbw_gbps": result.busbw_gbps,
        "first_busbw_gbps": None,
        "status": result.status,
        "error": result.error,
        "slow": None,
        "suspect": None,
        "why": None,
    }


def remeasured(row: dict[str, Any], again: dict[str, Any]) -> dict[str, Any]:
    """A pair measured again (``again``, a new row of the same pair): the better of the two
    measurements, the first one kept in ``first_busbw_gbps``. A fault is slow both times; a
    moment of contention or a transient on the path is not."""
    better = again["status"] == "ok" and (
        row["status"] != "ok" or (again["busbw_gbps"] or 0.0) > (row["busbw_gbps"] or 0.0)
    )
    kept = again if better else row
    return {**kept, "round": row["round"], "first_busbw_gbps": row["busbw_gbps"]}


def judged_pair_rows(rows: Sequence[dict[str, Any]], verdict: Verdict) -> list[dict[str, Any]]:
    """The pair rows with the verdict's slow/suspect/why filled in."""
    out = []
    for row in rows:
        if row["kind"] == "intra":
            v = verdict.intra.get((row["link"], row["node_a"]))
        else:
            v = verdict.pairs.get((row["link"], row["node_a"], row["node_b"]))
        if v is not None:
            row = {**row, "slow": v.slow, "suspect": v.suspect, "why": v.why}
        out.append(row)
    return out


def _health_json(
    idle: HealthRecord | None, loaded: HealthRecord | None, group: str | None
) -> str | None:
    """``fleet_nodes.health``: the readings at idle and under load, and the node's group
    (``fleet_groups``: what it was judged against; kept here, the node's JSON column, so the
    schema needs no new column)."""
    if idle is None and loaded is None and group is None:
        return None
    doc = {
        "idle": None if idle is None else dataclasses.asdict(idle),
        "under_load": None if loaded is None else dataclasses.asdict(loaded),
        "group": group,
    }
    return json.dumps(doc, default=str)


def groups_text(groups: Mapping[str, str]) -> str:
    """``gpu:NVIDIA A100-SXM4-40GB (2), cpu (1)``: each group with its number of nodes."""
    count: dict[str, int] = {}
    for g in groups.values():
        count[g] = count.get(g, 0) + 1
    return ", ".join(f"{g} ({k})" for g, k in count.items()) or "-"


def node_rows(
    fleet_id: str,
    nodes: Sequence[Any],
    compute: Mapping[str, ComputeRecord | str],
    health: Mapping[str, HealthRecord],
    verdict: Verdict | None,
    groups: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One ``fleet_nodes`` row per node: identity, compute probe, health (with the node's group
    from ``groups``, node -> key) and verdict."""
    out = []
    for n in nodes:
        probe = compute.get(n.node_id)
        record = probe if isinstance(probe, ComputeRecord) else None
        idle = health.get(n.node_id)
        loaded = record.health_under_load if record is not None else None
        names = sorted({str(g.get("name")) for g in (idle.gpus if idle else ()) if g.get("name")})
        v = verdict.nodes.get(n.node_id) if verdict is not None else None
        out.append(
            {
                "fleet_id": fleet_id,
                "node_id": n.node_id,
                "ip": n.ip,
                "hostname": n.hostname,
                "cpus": n.cpus,
                "gpus": n.gpus,
                "gpu_names": ", ".join(names) or None,
                "compute_tokens_per_s": record.tokens_per_s if record else None,
                "compute_device": record.device if record else None,
                "compute_model": record.model if record else None,
                "compute_status": "ok" if record else ("failed" if probe is not None else None),
                "compute_error": probe if isinstance(probe, str) else None,
                "health": _health_json(idle, loaded, (groups or {}).get(n.node_id)),
                "health_note": (idle.error or idle.note) if idle else None,
                "suspect": None if v is None else v.suspect,
                "why": None if v is None or not v.reasons else "; ".join(v.reasons),
            }
        )
    return out


def round_row(
    fleet_id: str, link: str | None, kind: str, round_index: int, n_pairs: int, wall_s: float
) -> dict[str, Any]:
    return {
        "fleet_id": fleet_id,
        "link": link,
        "kind": kind,
        "round": round_index,
        "n_pairs": n_pairs,
        "wall_s": wall_s,
    }


def measured_values(
    pair_rows: Sequence[dict[str, Any]],
) -> tuple[dict[str, dict[tuple[str, str], float | Failed]], dict[str, dict[str, float | Failed]]]:
    """(inter, intra) busbw as ``suspects.judge`` takes them: per link, per pair or node; a
    failed measurement is ``Failed(error)``, a skipped one is left out (nothing to measure)."""
    inter: dict[str, dict[tuple[str, str], float | Failed]] = {}
    intra: dict[str, dict[str, float | Failed]] = {}
    for row in pair_rows:
        if row["status"] == "skipped":
            continue
        ok = row["status"] == "ok" and row["busbw_gbps"] is not None
        value = row["busbw_gbps"] if ok else Failed(row["error"] or f"status {row['status']}")
        if row["kind"] == "intra":
            intra.setdefault(row["link"], {})[row["node_a"]] = value
        else:
            inter.setdefault(row["link"], {})[(row["node_a"], row["node_b"])] = value
    return inter, intra


def shared_hosts(nodes: Sequence[Any]) -> set[str]:
    """Nodes that share a machine (a hostname) with another node: an emulated cluster, or
    several Ray nodes on one host. Their node-level checks compare the same hardware."""
    count: dict[str, int] = {}
    for n in nodes:
        count[n.hostname] = count.get(n.hostname, 0) + 1
    return {n.node_id for n in nodes if count[n.hostname] > 1}


def waves(nodes: Sequence[Any]) -> list[list[Any]]:
    """Nodes grouped so that no two nodes of one machine (hostname) are in the same wave: node
    checks of one wave run at the same time without sharing CPUs or GPUs."""
    by_host: dict[str, list[Any]] = {}
    for n in nodes:
        by_host.setdefault(n.hostname, []).append(n)
    depth = max((len(v) for v in by_host.values()), default=0)
    return [[v[j] for v in by_host.values() if j < len(v)] for j in range(depth)]
