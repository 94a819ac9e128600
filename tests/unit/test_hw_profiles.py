"""Every GPU decision linksweep makes, against simulated hardware (``tests/unit/hwprofiles.py``).

Each profile fakes a cluster at its boundaries only (torch's CUDA view, NVML, nvidia-smi, Ray's
node table and GPU ids, ``CUDA_VISIBLE_DEVICES``, DeepSpeed's accelerator) and linksweep's real
code runs between them: the rank's device (``workloads/rank.py`` -> ``decide_device``) and the
device DeepSpeed's real engine takes in the environment the rank exported, the MFU peak, the
telemetry status, the NVMe preflight, the fleet's grouping and message size, and the selftest's
plan. ``EXPECTED`` is written by hand, one row per profile: what a correct linksweep does on that
hardware. An expectation the code misses, where the hardware is not at fault, is a defect.
"""

from __future__ import annotations

import pytest

from tests.unit.hwprofiles import PROFILES, captures_missing, deepspeed_device, installed

# -- the table of expected outcomes ----------------------------------------------------------
# one_rank / rehearsal / two_gpu: each rank's device as linksweep chooses it, and (for ZeRO) as
# DeepSpeed's engine takes it: they must agree. "not run: ..." where the run cannot be placed.
# peak: the dense peak TFLOP/s MFU divides by, for the math the selftest's GPU sweeps use
# (bf16 where the GPU has bf16 units, else fp32); "unknown" where no datasheet gives one.
# telemetry: the stored telemetry status of the one-rank run (prefix).
# nvme: the NVMe preflight of the selftest's nvme sweep: "run" where a node that runs ranks
# can build async_io, else "not run: <the node and what it lacks>".
CPU = "cpu"
NOT_ON_ONE_GPU = "not run: no node has 2 GPUs in Ray"
EXPECTED: dict[str, dict[str, object]] = {
    "a10g-gpuless-head": {
        "one_rank": ("cuda:0",),
        "rehearsal": ("cuda:0", "cuda:0"),
        "two_gpu": NOT_ON_ONE_GPU,
        "peak": "unknown",  # AWS publishes no A10G tensor figure (flops.py says why)
        "telemetry": "nvml",
        "nvme": "run",  # the g5 node has libaio and the toolkit; the m5 head runs no rank
    },
    "a100-pcie-x2": {
        "one_rank": ("cuda:0",),
        "rehearsal": ("cuda:0", "cuda:0"),
        "two_gpu": ("cuda:0", "cuda:1"),
        "peak": 312.0,
        "telemetry": "nvml",
        "nvme": "run",
    },
    "h100x8": {
        "one_rank": ("cuda:0",),
        "rehearsal": ("cuda:0", "cuda:0"),
        "two_gpu": ("cuda:0", "cuda:1"),
        "peak": 989.4,
        "telemetry": "nvml",
        "nvme": "not run: h100-0 lacks the CUDA toolkit",  # the node's own gap: say so
    },
    "h100x8-cvd0": {
        "one_rank": ("cuda:0",),
        "rehearsal": ("cuda:0", "cuda:0"),
        "two_gpu": NOT_ON_ONE_GPU,  # Ray holds 1 GPU: CUDA_VISIBLE_DEVICES=0
        "peak": 989.4,
        "telemetry": "nvml",
        "nvme": "not run: h100-0 lacks the CUDA toolkit",
    },
    "a100-mig-1g": {
        "one_rank": ("cuda:0",),
        "rehearsal": ("cuda:0", "cuda:0"),
        "two_gpu": NOT_ON_ONE_GPU,
        "peak": "unknown",  # a 1g slice has a seventh of the SMs: the A100's 312 is not its peak
        "telemetry": "nvml (MIG instance",  # the parent GPU's readings, said so
        "nvme": "run",
    },
    "v100x8": {
        "one_rank": ("cuda:0",),
        "rehearsal": ("cuda:0", "cuda:0"),
        "two_gpu": ("cuda:0", "cuda:1"),
        "peak": 15.7,  # no bf16 units: fp32, V100 SXM2 datasheet
        "telemetry": "nvml (",  # a driver without clock-event reasons: sampled, said so
        "nvme": "run",
    },
    "unknown-gpu": {
        "one_rank": ("cuda:0",),
        "rehearsal": ("cuda:0", "cuda:0"),
        "two_gpu": NOT_ON_ONE_GPU,
        "peak": "unknown",
        "telemetry": "nvml",
        "nvme": "run",
    },
    "mixed-cpu-a100": {
        "one_rank": ("cuda:0",),
        "rehearsal": ("cuda:0", "cuda:0"),
        "two_gpu": ("cuda:0", "cuda:1"),
        "peak": 312.0,
        "telemetry": "nvml",
        "nvme": "run",  # the A100 nodes build it; the CPU head lacks libaio and runs no rank
    },
    "kuberay-no-smi-driver": {
        "one_rank": ("cuda:0",),
        "rehearsal": ("cuda:0", "cuda:0"),
        "two_gpu": ("cuda:0", "cuda:1"),
        "peak": 121.0,
        "telemetry": "nvml",
        "nvme": "run",
    },
    "cpu-only": {
        "one_rank": (CPU,),
        "rehearsal": "not run: no CUDA",
        "two_gpu": "not run: no CUDA",
        "peak": "unknown",
        "telemetry": "absent: CPU run",
        "nvme": "run",
    },
}


@pytest.fixture(params=list(PROFILES))
def cluster(request, monkeypatch, tmp_path):
    profile = PROFILES[request.param]
    if missing := captures_missing(profile):
        pytest.skip(f"public captures not on this machine: {missing}")
    with installed(profile, monkeypatch, tmp_path) as c:
        yield c


