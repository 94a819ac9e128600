"""A sweep's environment fingerprint, from what it stored, and what differs between two.

Pure. ``fingerprint(facts)`` -> an ordered ``{field: text}``: versions (``sweeps.versions``:
torch, Ray, DeepSpeed, ..., CUDA of torch, NCCL), what the runs saw (``runs.nccl_version``,
``link_class``, ``effective_transport``, ``backend``, ``gpu_name``), the machines
(``nodes.driver_version``/``cuda_version``, ``gpus.name``, ``gpu_links`` topology classes), each
link's description (``link_descriptions``) and the workload (``WORKLOAD_FIELDS`` of the runs).
A field a sweep does not know reads ``None``; several values are joined in sorted order.

``workload_mismatch`` lists the workload fields whose values differ: a comparison of step times
across different models or shapes says nothing, so ``linksweep compare`` refuses it (exit 2)
unless ``--force``.

May import: nothing (the standard library only).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

WORKLOAD_FIELDS = (
    "model", "precision", "seq_len", "micro_batch_size", "world_size", "ranks_per_node",
    "optimizer_impl",
)  # fmt: skip
"""What makes two sweeps' step times comparable at all (runs columns). ``ranks_per_node``: 4
ranks spread one to a node and two to a node are different runs (v10 stored it for every run
before, so two sweeps older than it still compare). ``optimizer_impl``: fused AdamW (v14) steps
faster than the torch default older sweeps ran, so an old and a new sweep differ in workload,
not in speed; a sweep whose runs never recorded it reads :data:`UNKNOWN` (two such compare)."""
UNKNOWN = "unknown (not recorded)"
"""A workload field every run of a sweep left NULL (stored before the column existed)."""
VERSION_FIELDS = ("torch", "nccl", "deepspeed", "ray", "cuda", "transformers", "python")


def _joined(values: Iterable[Any]) -> str | None:
    found = sorted({str(v) for v in values if v is not None and str(v) != ""})
    return ", ".join(found) if found else None


def _column(rows: Iterable[Mapping], name: str) -> str | None:
    return _joined(r.get(name) for r in rows)


def fingerprint(facts, link_map: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """``facts``: an ``orchestrator.compare.comparison.SweepFacts`` (or anything with its attributes).
    ``link_map`` renames the sweep's links (``--link-map``) so their descriptions line up."""
    versions = facts.sweep.get("versions") or {}
    if not isinstance(versions, Mapping):
        versions = {}
    runs = facts.runs
    out: dict[str, str | None] = {}
    for name in VERSION_FIELDS:
        out[f"version.{name}"] = _joined([versions.get(name)])
    out["nccl (runs)"] = _column(runs, "nccl_version")
    out["driver"] = _column(facts.nodes, "driver_version")
    out["cuda (driver)"] = _column(facts.nodes, "cuda_version")
    out["gpu models"] = _joined(
        [*(g.get("name") for g in facts.gpus), *(r.get("gpu_name") for r in runs)]
    )
    out["nodes"] = str(len(facts.nodes)) if facts.nodes else None
    out["topology classes"] = _column(facts.gpu_links, "link")
    out["link classes (runs)"] = _column(runs, "link_class")
    out["transports (runs)"] = _column(runs, "effective_transport")
    out["backend"] = _column(runs, "backend")
    for d in sorted(facts.link_descriptions, key=lambda d: str(d.get("link"))):
        link = str(d.get("link"))
        name = (link_map or {}).get(link, link)
        out[f"link {name}"] = d.get("description") or _joined([d.get("rate")])
    for name in WORKLOAD_FIELDS:
        out[name] = _workload(runs, name)
    return out


def _workload(runs: Sequence[Mapping], name: str) -> str | None:
    """A workload field's values; :data:`UNKNOWN` for runs that never recorded the optimizer
    (a NULL there is not "no optimizer")."""
    value = _column(runs, name)
    if value is None and runs and name == "optimizer_impl":
        return UNKNOWN
    return value


def diff_fingerprints(base: Mapping[str, Any], cand: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``[{"field", "baseline", "candidate"}]`` for every field whose values differ, the
    baseline's order first, then fields only the candidate has."""
    fields = [*base, *(k for k in cand if k not in base)]
    return [
        {"field": f, "baseline": base.get(f), "candidate": cand.get(f)}
        for f in fields
        if base.get(f) != cand.get(f)
    ]


def workload_mismatch(
    base_runs: Sequence[Mapping], cand_runs: Sequence[Mapping]
) -> list[dict[str, Any]]:
    """The ``WORKLOAD_FIELDS`` whose values differ between two sweeps' runs, as
    ``{"field", "baseline", "candidate"}``; empty when the workloads match."""
    return [
        {"field": f, "baseline": _workload(base_runs, f), "candidate": _workload(cand_runs, f)}
        for f in WORKLOAD_FIELDS
        if _workload(base_runs, f) != _workload(cand_runs, f)
    ]
