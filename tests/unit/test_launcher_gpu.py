"""The fork launcher on GPU nodes, its pure parts: what the fork server's environment hides,
what a forked rank's ``CUDA_VISIBLE_DEVICES`` is, which of its bundle's GPU ids a rank gets,
and the NVML guard the server preloads under (``workloads/launcher.py``,
``orchestrator/raycluster/runs.py``)."""

from __future__ import annotations

import pytest

from orchestrator.raycluster.runs import bundle_gpu_ids, rank_gpu_ids
from orchestrator.sweep.planner import Launch
from workloads.device import visible_devices
from workloads.launcher import (
    child_visible_devices,
    guard_nvml,
    release_nvml_guard,
    server_env,
)


def test_the_fork_server_sees_no_gpu_and_gets_deepspeeds_accelerator_on_a_gpu_node():
    gpu, cpu = server_env("cuda"), server_env("cpu")
    for env in (gpu, cpu):  # torch's NVML check returns 0 from "" before loading NVML
        assert env["CUDA_VISIBLE_DEVICES"] == ""
        assert env["PYTORCH_NVML_BASED_CUDA_CHECK"] == "1"
    assert gpu["DS_ACCELERATOR"] == "cuda"  # else DeepSpeed would cache CPU, seeing no GPU
    assert "DS_ACCELERATOR" not in cpu
    with pytest.raises(ValueError, match="allowed: \\['cpu', 'cuda'\\]"):
        server_env("rocm")


@pytest.mark.parametrize(
    "gpus",
    [None, [], ["0"], ["1", "0"], ["0", "0"], ["GPU-5f1c", "GPU-8e2d"], ["MIG-a1", "MIG-a1"]],
)
def test_a_forked_ranks_visible_devices_are_what_the_rank_sets_itself(gpus):
    assert child_visible_devices(gpus) == visible_devices(gpus)


def test_the_default_child_env_hides_every_gpu():
    assert child_visible_devices(None) == ""


@pytest.mark.parametrize(
    "bundle_ids,ranks_per_bundle,gpus_per_rank,want",
    [
        # one rank per bundle, one GPU each: the bundle's id
        ([("0",), ("1",)], 1, 1.0, [("0",), ("1",)]),
        # spread with 2 ranks a node: a bundle of 2 GPUs, split in order
        ([("2", "3"), ("GPU-a", "GPU-b")], 2, 1.0, [("2",), ("3",), ("GPU-a",), ("GPU-b",)]),
        # two ranks sharing one GPU, a bundle each (pack) or one bundle (spread)
        ([("GPU-x",), ("GPU-x",)], 1, 0.5, [("GPU-x",), ("GPU-x",)]),
        ([("7",)], 2, 0.5, [("7",), ("7",)]),
        # CPU bundles: no ids
        ([(), ()], 1, 0.0, [(), ()]),
    ],
)
def test_each_rank_gets_its_share_of_its_bundles_gpu_ids(
    bundle_ids, ranks_per_bundle, gpus_per_rank, want
):
    ranks = range(len(bundle_ids) * ranks_per_bundle)
    got = [rank_gpu_ids(bundle_ids, r, ranks_per_bundle, gpus_per_rank) for r in ranks]
    assert got == want


def test_cpu_bundles_ask_ray_nothing():
    launch = Launch(None, {}, 2, "pack", {"CPU": 1.0}, 60.0)  # type: ignore[arg-type]
    assert bundle_gpu_ids(object(), launch) == [(), ()]  # no Ray call: pg is never read


def test_the_nvml_guard_refuses_init_until_released():
    pynvml = pytest.importorskip("pynvml")
    real = pynvml.nvmlInit, pynvml.nvmlInitWithFlags
    try:
        guard_nvml()
        for init in (pynvml.nvmlInit, pynvml.nvmlInitWithFlags):
            with pytest.raises(pynvml.NVMLError) as exc:  # what DeepSpeed catches
                init()
            assert "not initialised in the fork server" in str(exc.value)
        assert pynvml._nvmlLib_refcount == 0
        release_nvml_guard()
        assert (pynvml.nvmlInit, pynvml.nvmlInitWithFlags) == real
    finally:
        pynvml.nvmlInit, pynvml.nvmlInitWithFlags = real
        release_nvml_guard()


def test_run_rank_gives_the_child_its_gpus_and_a_cpu_rank_none():
    from types import SimpleNamespace

    from workloads.launcher import Launcher

    launcher = Launcher.__new__(Launcher)  # no fork server: only what run_rank asks call for
    calls = []
    launcher.call = lambda env, fn, args, run_id="": calls.append(env)
    cfg = SimpleNamespace(run_id="r1")
    launcher.run_rank({"NCCL_HOSTID": "h0"}, cfg, 0, 2, 0, "10.0.0.1", 1, ["GPU-b", "GPU-b"])
    launcher.run_rank({"NCCL_HOSTID": "h1"}, cfg, 1, 2, 1, "10.0.0.1", 1, None)
    assert calls == [
        {"NCCL_HOSTID": "h0", "CUDA_VISIBLE_DEVICES": "GPU-b"},  # two ranks, one GPU
        {"NCCL_HOSTID": "h1", "CUDA_VISIBLE_DEVICES": ""},
    ]


def test_a_forked_rank_that_outlives_its_kill_is_noted_before_the_group_goes(monkeypatch):
    from types import SimpleNamespace

    from orchestrator.raycluster import runs
    from orchestrator.raycluster.result import RunResult

    def launcher(left):
        return SimpleNamespace(kill_run=SimpleNamespace(remote=lambda run_id: left))

    pool = SimpleNamespace(values=lambda: [launcher([]), launcher([4242])])
    monkeypatch.setattr(runs.ray, "get", lambda refs, timeout: refs)  # the refs are the answers
    result = RunResult(launcher="fork")
    runs._kill_forked(pool, "r1", result)
    assert result.cleanup_errors == ["forked rank processes [4242] outlived SIGKILL"]
    clean = RunResult(launcher="fork")
    runs._kill_forked(SimpleNamespace(values=lambda: [launcher([])]), "r1", clean)
    assert clean.cleanup_errors == []
