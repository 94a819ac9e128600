"""The fakes hold the hardware's rules: CUDA fixes ``CUDA_VISIBLE_DEVICES`` when it starts in a
process, and an idle GPU reads a lower PCIe generation than a busy one. A fake kinder than the
hardware lets code pass that a real node misreads (docs in ``tests/unit/fake_cuda.py`` and
``tests/unit/fake_nvml.py``)."""

from __future__ import annotations

import pytest
import torch

from tests.unit.fake_nvml import IDLE_PCIE_GEN, FakeNvml, health_gpu
from tests.unit.hwprofiles import PROFILES, installed


@pytest.fixture
def h100x8(monkeypatch, tmp_path):
    with installed(PROFILES["h100x8"], monkeypatch, tmp_path) as cluster:
        yield cluster


def test_cuda_visible_devices_set_after_cuda_started_changes_nothing(h100x8, monkeypatch):
    with h100x8.on("h100-0", "2,5"):
        assert torch.cuda.is_available()  # cudaGetDeviceCount: cuInit reads the variable now
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
        torch.cuda.set_device(1)  # still GPU 5: the set CUDA started with
        assert torch.cuda.device_count() == 2
        assert h100x8.views["h100-0"].nvml_index(torch.cuda.current_device()) == 5
    with h100x8.on("h100-0", "7"):  # a new process reads the variable anew
        assert torch.cuda.device_count() == 1
        with pytest.raises(RuntimeError, match="invalid device ordinal"):
            torch.cuda.set_device(1)


def test_before_cuda_starts_device_count_follows_the_variable_as_torchs_nvml_count_does(
    h100x8, monkeypatch
):
    with h100x8.on("h100-0", None):
        assert torch.cuda.device_count() == 8  # NVML-based: no cuInit, no freeze
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
        assert torch.cuda.device_count() == 2
        assert not torch.cuda.is_initialized()
        torch.cuda.init()
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
        assert torch.cuda.device_count() == 2 and torch.cuda.is_initialized()


def test_a_tensor_on_a_gpu_is_made_on_the_cpu_and_keeps_that_gpu_busy_until_the_process_ends(
    h100x8,
):
    with h100x8.on("h100-0", "4,6"):
        assert torch.zeros(2, device="cuda:1").device.type == "cpu"
        assert h100x8.busy["h100-0"] == {6}
        import pynvml

        gens = [
            pynvml.nvmlDeviceGetCurrPcieLinkGeneration(pynvml.nvmlDeviceGetHandleByIndex(i))
            for i in range(8)
        ]
        assert gens == [4 if i == 6 else IDLE_PCIE_GEN for i in range(8)]
        with pytest.raises(RuntimeError, match="invalid device ordinal"):
            torch.ones(1, device=torch.device("cuda", 2))
    assert h100x8.busy["h100-0"] == set()


def test_nvml_pcie_generation_follows_the_load_and_never_rises_above_the_trained_one():
    fake = FakeNvml([health_gpu(0), health_gpu(1, gen=3, gen_idle=4)])
    read = [fake.nvmlDeviceGetCurrPcieLinkGeneration(i) for i in range(2)]
    assert read == [1, 3]
    with fake.loaded(0, 1):
        assert [fake.nvmlDeviceGetCurrPcieLinkGeneration(i) for i in range(2)] == [5, 3]
        assert [fake.nvmlDeviceGetMaxPcieLinkGeneration(i) for i in range(2)] == [5, 5]
    assert fake.busy == set()


def test_a_mig_id_makes_torchs_device_count_ask_cuda_which_starts_it(monkeypatch, tmp_path):
    from tests.unit.hwprofiles import MIG_ID

    with installed(PROFILES["a100-mig-1g"], monkeypatch, tmp_path) as c, c.on("mig-0", MIG_ID):
        assert torch.cuda.device_count() == 1
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
        assert torch.cuda.is_available()  # CUDA started with the MIG instance visible
