"""Checks before any run starts, that need this machine or the cluster, not just the file.

A failed check raises ``SpecError``: exit 2, nothing run, nothing written.

May import: exclusions, planner, spec, orchestrator.raycluster.nodes, workloads.aio_check.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from orchestrator.exclusions import resolve_exclusions, spec_entries, usable_nodes
from orchestrator.planner import check_capacity, launcher_for, rank_resources
from orchestrator.raycluster.nodes import alive_nodes, cluster_nodes
from orchestrator.spec import SpecError, SweepSpec
from workloads.aio_check import aio_facts, async_io_missing


def preflight(spec: SweepSpec) -> None:
    """Checks that need this machine, not just the file: NVMe offload's folder and async_io op.

    Raises SpecError (exit 2, nothing run). What async_io needs depends on the machine
    (``workloads/aio_check.py``): where torch sees a GPU, DeepSpeed builds it as a CUDA extension
    (CUDA toolkit with nvcc, libaio, ninja); on CPU, libaio and ninja. This checks the driver's
    machine; a worker node can still lack something, and that run then fails naming what
    (``workloads/strategies.py``, the same ``async_io_missing``).
    """
    if "nvme" not in spec.grid.offload or "zero3" not in spec.grid.strategy:
        return
    errors = []
    try:
        os.makedirs(spec.nvme_path, exist_ok=True)
        probe = os.path.join(spec.nvme_path, ".linksweep-write-test")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as exc:
        errors.append(
            f"nvme_path: {spec.nvme_path!r} is not a writable folder ({exc.strerror}); "
            "allowed: a writable path on a local NVMe disk"
        )
    try:
        missing = async_io_missing(aio_facts())
    except Exception as exc:  # noqa: BLE001 - torch/DeepSpeed cannot even be asked
        missing = f"the check itself failed ({type(exc).__name__}: {exc})"
    if missing is not None:
        errors.append(
            "grid.offload: 'nvme' needs DeepSpeed's async_io op, which cannot be built on this "
            f"machine: {missing}; allowed offloads without it: none, cpu"
        )
    if errors:
        raise SpecError(errors)


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
    launcher_for(spec, bundle)  # refuses fork on GPUs before anything runs
    return bundle


def resolve_cluster_exclusions(
    spec: SweepSpec, extra: Sequence[tuple[str, str]] = ()
) -> list[dict]:
    """The spec's ``exclude_nodes`` and ``extra`` entries (a fleet check's suspects) matched
    against the nodes alive now (``exclusions.resolve_exclusions``)."""
    return resolve_exclusions([*spec_entries(spec.exclude_nodes), *extra], alive_nodes())
