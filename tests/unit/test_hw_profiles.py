"""Every GPU decision linksweep makes, against simulated hardware (``tests/unit/hwprofiles.py``).

Each profile fakes a cluster at its boundaries only (torch's CUDA view, NVML, nvidia-smi, Ray's
node table, tasks and GPU ids, ``CUDA_VISIBLE_DEVICES``, DeepSpeed's accelerator; and
``init_process_group``, where a rank's device is decided and a test must stop) and linksweep's
real code runs between them. Checked per profile:

- each rank's device, one rank, two ranks sharing a GPU (the rehearsal) and two GPUs:
  ``workloads/rank.py`` ``Rank.node_info`` / ``Rank.run`` after ``planner.place_ranks``;
- the device DeepSpeed's real engine takes (``_configure_with_arguments`` reads LOCAL_RANK,
  ``_set_distributed_vars`` sets the device; ZeRO-3's ``Init`` reads the same LOCAL_RANK) in the
  environment the rank exported, and the ``device_id`` NCCL's communicator is created on;
- the device FSDP2's ``init_device_mesh`` leaves an fsdp rank on (torch's own
  ``DeviceMesh._setup_world_group_and_device``: it keeps the device the rank set, and would
  take ``LOCAL_RANK`` were none set), one rank and two GPUs, and the selftest's FSDP2 run
  (two GPUs of one node, gloo on CPU, not run where a node has one GPU at most);
- the MFU peak for the selftest's math, TFLOP/s per distinct GPU, native bf16, the precision of
  the selftest's sweeps, the telemetry status, ``runs.nodes`` of a run whose ranks failed;
- doctor, the selftest plan (``--dry-run`` and ``--quick``), capacity of every planned sweep,
  the NVMe preflight on the nodes that run ranks, the verdict on what the nodes answer;
- the fleet check's groups, message sizes and rules.

``EXPECTED`` is written by hand, one row per profile: what a correct linksweep does on that
hardware. An expectation the code misses, where the hardware is not at fault, is a defect.
"""

from __future__ import annotations

import functools
import sys

import pytest

from tests.unit.fake_cuda import deepspeed_device
from tests.unit.hwprofiles import MIG_ID, PROFILES, captures_missing, fsdp2_device, installed

# -- the table of expected outcomes ----------------------------------------------------------
# one_rank / rehearsal / two_gpu: each rank's device as linksweep chooses it, and (for ZeRO) as
# DeepSpeed's engine takes it: they must agree. "not run: ..." where the run cannot be placed.
# peak: the dense peak TFLOP/s MFU divides by, for the math the selftest's GPU sweeps use
# (bf16 where the GPU has bf16 units, else fp32); "unknown" where no datasheet gives one.
# telemetry: the stored telemetry status of the one-rank run (prefix).
# nvme: the NVMe preflight of the selftest's nvme sweep: "run" where a node that runs ranks
# can build async_io, else "not run: <the node and what it lacks>".
# fsdp2: each rank's device in the selftest's FSDP2 run (two ranks, fsdp), as linksweep
# chooses it and as FSDP2's DeviceMesh takes it; "not run: ..." with words of the plan's reason
# where the plan skips it (one GPU at most: FSDP2 refuses two ranks sharing one GPU).
CPU = "cpu"
NOT_ON_ONE_GPU = "not run: no node has 2 GPUs in Ray"
# plan: the selftest checks the plan skips, with words its reason must hold; every other check
# runs. plan_nodes: where its GPU checks run (gpu_captures: every node with a GPU, two_gpu: the
# nodes Ray offers 2 GPUs on).
# fleet: per node that the fleet checks, (its group, its all_reduce MiB, its rule's rel): nodes
# are judged among their own kind and GPU model, a CPU node at CPU sizes and threshold.
CPU_GROUP = ("cpu", 4.0, 0.5)


class Holds:
    """Equal to any text holding ``words``: where the exact spelling is the code's to choose."""

    def __init__(self, words: str):
        self.words = words

    def __eq__(self, other) -> bool:
        return isinstance(other, str) and self.words in other

    def __repr__(self) -> str:
        return f"<text holding {self.words!r}>"


def gpu_group(model: str | Holds) -> tuple[str | Holds, float, float]:
    return (model if isinstance(model, Holds) else f"gpu:{model}", 64.0, 0.15)


