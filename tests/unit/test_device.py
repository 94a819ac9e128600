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
    # torch may see CUDA (Ray 2.60 leaves CUDA_VISIBLE_DEVICES alone for num_gpus=0),
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
    # no rank 0 listens here: the rank's wait for it (tests/unit/test_pg_init_order.py) is skipped
    monkeypatch.setattr("workloads.rank.wait_for_master", lambda *a: True)
    return seen


def _run(node_gpu_ids):
    from workloads.rank import Rank

    cfg = LinkbenchConfig(run_id="t", max_bytes=1024, pg_timeout_s=5.0)
    return Rank().run(cfg, 0, 1, 0, "127.0.0.1", 1, node_gpu_ids)


def test_a_cpu_rank_hides_every_gpu_before_the_process_group(rank_env):
    # a forked rank (no GPU ids) or a CPU bundle on a GPU host
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


# --- what the rank exports and binds follows its decision (pure) ---

SHARED = [choose_device(["0", "0"], lr, True, 1, *CUDA_BUILD) for lr in (0, 1)]


def test_local_rank_is_the_device_and_the_ranks_place_is_kept_apart():
    from workloads.device import rank_env as exported_env

    # two ranks on one GPU: DeepSpeed sets its device from LOCAL_RANK, so both must say 0
    for local_rank, decision in enumerate(SHARED):
        env = exported_env(decision, local_rank, 2, local_rank, "10.0.0.1", 29500)
        assert env == {
            "CUDA_VISIBLE_DEVICES": "0",
            "RANK": str(local_rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": "0",
            "LINKSWEEP_LOCAL_RANK": str(local_rank),
            "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "29500",
        }
    own = choose_device(["6", "3"], 1, True, 2, *CUDA_BUILD)  # one GPU each: its position
    assert exported_env(own, 1, 2, 1, "a", 1)["LOCAL_RANK"] == "1"
    cpu = choose_device([], 1, False, 0, *CPU_BUILD)
    env = exported_env(cpu, 3, 4, 1, "a", 1)
    assert env["LOCAL_RANK"] == env["LINKSWEEP_LOCAL_RANK"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == ""


def test_nccl_binds_the_decided_device_at_init_and_gloo_binds_none():
    import torch

    from workloads.device import pg_init_kwargs

    assert pg_init_kwargs(SHARED[1], 2, True) == {"device_id": torch.device("cuda", 0)}
    two = choose_device(["2", "5"], 1, True, 2, *CUDA_BUILD)
    assert pg_init_kwargs(two, 2, True) == {"device_id": torch.device("cuda", 1)}
    assert pg_init_kwargs(two, 1, True) == {}  # one rank: no peer, DeepSpeed skips it too
    assert pg_init_kwargs(two, 2, False) == {}  # a torch without the parameter
    assert pg_init_kwargs(DeviceDecision("gloo", "cpu", "", None), 2, True) == {}


def test_cuda_index_of_a_decision():
    assert DeviceDecision("nccl", "cuda:3", "0,1,2,3", "3").cuda_index == 3
    assert DeviceDecision("gloo", "cpu", "", None).cuda_index is None


@pytest.fixture
def cuda_view(monkeypatch):
    """torch's CUDA view of one GPU of a given compute capability (torch's own
    is_bf16_supported runs; only the device queries under it are faked)."""
    import types

    import torch

    def install(major: int, emulates: bool = True):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(
            torch.cuda, "get_device_properties", lambda d=None: types.SimpleNamespace(major=major)
        )
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (major, 0))
        monkeypatch.setattr(torch.cuda, "_check_bf16_tensor_supported", lambda d: emulates)
        monkeypatch.setattr(torch.version, "hip", None)

    return install


@pytest.mark.parametrize(("major", "native"), [(7, False), (8, True), (9, True)])
def test_native_bf16_asks_for_hardware_not_emulation(cuda_view, major, native):
    import torch

    from workloads.device import native_bf16

    cuda_view(major)  # 7: V100 (7.0) and T4 (7.5), which emulate bf16
    assert torch.cuda.is_bf16_supported() is True  # the question that was asked before
    assert native_bf16() is native


def test_native_bf16_on_a_torch_without_the_keyword(cuda_view, monkeypatch):
    import torch

    from workloads.device import native_bf16

    cuda_view(7)

    def old_is_bf16_supported():  # the signature before including_emulation existed
        return True

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", old_is_bf16_supported)
    assert native_bf16() is False
    cuda_view(8)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", old_is_bf16_supported)
    assert native_bf16() is True


def test_native_bf16_without_cuda_is_false(monkeypatch):
    import torch

    from workloads.device import native_bf16

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert native_bf16() is False