def test_every_profile_has_a_row():
    assert set(EXPECTED) == set(PROFILES)


# -- the harness: linksweep's real code, run on a profile ------------------------------------


class _AtProcessGroup(Exception):
    """Raised by the faked ``init_process_group``: the rank's device is decided by then."""


def rank_node(cluster):
    """The node a run's ranks land on: the first with GPUs in Ray, else the first with CPUs."""
    nodes = cluster.profile.gpu_nodes or [n for n in cluster.profile.nodes if n.cpus]
    return nodes[0]


def run_config(world_size: int, ranks_per_gpu: int, strategy: str = "zero3"):
    from orchestrator.planner import plan_runs, run_config
    from orchestrator.spec import parse_spec

    spec = parse_spec(
        {
            "name": "profile",
            "model": "gpt2-tiny",
            "world_size": world_size,
            "ranks_per_gpu": ranks_per_gpu,
            "links": {"default": {}},
            "grid": {"strategy": strategy, "grad_accum": 1, "placement": "pack"},
        }
    )
    return run_config(spec, plan_runs(spec)[0].variant, "profile-run-1")


def ranks(cluster, world_size: int, ranks_per_gpu: int) -> list[tuple[str, str | None]]:
    """(linksweep's device, DeepSpeed's device) per rank of one run on :func:`rank_node`: Ray
    assigns each rank actor its GPU ids (two ranks per id with ``ranks_per_gpu`` 2), the real
    ``Rank.node_info`` / ``planner.place_ranks`` / ``Rank.run`` follow, up to the process group;
    then DeepSpeed's engine reads the environment the rank exported."""
    import torch.distributed as dist

    from orchestrator.planner import place_ranks
    from workloads.rank import Rank

    node = rank_node(cluster)
    ids = node.ray_gpu_ids
    assigned = [(ids[r // ranks_per_gpu],) if ids else () for r in range(world_size)]

    def worker_cvd(gpu_ids):  # Ray sets it for a GPU worker; a CPU worker keeps the raylet's
        return ",".join(gpu_ids) if gpu_ids else node.raylet_cvd

    infos = []
    for gpu_ids in assigned:
        with cluster.on(node.hostname, worker_cvd(gpu_ids)):
            cluster.ray_worker(node, gpu_ids)
            infos.append(Rank().node_info())
    cfg = run_config(world_size, ranks_per_gpu)
    out = []
    seen: dict[str, str] = {}

    def at_pg(backend, **kwargs):
        import torch

        seen["device"] = f"cuda:{torch.cuda.current_device()}" if backend == "nccl" else CPU
        raise _AtProcessGroup

    for p, gpu_ids in zip(place_ranks(infos), assigned, strict=True):
        seen.clear()

        with cluster.on(node.hostname, worker_cvd(gpu_ids)):
            cluster.ray_worker(node, gpu_ids)
            cluster.mp.setattr(dist, "init_process_group", at_pg)
            visible = list(p.visible_gpus) if p.visible_gpus else None
            try:
                Rank().run(cfg, p.rank, world_size, p.local_rank, node.ip, 29500, visible)
            except _AtProcessGroup:
                pass
            except Exception as exc:  # noqa: BLE001 - a DeviceError is an outcome here
                seen["device"] = f"error: {exc}"
            ds = deepspeed_device(world_size, p.rank) if seen["device"] != CPU else None
        out.append((seen["device"], ds))
    return out


def shape_outcome(cluster, world_size: int, ranks_per_gpu: int, gpus_needed: int):
    """The ranks' devices, or why the run is not placed (what the capacity check says)."""
    from orchestrator import preflight
    from orchestrator.spec import SpecError, parse_spec

    node = rank_node(cluster)
    if (ranks_per_gpu == 2 or gpus_needed) and not node.ray_gpu_ids:
        return "not run: no CUDA", None
    if gpus_needed and len(node.ray_gpu_ids) < gpus_needed:
        return NOT_ON_ONE_GPU, None
    spec = parse_spec(
        {
            "name": "shape",
            "world_size": world_size,
            "ranks_per_gpu": ranks_per_gpu,
            "links": {"default": {}},
            "grid": {"strategy": "ddp", "grad_accum": 1, "placement": "pack"},
        }
    )
    try:
        preflight.check_cluster(spec, excluded=[])
    except SpecError as exc:
        return f"refused: {exc}", None
    got = ranks(cluster, world_size, ranks_per_gpu)
    return tuple(d for d, _ in got), tuple(ds for _, ds in got)


SHAPES = {"one_rank": (1, 1, 0), "rehearsal": (2, 2, 1), "two_gpu": (2, 1, 2)}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_rank_devices(cluster, shape):
    """linksweep's device per rank: what EXPECTED says for the profile."""
    ours, _ = shape_outcome(cluster, *SHAPES[shape])
    assert ours == EXPECTED[cluster.profile.name][shape]


@pytest.mark.parametrize("shape", list(SHAPES))
def test_deepspeed_takes_the_device_linksweep_chose(cluster, shape):
    """DeepSpeed's engine, in the environment the rank exported (RANK, LOCAL_RANK,
    CUDA_VISIBLE_DEVICES), takes the device linksweep chose: a different index is another
    GPU, or an ordinal the process cannot see ("invalid device ordinal")."""
    ours, deepspeeds = shape_outcome(cluster, *SHAPES[shape])
    if deepspeeds is None or all(d is None for d in deepspeeds):
        pytest.skip(f"no GPU rank in this shape: {ours}")
    assert deepspeeds == ours == EXPECTED[cluster.profile.name][shape]