FSDP2_ONE_GPU = "FSDP2 needs 2 GPUs on one node: two ranks sharing one GPU (ranks_per_gpu: 2)"
ONE_GPU_PLAN = {"two_gpu": "needs 2 on one node", "fsdp2": FSDP2_ONE_GPU}
NOT_RUN_FSDP2 = f"not run: {FSDP2_ONE_GPU}"
TWO_GPUS = ("cuda:0", "cuda:1")
CPU_PLAN = {
    "gpu_captures": "no GPU",
    "fleet_gpu": "no CUDA",
    "one_rank_gpu_figures": "no CUDA",
    "rehearsal_shared_gpu": "no CUDA",
    "shared_gpu_fork": "no CUDA",
    "two_gpu": "no CUDA",
    "hang_flight_recorder": "no CUDA",
}
EXPECTED: dict[str, dict[str, object]] = {
    "a10g-gpuless-head": {
        "nvml_gpu": [0],
        "fleet": {"ip-10-0-0-10": CPU_GROUP, "ip-10-0-1-20": gpu_group("NVIDIA A10G")},
        "plan": ONE_GPU_PLAN,
        "plan_nodes": {"gpu_captures": ("ip-10-0-1-20",), "two_gpu": (), "fsdp2": ()},
        "one_rank": ("cuda:0",),
        "rehearsal": ("cuda:0", "cuda:0"),
        "two_gpu": NOT_ON_ONE_GPU,
        "peak": "unknown",  # AWS publishes no A10G tensor figure (flops.py says why)
        "telemetry": "nvml",
        "nvme": "run",  # the g5 node has libaio and the toolkit; the m5 head runs no rank
        "fsdp2": NOT_RUN_FSDP2,
    },
    "a100-pcie-x2": {
        "nvml_gpu": [0],
        "fleet": {"a100p-0": gpu_group("NVIDIA A100 80GB PCIe")},
        "plan": {},
        "plan_nodes": {
            "gpu_captures": ("a100p-0",),
            "two_gpu": ("a100p-0",),
            "fsdp2": ("a100p-0",),
        },
        "one_rank": ("cuda:0",),
        "rehearsal": ("cuda:0", "cuda:0"),
        "two_gpu": ("cuda:0", "cuda:1"),
        "peak": 312.0,
        "telemetry": "nvml",
        "nvme": "run",
        "fsdp2": TWO_GPUS,
    },
    "h100x8": {
        "nvml_gpu": [0],
        "fleet": {"h100-0": gpu_group("NVIDIA H100 80GB HBM3")},
        "plan": {},
        "plan_nodes": {"gpu_captures": ("h100-0",), "two_gpu": ("h100-0",), "fsdp2": ("h100-0",)},
        "one_rank": ("cuda:0",),
        "rehearsal": ("cuda:0", "cuda:0"),
        "two_gpu": ("cuda:0", "cuda:1"),
        "peak": 989.4,
        "telemetry": "nvml",
        "nvme": "not run: h100-0 lacks the CUDA toolkit",  # the node's own gap: say so
        "fsdp2": TWO_GPUS,
    },
    "h100x8-cvd0": {
        "nvml_gpu": [0],
        "fleet": {"h100-0": gpu_group("NVIDIA H100 80GB HBM3")},
        "plan": {"two_gpu": "Ray offers 1", "fsdp2": FSDP2_ONE_GPU},
        "plan_nodes": {"gpu_captures": ("h100-0",), "two_gpu": (), "fsdp2": ()},
        "one_rank": ("cuda:0",),
        "rehearsal": ("cuda:0", "cuda:0"),
        "two_gpu": NOT_ON_ONE_GPU,  # Ray holds 1 GPU: CUDA_VISIBLE_DEVICES=0
        "peak": 989.4,
        "telemetry": "nvml",
        "nvme": "not run: h100-0 lacks the CUDA toolkit",
        "fsdp2": NOT_RUN_FSDP2,  # Ray holds 1 GPU of the 8
    },
    "a10x4-cvd23": {
        "nvml_gpu": [2],  # physical GPU 2: Ray's id is NVML's index (PCI order)
        "fleet": {"a10-0": gpu_group("NVIDIA A10")},
        "plan": {},
        "plan_nodes": {"gpu_captures": ("a10-0",), "two_gpu": ("a10-0",), "fsdp2": ("a10-0",)},
        "one_rank": ("cuda:0",),
        "rehearsal": ("cuda:0", "cuda:0"),
        "two_gpu": ("cuda:0", "cuda:1"),
        "peak": 125.0,
        "telemetry": "nvml",
        "nvme": "run",
        "fsdp2": TWO_GPUS,  # Ray's GPUs 2 and 3, cuda:0 and cuda:1 under CUDA_VISIBLE_DEVICES=2,3
    },
    "a100-mig-1g": {
        "nvml_gpu": [MIG_ID],
        "fleet": {"mig-0": gpu_group(Holds("MIG 1g.10gb"))},
        "plan": ONE_GPU_PLAN,
        "plan_nodes": {"gpu_captures": ("mig-0",), "two_gpu": (), "fsdp2": ()},
        "one_rank": ("cuda:0",),
        "rehearsal": ("cuda:0", "cuda:0"),
        "two_gpu": NOT_ON_ONE_GPU,
        "peak": "unknown",  # a 1g slice has a seventh of the SMs: the A100's 312 is not its peak
        "telemetry": "nvml (MIG instance",  # the parent GPU's readings, said so
        "nvme": "run",
        "fsdp2": NOT_RUN_FSDP2,
    },
    "v100x8": {
        "nvml_gpu": [0],
        "fleet": {"dgx1-0": gpu_group("Tesla V100-SXM2-16GB")},
        "plan": {},
        "plan_nodes": {"gpu_captures": ("dgx1-0",), "two_gpu": ("dgx1-0",), "fsdp2": ("dgx1-0",)},
        "one_rank": ("cuda:0",),
        "rehearsal": ("cuda:0", "cuda:0"),
        "two_gpu": ("cuda:0", "cuda:1"),
        "peak": 15.7,  # no bf16 units: fp32, V100 SXM2 datasheet
        "telemetry": "nvml (",  # a driver without clock-event reasons: sampled, said so
        "nvme": "run",
        "fsdp2": TWO_GPUS,
    },
    "unknown-gpu": {
        "nvml_gpu": [0],
        "fleet": {"proto-0": gpu_group("NVIDIA Graphics Device")},
        "plan": ONE_GPU_PLAN,
        "plan_nodes": {"gpu_captures": ("proto-0",), "two_gpu": (), "fsdp2": ()},
        "one_rank": ("cuda:0",),
        "rehearsal": ("cuda:0", "cuda:0"),
        "two_gpu": NOT_ON_ONE_GPU,
        "peak": "unknown",
        "telemetry": "nvml",
        "nvme": "run",
        "fsdp2": NOT_RUN_FSDP2,
    },
    "mixed-cpu-a100": {
        "nvml_gpu": [0],
        "fleet": {
            "head-0": CPU_GROUP,
            "cpu-1": CPU_GROUP,
            "a100-1": gpu_group("NVIDIA A100-SXM4-80GB"),
            "a100-2": gpu_group("NVIDIA A100-SXM4-80GB"),
        },
        "plan": {},
        "plan_nodes": {
            "gpu_captures": ("a100-1", "a100-2"),
            "two_gpu": ("a100-1", "a100-2"),
            "fsdp2": ("a100-1", "a100-2"),
        },
        "one_rank": ("cuda:0",),
        "rehearsal": ("cuda:0", "cuda:0"),
        "two_gpu": ("cuda:0", "cuda:1"),
        "peak": 312.0,
        "telemetry": "nvml",
        "nvme": "run",  # the A100 nodes build it; the CPU head lacks libaio and runs no rank
        "fsdp2": TWO_GPUS,
    },
    "kuberay-no-smi-driver": {
        "nvml_gpu": [0],
        "fleet": {"gpu-pod": gpu_group("NVIDIA L4")},
        "plan": {},
        "plan_nodes": {
            "gpu_captures": ("gpu-pod",),
            "two_gpu": ("gpu-pod",),
            "fsdp2": ("gpu-pod",),
        },
        "one_rank": ("cuda:0",),
        "rehearsal": ("cuda:0", "cuda:0"),
        "two_gpu": ("cuda:0", "cuda:1"),
        "peak": 121.0,
        "telemetry": "nvml",
        "nvme": "run",
        "fsdp2": TWO_GPUS,
    },
    "cpu-only": {
        "nvml_gpu": [],
        "fleet": {"cpu-a": CPU_GROUP, "cpu-b": CPU_GROUP},
        "plan": CPU_PLAN,
        "plan_nodes": {"gpu_captures": (), "two_gpu": (), "fsdp2": ("cpu-a", "cpu-b")},
        "one_rank": (CPU,),
        "rehearsal": "not run: no CUDA",
        "two_gpu": "not run: no CUDA",
        "peak": "unknown",
        "telemetry": "absent: CPU run",
        "nvme": "run",
        "fsdp2": (CPU, CPU),  # two gloo ranks
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
    from orchestrator.sweep.planner import plan_runs, run_config
    from orchestrator.sweep.spec import parse_spec

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


def ranks(cluster, world_size: int, ranks_per_gpu: int, strategy: str = "zero3") -> list[dict]:
    """What each rank of one run on :func:`rank_node` does: Ray assigns each rank actor its GPU
    ids (two ranks per id with ``ranks_per_gpu`` 2), the real ``Rank.node_info`` /
    ``planner.place_ranks`` / ``Rank.run`` follow, up to the process group. Then, in the
    environment the rank exported: DeepSpeed's engine takes its device, and the rank's GPU
    figures are read (name, native bf16, a telemetry window). One dict per rank: ``device``,
    ``deepspeed``, ``fsdp2`` (FSDP2's device with the rank's device set first, and from
    LOCAL_RANK alone: :func:`hwprofiles.fsdp2_device`), ``name``, ``native_bf16``,
    ``telemetry``."""
    import torch.distributed as dist

    from orchestrator.sweep.planner import place_ranks
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
    cfg = run_config(world_size, ranks_per_gpu, strategy)
    out = []
    seen: dict[str, str] = {}

    @functools.wraps(dist.init_process_group)  # its signature: the rank inspects it
    def at_pg(backend, **kwargs):
        import torch

        seen["device"] = f"cuda:{torch.cuda.current_device()}" if backend == "nccl" else CPU
        seen["device_id"] = str(kwargs.get("device_id"))  # the NCCL communicator's device
        raise _AtProcessGroup

    for p, gpu_ids in zip(place_ranks(infos), assigned, strict=True):
        seen.clear()
        with cluster.on(node.hostname, worker_cvd(gpu_ids)):
            cluster.ray_worker(node, gpu_ids)
            cluster.mp.setattr(dist, "init_process_group", at_pg)
            cluster.mp.setattr("workloads.rank.wait_for_master", lambda *a: True)  # no rank 0
            visible = list(p.visible_gpus) if p.visible_gpus else None
            try:
                Rank().run(cfg, p.rank, world_size, p.local_rank, node.ip, 29500, visible)
            except _AtProcessGroup as exc:  # the rank names its device in its error
                seen["failure"] = exc
            except Exception as exc:  # noqa: BLE001 - a DeviceError is an outcome here
                seen["device"] = f"error: {exc}"
            record = {"deepspeed": None, "fsdp2": None, "placement": p, **seen}
            if seen["device"] != CPU:
                record["deepspeed"] = deepspeed_device(world_size, p.rank)
            if not seen["device"].startswith("error"):
                kind = "cpu" if seen["device"] == CPU else "cuda"
                record["fsdp2"] = tuple(
                    fsdp2_device(world_size, p.rank, kind, cuda_initialized=first)
                    for first in (True, False)
                )
            record |= gpu_figures(p.local_rank, visible)
        out.append(record)
    return out


def gpu_figures(local_rank: int, visible) -> dict:
    """The rank's GPU as training reads it (``workloads/train.py``): torch's name for it (the
    MFU peak's key), whether it computes bf16 natively, and one telemetry window's status."""
    import torch

    from workloads import device as device_mod
    from workloads.train import Telemetry, decide_device

    try:
        decision = decide_device(local_rank, visible)
    except Exception as exc:  # noqa: BLE001 - the device check reports it
        return {"name": None, "native_bf16": None, "telemetry": f"error: {exc}"}
    device = torch.device(decision.device)
    nvml = sys.modules["pynvml"]
    asked_before = len(getattr(nvml, "handles_asked", ()))
    telemetry = Telemetry(device, device_mod.nvml_target(decision.nvml_id))
    telemetry.start()
    status = telemetry.stop().status
    gpu = device.type == "cuda"
    native = getattr(device_mod, "native_bf16", None)
    return {
        "name": torch.cuda.get_device_name(device) if gpu else None,
        "native_bf16": native() if native is not None else None,
        "probe_precision": _probe_precision() if gpu else None,
        "telemetry": status,
        "nvml_asked": list(getattr(nvml, "handles_asked", ())[asked_before:]),
    }


def shape_outcome(
    cluster, world_size: int, ranks_per_gpu: int, gpus_needed: int, strategy: str = "zero3"
):
    """The ranks' devices, or why the run is not placed (what the capacity check says)."""
    from orchestrator.sweep import preflight
    from orchestrator.sweep.spec import SpecError, parse_spec

    node = rank_node(cluster)
    if (ranks_per_gpu == 2 or gpus_needed) and not node.ray_gpu_ids:
        return "not run: no CUDA", None, []
    if gpus_needed and len(node.ray_gpu_ids) < gpus_needed:
        return NOT_ON_ONE_GPU, None, []
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
        return f"refused: {exc}", None, []
    got = ranks(cluster, world_size, ranks_per_gpu, strategy)
    return tuple(r["device"] for r in got), tuple(r["deepspeed"] for r in got), got


SHAPES = {"one_rank": (1, 1, 0), "rehearsal": (2, 2, 1), "two_gpu": (2, 1, 2)}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_rank_devices(cluster, shape):
    """linksweep's device per rank: what EXPECTED says for the profile."""
    ours, _, _ = shape_outcome(cluster, *SHAPES[shape])
    assert ours == EXPECTED[cluster.profile.name][shape]


@pytest.mark.parametrize("shape", list(SHAPES))
def test_deepspeed_takes_the_device_linksweep_chose(cluster, shape):
    """DeepSpeed's engine, in the environment the rank exported (RANK, LOCAL_RANK,
    CUDA_VISIBLE_DEVICES), takes the device linksweep chose: a different index is another
    GPU, or an ordinal the process cannot see ("invalid device ordinal")."""
    ours, deepspeeds, _ = shape_outcome(cluster, *SHAPES[shape])
    if deepspeeds is None or all(d is None for d in deepspeeds):
        pytest.skip(f"no GPU rank in this shape: {ours}")
    assert deepspeeds == ours == EXPECTED[cluster.profile.name][shape]


def one_rank(cluster) -> dict:
    node = rank_node(cluster)
    return ranks(cluster, 1, 1)[0] if node.cpus or node.ray_gpu_ids else {}


def _probe_precision() -> str | None:
    """The fleet compute probe's precision on this GPU; None where linksweep has no such choice
    (a version before it: the device checks still run there)."""
    from workloads import fleet_probe

    choose = getattr(fleet_probe, "gpu_precision", None)
    return choose() if choose is not None else None


def test_native_bf16(cluster):
    """bf16 in hardware: compute capability 8.0 and newer; V100 only emulates it, so the fleet's
    GPU compute probe runs fp16 there (it would time the emulation)."""
    rank = one_rank(cluster)
    native = cluster.profile.name not in ("v100x8", "cpu-only")
    assert rank["native_bf16"] is native
    gpu = cluster.profile.name != "cpu-only"
    assert rank["probe_precision"] == (None if not gpu else "bf16" if native else "fp16")


def test_telemetry_samples_the_rank_gpu(cluster):
    """The NVML sampler opens the GPU the rank uses: Ray's id is NVML's index (every rank runs
    with CUDA_DEVICE_ORDER=PCI_BUS_ID), a MIG instance by its UUID; nothing on CPU."""
    assert one_rank(cluster)["nvml_asked"] == EXPECTED[cluster.profile.name]["nvml_gpu"]


def test_telemetry_status(cluster):
    """The one-rank run's stored telemetry: NVML sampled where there is a GPU, saying what the
    readings are where that is not obvious (a MIG slice, a driver without clock reasons)."""
    assert one_rank(cluster)["telemetry"].startswith(EXPECTED[cluster.profile.name]["telemetry"])


def selftest_plan(cluster, quick: bool = False):
    """The selftest's plan for the profile: the real discovery probe on every node (through the
    faked Ray), its reports read as the command reads them, the real plan."""
    from orchestrator.selftest import plan
    from orchestrator.topology.discovery import discover_nodes

    with cluster.on(cluster.profile.driver, cluster.profile.driver_cvd):
        reports = discover_nodes()
    return plan.plan_selftest([plan.NodeFacts.from_report(r) for r in reports], quick=quick)


def test_mfu_peak(cluster):
    """The peak MFU divides by, for the math the selftest's one-rank run uses, keyed by the name
    torch gives the rank's GPU (as ``workloads/train.py`` records it)."""
    from orchestrator.analysis.flops import lookup_peak, math_mode

    spec = selftest_plan(cluster).sweeps["one_rank"]
    name = one_rank(cluster)["name"]
    peak, why = lookup_peak(name, math_mode(spec["precision"], tf32=False))
    assert (peak or "unknown") == EXPECTED[cluster.profile.name]["peak"], why


def test_selftest_plan(cluster):
    """The selftest's plan (what ``--dry-run`` prints): which checks run and which are skipped
    with the reason EXPECTED gives; the GPU checks' nodes."""
    from orchestrator.selftest.plan import CHECK_NAMES

    plan = selftest_plan(cluster)
    expected = EXPECTED[cluster.profile.name]
    skipped = {c.check: c.why_not for c in plan.checks if not c.run}
    assert set(skipped) == set(expected["plan"]), skipped
    for check, words in expected["plan"].items():
        assert words in skipped[check], (check, skipped[check])
    assert [c.check for c in plan.checks] == list(CHECK_NAMES)
    for check, nodes in expected["plan_nodes"].items():
        if plan.check(check).run:
            assert plan.check(check).nodes == nodes, check


def test_every_planned_sweep_is_placed(cluster):
    """Every sweep the plan runs is one the cluster's capacity check accepts (Ray's GPUs, not
    CUDA's): a planned check that the sweep's own preflight refuses fails on every machine."""
    from orchestrator.sweep import preflight
    from orchestrator.sweep.spec import SpecError, parse_spec

    refused = {}
    for key, spec in selftest_plan(cluster).sweeps.items():
        try:
            preflight.check_cluster(parse_spec(spec), excluded=[])
        except SpecError as exc:
            refused[key] = str(exc)
    assert refused == {}


def test_dry_run_lists_the_plan(cluster):
    """``linksweep selftest --dry-run``'s text: every check, skipped ones with their reason."""
    from orchestrator.commands.selftest import dry_run

    with cluster.on(cluster.profile.driver, cluster.profile.driver_cvd):
        text = dry_run(quick=False, peak_tflops=None)
    for check, words in EXPECTED[cluster.profile.name]["plan"].items():
        assert check in text and words in text, (check, words)


def test_nvme_preflight(cluster):
    """The NVMe sweep's preflight asks the nodes that run ranks, not the driver's machine: it
    refuses only where such a node lacks what async_io needs, naming the node."""
    from orchestrator.sweep import preflight
    from orchestrator.sweep.spec import SpecError, parse_spec

    spec = parse_spec(selftest_plan(cluster).sweeps["nvme"])
    with cluster.on(cluster.profile.driver, cluster.profile.driver_cvd):
        try:
            preflight.preflight(spec, excluded=[])
            got = "run"
        except SpecError as exc:
            got = f"not run: {exc}"
            assert isinstance(exc, preflight.NodeLacks), exc  # the node's, so selftest: not run
    expected = EXPECTED[cluster.profile.name]["nvme"]
    if expected == "run":
        assert got == "run"
    else:
        node, lacks = expected.removeprefix("not run: ").split(" lacks ")
        assert got.startswith("not run") and node in got and lacks in got, got


GPUS_PER_SHAPE = {"one_rank": 1, "rehearsal": 1, "two_gpu": 2}
"""The GPUs a run's TFLOP/s per GPU and MFU divide by: two ranks sharing one GPU use one."""


@pytest.mark.parametrize("shape", list(SHAPES))
def test_tflops_per_distinct_gpu(cluster, shape):
    """MFU and TFLOP/s per GPU divide by the distinct GPUs the ranks used, from where Ray put
    them (``rows.gpus_used`` over the run's placements); a CPU run by its ranks."""
    from orchestrator.sweep.rows import gpus_used

    world_size, ranks_per_gpu, _ = SHAPES[shape]
    _, _, got = shape_outcome(cluster, *SHAPES[shape])
    if not got:
        pytest.skip("the shape does not run on this profile")
    placements = [r["placement"] for r in got]
    assert gpus_used(placements, world_size, ranks_per_gpu) == (
        GPUS_PER_SHAPE[shape] if rank_node(cluster).ray_gpu_ids else world_size
    )


def test_selftest_verdict_of_what_the_hardware_gives(cluster, tmp_path):
    """The verdict on the checks the node probes and the one-rank GPU run decide, from what the
    profile's nodes really answer (the real probes, captures and rank figures; the run's timing
    and memory planted): topo and gpu_captures pass wherever there is a GPU, and the one-rank
    GPU figures pass with MFU or telemetry reported as the hardware allows (unknown peak, MIG,
    old driver), never failed for it."""
    from orchestrator.analysis.flops import efficiency
    from orchestrator.commands import selftest as command
    from orchestrator.selftest import verdicts as verdict
    from orchestrator.topology.discovery import discover_nodes

    plan = selftest_plan(cluster)
    with cluster.on(cluster.profile.driver, cluster.profile.driver_cvd):
        nodes = command._write_nodes(tmp_path, discover_nodes())
        captures = command._capture_nvidia_smi(tmp_path)
    spec = plan.sweeps["one_rank"]
    rank = one_rank(cluster)
    gpu = rank["device"].startswith("cuda")
    row = {
        "strategy": "ddp", "grad_accum": 1, "status": "ok", "error": None, "n_steps": 10,
        "tokens_per_s": 1e4, "backend": "nccl" if gpu else "gloo", "peak_mem_bytes": 1e9,
        "telemetry": rank["telemetry"], "gpu_name": rank["name"],
        **efficiency(
            n_params=124_439_808, n_layer=12, d_model=768, n_positions=1024,
            seq_len=spec["seq_len"], tokens_per_step=spec["seq_len"] * spec["micro_batch_size"],
            gpus=1, median_step_time_s=0.1, precision=spec["precision"], gpu_name=rank["name"],
            peak_override=spec.get("peak_tflops"),
        ),
    }  # fmt: skip
    facts = verdict.Facts(
        doctor_exit=0,
        nodes=tuple(nodes),
        captures=captures,
        sweeps={"one_rank": verdict.SweepFacts(True, runs=(row,))},
    )
    got = {v.check: v.result for v in verdict.decide(facts, plan)}
    checks = ("topo", "gpu_captures", "one_rank", "one_rank_gpu_figures")
    expected = {
        c: "not run" if c in EXPECTED[cluster.profile.name]["plan"] else "pass" for c in checks
    }
    assert {c: got[c] for c in checks} == expected


def test_fleet_groups_sizes_and_rules(cluster):
    """The fleet check's nodes (Ray's table), their health read on each node (NVML there), and
    the groups they are judged in, with each group's message size and rule: a CPU node never
    sets a GPU node's size or threshold, and a MIG slice is not judged as a whole GPU."""
    from orchestrator.fleet.loop import FleetOptions, plan_groups
    from orchestrator.fleet.pairs import parse_pairs
    from orchestrator.raycluster.pinned_probes import fleet_nodes, read_health

    with cluster.on(cluster.profile.driver, cluster.profile.driver_cvd):
        nodes, _ = fleet_nodes()
        health = read_health(nodes)
    groups = plan_groups(nodes, health, FleetOptions({"default": {}}, parse_pairs("all")))
    got = {
        n.hostname: (
            key := groups.of[n.node_id],
            groups.msg_bytes[key] / 2**20,
            groups.rules[key].rel,
        )
        for n in nodes
    }
    assert got == EXPECTED[cluster.profile.name]["fleet"]


@pytest.mark.parametrize("shape", ["rehearsal", "two_gpu"])
def test_nccl_communicator_on_the_rank_device(cluster, shape):
    """``init_process_group`` gets the rank's device (``device_id``) on NCCL, so the
    communicator is created there, in pg_init, not on whatever device NCCL guesses later."""
    _, _, got = shape_outcome(cluster, *SHAPES[shape])
    if not got:
        pytest.skip("the shape does not run on this profile")
    assert [r["device_id"] for r in got] == [r["device"] for r in got]


def test_a_failed_run_keeps_each_rank_device(cluster):
    """A rehearsal whose ranks all fail at the process group: the run's error as the driver
    builds it (``errors.ranks_error_text`` of each rank's exception) and the stored
    ``runs.nodes`` (``rows``) give each rank the device it decided, and list the node's shared
    GPU once."""
    from orchestrator.errors import ranks_error_text
    from orchestrator.sweep import rows

    shape = "rehearsal" if rank_node(cluster).ray_gpu_ids else "one_rank"
    _, _, got = shape_outcome(cluster, *SHAPES[shape])
    error = ranks_error_text({i: r["failure"] for i, r in enumerate(got)}, len(got))
    stored = rows._nodes([r["placement"] for r in got], [], error)
    assert [n["device_decision"]["device"] for n in stored] == [r["device"] for r in got]
    visible = {n["visible_gpus"] for n in stored}
    assert visible == ({rank_node(cluster).ray_gpu_ids[:1]} if shape == "rehearsal" else {None})


def test_doctor_finds_nothing_invalidating(cluster):
    """``linksweep doctor`` (selftest's first check) on healthy hardware: the real probe on
    every node, then ``doctor_findings``; nothing may invalidate a link comparison, whether the
    driver is a GPU-less head, Ray holds fewer GPUs than the node has, or a GPU is a MIG slice."""
    from orchestrator.topology.discovery import discover_nodes, doctor_findings

    with cluster.on(cluster.profile.driver, cluster.profile.driver_cvd):
        findings = doctor_findings(discover_nodes())
    assert [(f.node, f.code, f.message) for f in findings if f.invalidates] == []


QUICK_SKIPS = {"fleet", "fleet_gpu", "two_rank_ddp", "two_rank_zero1", "two_rank_zero2"}
"""``--quick`` keeps one check per kind: no fleet check, one two-rank strategy (ZeRO-3)."""


def test_quick_plan_keeps_one_check_per_kind(cluster):
    """``selftest --quick``: the full plan's skips, plus ``--quick`` for the fleet and all but
    one two-rank strategy; every sweep it runs is one run; it ends sooner than the full plan."""
    from orchestrator.selftest.plan import planned_runs

    full, quick = selftest_plan(cluster), selftest_plan(cluster, quick=True)
    skipped = {c.check: c.why_not for c in quick.checks if not c.run}
    hardware = EXPECTED[cluster.profile.name]["plan"]
    assert set(skipped) == set(hardware) | QUICK_SKIPS
    assert all(skipped[c] == "--quick" for c in QUICK_SKIPS - set(hardware))
    assert {k: len(planned_runs(s)) for k, s in quick.sweeps.items()} == dict.fromkeys(
        quick.sweeps, 1
    )
    assert 0 < quick.estimate_s <= quick.bound_s < full.bound_s


def test_selftest_gpu_sweeps_use_math_the_gpu_has(cluster):
    """The selftest's sweeps train in a precision the ranks' GPU computes in hardware: bf16
    where it has bf16 units, else fp32 (on V100 torch would emulate bf16 in fp32: the run
    would time the emulation, as the fleet's compute probe already avoids); fp32 on CPU."""
    rank = one_rank(cluster)
    native = "bf16" if rank["native_bf16"] else "fp32"
    assert {k: s["precision"] for k, s in selftest_plan(cluster).sweeps.items()} == dict.fromkeys(
        selftest_plan(cluster).sweeps, native if rank["device"].startswith("cuda") else "fp32"
    )


# -- FSDP2 -------------------------------------------------------------------------------------

FSDP2_SHAPES = ("one_rank", "two_gpu")
"""The shapes an fsdp run can take: FSDP2 refuses two ranks sharing one GPU (the rehearsal)."""


@pytest.mark.parametrize("shape", FSDP2_SHAPES)
def test_fsdp2_takes_the_device_linksweep_chose(cluster, shape):
    """An fsdp rank, in the environment it exported: FSDP2's ``init_device_mesh`` (torch's own
    device rule) keeps the device linksweep set, and, were none set yet, would set the same one
    from LOCAL_RANK (linksweep exports the decided CUDA index there): no rank ends on another
    GPU, or on an ordinal its CUDA_VISIBLE_DEVICES hides."""
    ours, _, got = shape_outcome(cluster, *SHAPES[shape], strategy="fsdp")
    if not got:
        pytest.skip(f"the shape does not run on this profile: {ours}")
    assert [r["fsdp2"] for r in got] == [(d, d) for d in ours]
    assert ours == EXPECTED[cluster.profile.name][shape]


def test_fsdp2_run_as_the_selftest_plans_it(cluster):
    """The selftest's FSDP2 run on the profile: where the plan runs it, its sweep file's ranks
    land on the devices EXPECTED gives and FSDP2 takes the same; where it does not (one GPU at
    most), the plan's reason is EXPECTED's."""
    plan = selftest_plan(cluster)
    check, expected = plan.check("fsdp2"), EXPECTED[cluster.profile.name]["fsdp2"]
    if not check.run:
        assert isinstance(expected, str) and expected.startswith("not run: "), check.why_not
        assert expected.removeprefix("not run: ") in check.why_not
        assert "fsdp2" not in plan.sweeps
        return
    spec = plan.sweeps["fsdp2"]
    assert spec["grid"]["strategy"] == "fsdp" and "ranks_per_gpu" not in spec
    gpus = spec["world_size"] if plan.mode == "gpu" else 0
    ours, _, got = shape_outcome(cluster, spec["world_size"], 1, gpus, strategy="fsdp")
    assert ours == expected
    assert [r["fsdp2"] for r in got] == [(d, d) for d in ours]


def test_fsdp2_device_rule_is_torchs_and_catches_a_wrong_local_rank(monkeypatch, tmp_path):
    """The check can fail: on the 8-GPU node, torch's rule with nothing set follows LOCAL_RANK
    (1 -> cuda:1), and a LOCAL_RANK the process cannot see is an invalid ordinal, not a quiet
    fallback; with the device set first it keeps that device whatever LOCAL_RANK says."""
    import torch

    monkeypatch.setenv("LOCAL_RANK", "1")
    with installed(PROFILES["h100x8"], monkeypatch, tmp_path) as c:
        with c.on("h100-0", "0,1"):
            assert fsdp2_device(2, 0, "cuda", cuda_initialized=False) == "cuda:1"
            torch.cuda.set_device(0)
            assert fsdp2_device(2, 1, "cuda", cuda_initialized=True) == "cuda:0"
        with c.on("h100-0", "0"):  # a process that sees one GPU (CUDA fixes it at its start)
            got = fsdp2_device(2, 1, "cuda", cuda_initialized=False)
        assert got.startswith("error: set_device(1)") and "invalid device ordinal" in got
