"""Checks before any run starts, that need the cluster, not just the file.

A failed check raises ``SpecError``: exit 2, nothing run, nothing written.

NVMe offload is checked where the ranks run, not on the driver's machine: the driver is often a
GPU-less head (``clusters/aws-gpu.yaml``, ``clusters/kuberay-gpu.yaml``) that runs no rank, so
its libaio says nothing about the GPU nodes, and a GPU node builds async_io with nvcc, which the
head never needs. ``preflight`` asks every node that can run a rank (``rank_nodes``: not
excluded, holding a rank's bundle; on a cluster with GPUs only GPU nodes) through Ray
(``workloads.aio_check.node_nvme_facts``), then ``nvme_errors`` decides from the answers (pure).

Inside a Slurm job, ``allocation_errors`` refuses a sweep whose placements need more nodes than
the allocation has (``raycluster.slurm``), before the cluster is joined.

May import: exclusions, planner, spec, orchestrator.raycluster.nodes,
orchestrator.raycluster.slurm, workloads.aio_check.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.raycluster import slurm
from orchestrator.raycluster.nodes import alive_nodes, cluster_nodes, run_on_every_node
from orchestrator.sweep.exclusions import (
    describe_node,
    excluded_node_ids,
    resolve_exclusions,
    spec_entries,
    usable_nodes,
)
from orchestrator.sweep.planner import (
    NodeCapacity,
    check_capacity,
    expand_grid,
    launcher_for,
    rank_resources,
)
from orchestrator.sweep.spec import SpecError, SweepSpec
from workloads.aio_check import NodeNvmeFacts, async_io_missing, node_nvme_facts

NVME_PROBE_TIMEOUT_S = 180.0
"""How long a node may take to answer: it imports torch and DeepSpeed and compiles DeepSpeed's
libaio test program (tens of seconds on a busy node; a first import can take a minute)."""


@dataclass(frozen=True)
class NodeNvmeAnswer:
    """One rank node's answer to the NVMe preflight, as ``nvme_errors`` reads it."""

    node: str
    """The node for people: ``node 1a2b3c4d5e6f (10.0.0.7, gpu-07)``."""
    gpu_ranks: bool
    """Ranks here get a GPU, so DeepSpeed builds async_io as a CUDA extension (nvcc). Decided by
    the rank's bundle, not by what torch saw in the probe task: that task asks for no GPU."""
    facts: NodeNvmeFacts | None
    """What the node answered; None when it did not (``error``)."""
    error: str | None = None
    """Why there is no answer (task failed, node gone, timed out)."""


def rank_nodes(
    nodes: Sequence[Mapping],
    excluded: Sequence[Mapping],
    world_size: int = 1,
    ranks_per_gpu: int = 1,
) -> tuple[list[Mapping], bool]:
    """The alive ``nodes`` (``raycluster.nodes.alive_nodes`` dicts) that can run a rank of the
    sweep, and whether ranks get a GPU: the nodes not ``excluded`` that hold at least one rank's
    bundle (``planner.rank_resources`` over the nodes kept, as placement sizes it). Where the
    cluster has GPUs a rank's bundle holds one, so a GPU-less head runs no rank."""
    excluded_ids = set(excluded_node_ids(excluded))
    kept = [n for n in nodes if n["node_id"] not in excluded_ids]
    if not kept:
        return [], False
    caps = [NodeCapacity(node_id=n["node_id"], cpus=n["cpus"], gpus=n["gpus"]) for n in kept]
    bundle = rank_resources(caps, world_size, ranks_per_gpu)
    have = {"GPU": "gpus", "CPU": "cpus"}
    fits = [n for n in kept if all(n[have[r]] + 1e-9 >= need for r, need in bundle.items())]
    return fits, "GPU" in bundle


def _on(nodes: list[str]) -> str:
    return nodes[0] if len(nodes) == 1 else f"{len(nodes)} nodes ({'; '.join(nodes)})"


NEEDS_ASYNC_IO = "grid.offload: 'nvme' needs DeepSpeed's async_io op"


def nvme_errors(nvme_path: str, answers: Sequence[NodeNvmeAnswer]) -> list[str]:
    """What keeps NVMe offload from running on the rank nodes that answered, one line per
    problem naming each node it concerns (nodes with the same problem share a line); [] when
    nothing does. A node that did not answer cannot be vouched for, so it refuses too."""
    unchecked: dict[str, list[str]] = {}
    missing_on: dict[str, list[str]] = {}
    unwritable_on: dict[str, list[str]] = {}
    for a in answers:
        if a.facts is None:
            unchecked.setdefault(a.error or "no answer", []).append(a.node)
            continue
        f = a.facts
        if f.aio is None:
            missing = f"the check itself failed ({f.aio_error})"
        else:
            missing = async_io_missing(dataclasses.replace(f.aio, cuda=a.gpu_ranks))
        if missing is not None:
            missing_on.setdefault(missing, []).append(a.node)
        if f.nvme_path_error is not None:
            unwritable_on.setdefault(f.nvme_path_error, []).append(a.node)
    errors = [
        f"nvme_path: {nvme_path!r} is not a writable folder on {_on(nodes)} ({why}), where ranks "
        "run; allowed: a writable path on a local NVMe disk of every node that runs ranks"
        for why, nodes in unwritable_on.items()
    ]
    errors += [
        f"{NEEDS_ASYNC_IO} on every node that runs ranks, and it cannot be built on "
        f"{_on(nodes)}: {missing}; allowed offloads without it: none, cpu"
        for missing, nodes in missing_on.items()
    ]
    errors += [
        f"grid.offload: 'nvme' could not be checked on {_on(nodes)}, which can run ranks "
        f"({why}); allowed offloads without the check: none, cpu"
        for why, nodes in unchecked.items()
    ]
    return errors


