"""From a validated spec to the ordered list of runs, and whether the cluster can hold them.

Pure: works on the spec and on plain descriptions of the cluster's nodes (:class:`NodeCapacity`),
so it is tested without Ray.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

from orchestrator.spec import SpecError, SweepSpec


@dataclass(frozen=True)
class Variant:
    """One grid point."""

    strategy: str
    grad_accum: int
    link: str
    placement: str
    offload: str = "none"
    bucket_mb: int = 25

    @property
    def label(self) -> str:
        off = "" if self.offload == "none" else f" offload={self.offload}"
        return (
            f"{self.strategy}{off} ga={self.grad_accum} link={self.link} "
            f"{self.placement} bucket={self.bucket_mb}MB"
        )

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PlannedRun:
    """One run: a variant and its repeat, at position ``seq`` in execution order."""

    seq: int
    repeat: int
    variant: Variant


def expand_grid(spec: SweepSpec) -> list[Variant]:
    """Cartesian product of the grid, in file order.

    ``offload`` applies only to ZeRO strategies, and ``nvme`` only to zero3 (DeepSpeed swaps to
    NVMe with stage 3 only), so DDP variants take offload ``none`` and zero1/zero2 skip ``nvme``;
    combinations no strategy can use are rejected by the spec already.
    """
    g = spec.grid
    seen: set[Variant] = set()
    out: list[Variant] = []
    for strategy, offload, ga, bucket, link, placement in itertools.product(
        g.strategy, g.offload, g.grad_accum, g.bucket_mb, spec.grid_links, g.placement
    ):
        if strategy == "ddp":
            offload = "none"
        elif offload == "nvme" and strategy != "zero3":
            continue
        v = Variant(strategy, ga, link, placement, offload, bucket)
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def plan_runs(spec: SweepSpec) -> list[PlannedRun]:
    """Interleave repeats round robin: every variant's repeat 1, then every variant's repeat 2...

    Drift on a shared machine (thermals, neighbours) then spreads over all variants instead of
    biasing the ones that happened to run last.
    """
    variants = expand_grid(spec)
    runs = []
    for repeat in range(1, spec.repeats + 1):
        for v in variants:
            runs.append(PlannedRun(seq=len(runs) + 1, repeat=repeat, variant=v))
    return runs


def link_placements(spec: SweepSpec) -> list[tuple[str, str]]:
    """The (link, placement) pairs the link microbenchmark measures."""
    return list(itertools.product(spec.grid_links, spec.grid.placement))


@dataclass(frozen=True)
class NodeCapacity:
    """What one alive Ray node offers (from ``ray.nodes()``)."""

    node_id: str
    cpus: float
    gpus: float


def rank_resources(nodes: list[NodeCapacity]) -> dict[str, float]:
    """One rank's bundle: a GPU where the cluster has GPUs, else a CPU."""
    return {"GPU": 1.0} if any(n.gpus >= 1 for n in nodes) else {"CPU": 1.0}


def check_capacity(spec: SweepSpec, nodes: list[NodeCapacity]) -> None:
    """Reject placements the cluster can never satisfy, before any run starts.

    pack (STRICT_PACK) needs one node holding world_size rank bundles; spread (STRICT_SPREAD)
    needs world_size distinct nodes holding one each.
    """
    if not nodes:
        raise SpecError(["the Ray cluster has no alive nodes"])
    res = rank_resources(nodes)
    kind = next(iter(res))
    per_node = [int(n.gpus if kind == "GPU" else n.cpus) for n in nodes]
    errors = []
    n = spec.world_size
    if "pack" in spec.grid.placement and max(per_node) < n:
        errors.append(
            f"grid.placement: 'pack' puts world_size={n} ranks on one node, but the largest "
            f"node has {max(per_node)} {kind}(s); allowed: world_size <= {max(per_node)} or "
            "placement 'spread'"
        )
    usable = sum(1 for c in per_node if c >= 1)
    if "spread" in spec.grid.placement and usable < n:
        errors.append(
            f"grid.placement: 'spread' puts each of world_size={n} ranks on its own node, but the "
            f"cluster has {usable} node(s) with a {kind}; allowed: world_size <= {usable} or "
            "placement 'pack'"
        )
    if errors:
        raise SpecError(errors)
