"""workloads.device.choose_device: every branch of a rank's device decision, pure; and Rank.run
applying it (CUDA_VISIBLE_DEVICES, the error before init_process_group) in this process."""

from __future__ import annotations

import pytest
import torch.distributed as dist

from workloads.contract import DeviceDecision, LinkbenchConfig
from workloads.device import DeviceError, choose_device, nvml_target, visible_devices

CUDA_BUILD = ("2.13.0+cu128", "12.8")
CPU_BUILD = ("2.13.0+cpu", None)


def test_no_gpu_assigned_is_gloo_on_cpu_with_every_gpu_hidden():
    # item 2: torch may see CUDA (Ray 2.60 leaves CUDA_VISIBLE_DEVICES alone for num_gpus=0),
    # the rank still must not use a GPU nobody gave it
    for ids in (None, [], ()):
        d = choose_device(ids, 0, True, 8, *CUDA_BUILD)
        assert d == DeviceDecision("gloo", "cpu", "", None)
    assert visible_devices(None) == "" and visible_devices([]) == ""


@pytest.mark.parametrize(
    ("ids", "local_rank", "device", "cvd", "nvml"),
    [
        (["0"], 0, "cuda:0", "0", "0"),
        (["2", "5"], 1, "cuda:1", "2,5", "5"),  # physical ids, position among the visible
        (["5", "2"], 0, "cuda:0", "5,2", "5"),  # Ray's order, not sorted
        (["3", "3"], 1, "cuda:0", "3", "3"),  # ranks_per_gpu 2: both ranks on the one GPU
        (
            ["GPU-8f1a2b3c-0000-1111-2222-333344445555", "GPU-aa"],
            1,
            "cuda:1",
            "GPU-8f1a2b3c-0000-1111-2222-333344445555,GPU-aa",
            "GPU-aa",
        ),
        (
            ["MIG-4b1d0e6a-5c7f-5e2b-9a3d-0123456789ab"],
            0,
            "cuda:0",
            "MIG-4b1d0e6a-5c7f-5e2b-9a3d-0123456789ab",
            "MIG-4b1d0e6a-5c7f-5e2b-9a3d-0123456789ab",
        ),
    ],
)
def test_assigned_gpus_give_nccl_on_the_ranks_own_gpu(ids, local_rank, device, cvd, nvml):
    d = choose_device(ids, local_rank, True, len(set(ids)), *CUDA_BUILD)
    assert (d.backend, d.device, d.cuda_visible_devices, d.nvml_id) == ("nccl", device, cvd, nvml)


def test_assigned_gpus_and_a_cpu_only_torch_fail_naming_the_build():
    with pytest.raises(DeviceError) as err:
        choose_device(["0"], 0, False, 0, *CPU_BUILD)
    msg = str(err.value)
    assert "Ray assigned GPU 0" in msg and "torch 2.13.0+cpu (CUDA none)" in msg
    assert "CPU-only torch wheel on a GPU node" in msg


def test_assigned_gpus_and_a_cuda_torch_that_sees_none_point_at_the_driver():
    with pytest.raises(
        DeviceError, match=r"torch 2.13.0\+cu128 \(CUDA 12.8\) sees no CUDA.*driver"
    ):
        choose_device(["1"], 0, False, 0, *CUDA_BUILD)


def test_more_ids_than_cuda_devices_is_an_error():
    with pytest.raises(DeviceError, match=r"2 GPU\(s\) \['0', '1'\].*sees 1 CUDA device"):
        choose_device(["0", "1"], 0, True, 1, *CUDA_BUILD)


@pytest.mark.parametrize("local_rank", [-1, 2])
def test_local_rank_without_an_id_is_an_error(local_rank):
    with pytest.raises(DeviceError, match=r"allowed local ranks: 0\.\.1"):
        choose_device(["0", "1"], local_rank, True, 2, *CUDA_BUILD)


def test_decision_describes_itself_for_error_texts():
    d = DeviceDecision("nccl", "cuda:1", "0,1", "1")
    assert d.describe() == "backend=nccl device=cuda:1 CUDA_VISIBLE_DEVICES='0,1' nvml_id=1"


def test_nvml_target_never_parses_a_uuid():
    assert nvml_target("3") == 3
    assert nvml_target("GPU-8f1a2b3c") == "GPU-8f1a2b3c"
    assert nvml_target("MIG-4b1d") == "MIG-4b1d"
    assert nvml_target(None) is None


# --- Rank.run applies the decision (in this process, no Ray: init_process_group is faked) ---


class _Stop(Exception):
    pass


@pytest.fixture
def rank_env(monkeypatch):
    """Rank.run writes these to os.environ: restored after the test."""
    for key in ("CUDA_VISIBLE_DEVICES", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"):
        monkeypatch.setenv(key, "unset-by-test")
    monkeypatch.setenv("MASTER_PORT", "1")
    seen = {}

    def fake_init(backend, **kwargs):
        import os

        seen["backend"] = backend
        seen["cvd"] = os.environ["CUDA_VISIBLE_DEVICES"]
        raise _Stop("stop before any process group")

    monkeypatch.setattr(dist, "init_process_group", fake_init)
    return seen


def _run(node_gpu_ids):
    from workloads.rank import Rank

    cfg = LinkbenchConfig(run_id="t", max_bytes=1024, pg_timeout_s=5.0)
    return Rank().run(cfg, 0, 1, 0, "127.0.0.1", 1, node_gpu_ids)


def test_a_cpu_rank_hides_every_gpu_before_the_process_group(rank_env):
    # item 2: a forked rank (no GPU ids) or a CPU bundle on a GPU host
    with pytest.raises(_Stop) as err:
        _run(None)
    assert rank_env == {"backend": "gloo", "cvd": ""}
    assert err.value.__notes__ == [
        "rank 0 device: backend=gloo device=cpu CUDA_VISIBLE_DEVICES='' nvml_id=None"
    ]


def test_gpus_assigned_to_a_cpu_torch_fail_before_the_process_group(rank_env):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this torch sees CUDA: the error is for a CPU-only build")
    with pytest.raises(DeviceError, match=r"Ray assigned GPU 0 .*CPU-only torch wheel"):
        _run(["0"])
    assert rank_env == {}  # init_process_group never called
