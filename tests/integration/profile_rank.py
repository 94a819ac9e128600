"""One rank of a run on a simulated node, in a process of its own: ``python -m
tests.integration.profile_rank SPEC.json`` runs linksweep's real ``Rank().run`` and writes what
it decided and recorded to the JSON file the spec names (``test_rank_on_profile.py``).

What is real: the process (one per rank, as Ray gives each rank actor its own), the order in
which the rank exports ``CUDA_VISIBLE_DEVICES`` and then touches CUDA, the device decision
(``workloads.train.decide_device`` against the node's CUDA view, which fixes the visible set at
the process's first CUDA call, as ``cuInit`` does), the exported rank environment, the process
group (gloo over TCP between the rank processes), the strategy's set-up and its steps, the
telemetry window (sampling the node's NVML for the GPU the decision named) and the record.

What is faked, and where: the node (``tests/unit/hwprofiles.py``: its CUDA view, NVML, Ray's
GPU ids and node facts, nvidia-smi); and, because this torch has no CUDA, one seam after the
decision: the rank is handed the decision with ``backend="gloo", device="cpu"`` in place of
NCCL on ``cuda:k`` (its ``CUDA_VISIBLE_DEVICES`` and NVML id kept), so the tensors, the
collectives and the timings are a CPU rank's; telemetry is built for the decided ``cuda:k``, and
that GPU is busy in the node's NVML while the rank runs. Nothing here says how fast a GPU is,
whether NCCL would pick the same device, or what ``LOCAL_RANK`` a GPU rank exports (the CPU
decision exports the rank's local rank)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path


def run_config(world_size: int, strategy: str):
    from orchestrator.sweep.planner import plan_runs, run_config
    from orchestrator.sweep.spec import parse_spec

    spec = parse_spec(
        {
            "name": "profile-rank",
            "model": "gpt2-tiny",
            "world_size": world_size,
            "steps": 2,
            "warmup_steps": 1,
            "links": {"default": {}},
            "grid": {"strategy": strategy, "grad_accum": 1, "placement": "pack"},
        }
    )
    return run_config(spec, plan_runs(spec)[0].variant, "profile-rank-run-1")


def decided_on_cpu(mp, view) -> dict:
    """The seam (module docstring): ``decide_device`` decides for real and the rank gets the
    CPU form; ``Telemetry`` samples the decided GPU. Returns where the real decision lands."""
    import torch

    import workloads.train as train

    real_decide, seen = train.decide_device, {}

    def decide_device(local_rank, node_gpu_ids=None):
        real = real_decide(local_rank, node_gpu_ids)
        seen["decision"] = real
        if real.backend != "nccl":
            return real
        view.put_work_on(real.device)  # this rank's GPU is busy until the process ends
        return dataclasses.replace(real, backend="gloo", device="cpu")

    class GpuTelemetry(train.Telemetry):
        def __init__(self, device, nvml_index, nvml=None):
            real = seen.get("decision")
            if real is not None and real.backend == "nccl":
                device = torch.device(real.device)
            super().__init__(device, nvml_index, nvml)

    mp.setattr(train, "decide_device", decide_device)
    mp.setattr(train, "Telemetry", GpuTelemetry)
    return seen


def main(spec_path: str) -> None:
    import _pytest.monkeypatch

    from tests.unit.hwprofiles import PROFILES, installed
    from workloads.rank import Rank

    spec = json.loads(Path(spec_path).read_text())
    profile = PROFILES[spec["profile"]]
    node = profile.node(spec["host"])
    ray_ids = tuple(spec["ray_gpu_ids"])
    mp = _pytest.monkeypatch.MonkeyPatch()
    tmp = Path(spec["out"]).parent / f"node-rank{spec['rank']}"
    cfg = run_config(spec["world_size"], spec["strategy"])
    # Ray sets CUDA_VISIBLE_DEVICES for a GPU actor to its own ids; the rank must override it
    with (
        installed(profile, mp, tmp) as cluster,
        cluster.on(node.hostname, ",".join(ray_ids)) as view,
    ):
        cluster.ray_worker(node, ray_ids)
        seen = decided_on_cpu(mp, view)
        record = Rank().run(
            cfg,
            spec["rank"],
            spec["world_size"],
            spec["local_rank"],
            "127.0.0.1",
            spec["port"],
            spec["node_gpu_ids"],
        )
        busy = sorted(cluster.busy[node.hostname])
        started_with = view.started_with
    mp.undo()
    training = record.training
    result = {
        "decision": dataclasses.asdict(seen["decision"]),
        "cuda_started_with": started_with,
        "busy_while_running": busy,
        "backend": record.backend,
        "device": record.device,
        "steps": [(s.step, s.warmup) for s in training.steps],
        "all_reduce_bytes": sum(
            c.msg_bytes * c.count for c in training.comms if c.op == "all_reduce"
        ),
        "telemetry_status": training.telemetry.status,
        "telemetry_temps": sorted({s.temp_c for s in training.telemetry.samples}),
        "telemetry_samples": len(training.telemetry.samples),
        "device_name": training.device_name,
        "optimizer_impl": training.optimizer_impl,
        "phases": [p.phase for p in record.phases],
    }
    Path(spec["out"]).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