def preflight(
    spec: SweepSpec,
    excluded: Sequence[Mapping] | None = None,
    timeout_s: float = NVME_PROBE_TIMEOUT_S,
) -> None:
    """Checks that need the cluster, not just the file: NVMe offload's folder and async_io op on
    every node that can run a rank (not ``excluded``; default: the spec's ``exclude_nodes``
    resolved now, :func:`resolve_cluster_exclusions`). Assumes a Ray connection.

    Raises SpecError (exit 2, nothing run). What async_io needs depends on the node
    (``workloads/aio_check.py``): where ranks get a GPU, DeepSpeed builds it as a CUDA extension
    (CUDA toolkit with nvcc, libaio, ninja); on CPU, libaio and ninja. A rank that still fails
    to build it names what is missing (``workloads/strategies.py``, the same
    ``async_io_missing``).
    """
    if not any(v.offload == "nvme" for v in expand_grid(spec)):  # no run swaps to NVMe
        return
    errors = nvme_errors(spec.nvme_path, ask_rank_nodes(spec, excluded, timeout_s))
    if errors and all(e.startswith(NEEDS_ASYNC_IO) for e in errors):
        raise NodeLacks(errors)
    if errors:
        raise SpecError(errors)


class NodeLacks(SpecError):
    """The refusal is the nodes', not the file's: a node that runs ranks lacks what DeepSpeed's
    async_io op needs (libaio, nvcc, ninja). selftest reports its NVMe check ``not run`` with
    this reason, as it does a check that needs more GPUs than the node has."""


def ask_rank_nodes(
    spec: SweepSpec,
    excluded: Sequence[Mapping] | None = None,
    timeout_s: float = NVME_PROBE_TIMEOUT_S,
) -> list[NodeNvmeAnswer]:
    """Every node that can run a rank (:func:`rank_nodes`) answers
    ``workloads.aio_check.node_nvme_facts(spec.nvme_path)`` in a Ray task pinned to it."""
    if excluded is None:
        excluded = resolve_cluster_exclusions(spec)
    nodes, gpu = rank_nodes(alive_nodes(), excluded, spec.world_size, spec.ranks_per_gpu)
    answers = run_on_every_node(
        node_nvme_facts, timeout_s, args=(spec.nvme_path,), only={n["node_id"] for n in nodes}
    )
    return [
        NodeNvmeAnswer(describe_node(a.node), gpu, a.result, a.error)  # type: ignore[arg-type]
        for a in answers
    ]


def check_cluster(spec: SweepSpec, excluded: Sequence[Mapping] | None = None) -> dict[str, float]:
    """Capacity check against the connected cluster (``ranks_per_gpu: 2`` on a cluster with no
    GPU is refused here), counting only the nodes not ``excluded`` (default: the spec's
    ``exclude_nodes`` resolved now, :func:`resolve_cluster_exclusions`); returns one rank's
    bundle, sized from the nodes left."""
    if excluded is None:
        excluded = resolve_cluster_exclusions(spec)
    nodes = cluster_nodes()
    check_capacity(spec, nodes, excluded)
    bundle = rank_resources(usable_nodes(nodes, excluded), spec.world_size, spec.ranks_per_gpu)
    launcher_for(spec, bundle)  # resolves auto (actors on GPUs, fork on CPU) before any run
    return bundle


def resolve_cluster_exclusions(
    spec: SweepSpec, extra: Sequence[tuple[str, str]] = ()
) -> list[dict]:
    """The spec's ``exclude_nodes`` and ``extra`` entries (a fleet check's suspects) matched
    against the nodes alive now (``exclusions.resolve_exclusions``)."""
    return resolve_exclusions([*spec_entries(spec.exclude_nodes), *extra], alive_nodes())


def allocation_errors(spec: SweepSpec, env: Mapping[str, str]) -> list[str]:
    """Inside a Slurm job (``env`` holds ``SLURM_JOB_ID``): the refusal when the allocation has
    fewer nodes than the sweep's placements need (``spread``: world_size / ranks_per_node), so
    a short allocation fails in seconds instead of after Ray starts; [] when it fits, outside a
    job, or when Slurm's variables cannot be read (the capacity check still runs on the
    cluster joined)."""
    try:
        alloc = slurm.allocation_from_env(env)
    except slurm.SlurmEnvError:
        return []
    if alloc is None:
        return []
    needed = slurm.nodes_needed(spec.world_size, spec.ranks_per_node, spec.grid.placement)
    problem = slurm.too_few_nodes(alloc, needed, spec.world_size, spec.ranks_per_node)
    return [problem] if problem else []
