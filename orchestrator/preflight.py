"""Checks before any run starts, that need this machine or the cluster, not just the file.

A failed check raises ``SpecError``: exit 2, nothing run, nothing written.

May import: planner, spec, deepspeed, orchestrator.raycluster.nodes.
"""

from __future__ import annotations

import os

from orchestrator.planner import check_capacity, launcher_for, rank_resources
from orchestrator.raycluster.nodes import cluster_nodes
from orchestrator.spec import SpecError, SweepSpec


def preflight(spec: SweepSpec) -> None:
    """Checks that need this machine, not just the file: NVMe offload's folder and async_io op.

    Raises SpecError (exit 2, nothing run). On a multi-node cluster a worker node can still lack
    libaio; that run then fails with the same actionable message (workloads/strategies.py).
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
        from deepspeed.ops.op_builder import AsyncIOBuilder

        compatible = AsyncIOBuilder().is_compatible(verbose=False)
    except Exception as exc:  # noqa: BLE001 - any import/probe failure means not buildable
        compatible = False
        errors.append(f"grid.offload: 'nvme' cannot be checked: {exc}")
    if not compatible:
        errors.append(
            "grid.offload: 'nvme' needs DeepSpeed's async_io op, which cannot be built here: "
            "apt-get install libaio-dev && pip install ninja; allowed offloads without it: "
            "none, cpu"
        )
    if errors:
        raise SpecError(errors)


def check_cluster(spec: SweepSpec) -> dict[str, float]:
    """Capacity check against the connected cluster (``ranks_per_gpu: 2`` on a cluster with no
    GPU is refused here); returns one rank's bundle."""
    nodes = cluster_nodes()
    check_capacity(spec, nodes)
    bundle = rank_resources(nodes, spec.world_size, spec.ranks_per_gpu)
    launcher_for(spec, bundle)  # refuses fork on GPUs before anything runs
    return bundle
