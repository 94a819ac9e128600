"""Tests for workloads.telemetry with a fake NVML module (same function names and error classes
as pynvml). The real NVML on whatever machine runs the tests: tests/integration/test_node_probe.py.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from workloads.telemetry import (
    BENIGN_MASK,
    THROTTLE_MASK,
    DoctorWarning,
    NvmlSampler,
    TelemetrySample,
    doctor_warnings,
    nvml_available,
    nvml_inventory,
    reason_names,
    summarize,
)


class FakeNvml:
    """A stand-in for ``pynvml`` on an older driver (only ...ClocksThrottleReasons)."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's spelling
        pass

    class NVMLError_InvalidArgument(NVMLError):  # noqa: N801
        pass

    class NVMLError_GpuIsLost(NVMLError):  # noqa: N801
        pass

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_PERF_POLICY_POWER = 0
    NVML_PERF_POLICY_THERMAL = 1
    NVML_NVLINK_MAX_LINKS = 18
    NVML_FEATURE_ENABLED = 1

    def __init__(self, gpus: list[dict], enough_samples: int = 3):
        self.gpus = gpus
        self.initialised = 0
        self.shut_down = 0
        self.temp_reads = 0
        self.enough = threading.Event()
        self.enough_samples = enough_samples

    # library
    def nvmlInit(self):
        self.initialised += 1

    def nvmlShutdown(self):
        self.shut_down += 1

    def nvmlSystemGetDriverVersion(self):
        return "550.54.15"

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def _get(self, handle, key):
        value = self.gpus[handle].get(key)
        if value is None:
            raise self.NVMLError_NotSupported("Not Supported")
        if isinstance(value, Exception):
            raise value
        return value

    # sampling
    def nvmlDeviceGetTemperature(self, handle, sensor):
        assert sensor == self.NVML_TEMPERATURE_GPU
        self.temp_reads += 1
        if self.temp_reads >= self.enough_samples:
            self.enough.set()
        lost_at = self.gpus[handle].get("lost_at_read")
        if lost_at is not None and self.temp_reads >= lost_at:
            raise self.NVMLError_GpuIsLost("GPU is lost")
        temps = self._get(handle, "temps")
        return temps[min(self.temp_reads - 1, len(temps) - 1)]

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._get(handle, "power_mw")

    def nvmlDeviceGetClockInfo(self, handle, clock):
        assert clock == self.NVML_CLOCK_SM
        return self._get(handle, "sm_mhz")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return self._get(handle, "reasons")

    def nvmlDeviceGetViolationStatus(self, handle, policy):
        counters = self._get(handle, "violations")[policy]
        return SimpleNamespace(referenceTime=0, violationTime=counters.pop(0))

    # inventory
    def nvmlDeviceGetName(self, handle):
        return self._get(handle, "name")

    def nvmlDeviceGetUUID(self, handle):
        return self._get(handle, "uuid")

    def nvmlDeviceGetPciInfo(self, handle):
        return SimpleNamespace(busId=self._get(handle, "bus_id"))

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(total=self._get(handle, "mem_bytes"), used=0, free=0)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return self._get(handle, "gen")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle):
        return self._get(handle, "gen_max")

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return self._get(handle, "width")

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle):
        return self._get(handle, "width_max")

    def nvmlDeviceGetPowerManagementLimit(self, handle):
        return self._get(handle, "limit_mw")

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle):
        return self._get(handle, "default_limit_mw")

    def nvmlDeviceGetNvLinkState(self, handle, link):
        states = self._get(handle, "nvlink")
        if link >= len(states):
            raise self.NVMLError_InvalidArgument("Invalid Argument")
        return states[link]


class FakeNvmlNew(FakeNvml):
    """Newer drivers: ...ClocksEventReasons (the old name still exists)."""

    def __init__(self, gpus, enough_samples=3):
        super().__init__(gpus, enough_samples)
        self.event_reason_reads = 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        self.event_reason_reads += 1
        return self._get(handle, "reasons")


def sampling_gpu(**over) -> dict:
    gpu = {
        "temps": [45, 52, 61, 63],
        "power_mw": 250_000,
        "sm_mhz": 1980,
        "reasons": 0x1,  # GpuIdle: benign
        "violations": {0: [1_000, 251_000], 1: [0, 0]},
    }
    gpu.update(over)
    return gpu


# --------------------------------------------------------------------------- sampler


def run_sampler(fake: FakeNvml, interval_s: float = 0.001):
    sampler = NvmlSampler(0, interval_s=interval_s, nvml=fake)
    sampler.start()
    assert fake.enough.wait(timeout=10), "sampler thread produced no samples"
    result = sampler.stop()
    assert not sampler._thread.is_alive()
    return result


def test_sampler_collects_and_stops_cleanly():
    fake = FakeNvmlNew([sampling_gpu()])
    result = run_sampler(fake)
    assert len(result.samples) >= 3
    first = result.samples[0]
    assert first.temp_c == 45.0
    assert first.power_w == 250.0
    assert first.sm_clock_mhz == 1980.0
    assert first.reasons == 0x1
    ts = [s.t_s for s in result.samples]
    assert ts == sorted(ts) and ts[0] >= 0.0
    assert result.error is None
    assert fake.initialised == fake.shut_down == 1
    assert fake.event_reason_reads >= 3  # the newer API is preferred when present


def test_sampler_violation_diff():
    fake = FakeNvmlNew([sampling_gpu()])
    result = run_sampler(fake)
    assert result.violation_ns == {"power": 250_000, "thermal": 0}


def test_sampler_old_driver_and_unsupported_power():
    fake = FakeNvml([sampling_gpu(power_mw=None, reasons=0x20)])
    result = run_sampler(fake)
    assert all(s.power_w is None for s in result.samples)
    assert all(s.reasons == 0x20 for s in result.samples)  # via ...ClocksThrottleReasons


def test_sampler_unsupported_violation_counters():
    fake = FakeNvmlNew([sampling_gpu(violations=None)])
    assert run_sampler(fake).violation_ns == {}


def test_sampler_records_lost_gpu_and_still_releases_nvml():
    fake = FakeNvmlNew([sampling_gpu(lost_at_read=3)])
    result = run_sampler(fake)
    assert len(result.samples) == 2
    assert result.error is not None and "GpuIsLost" in result.error
    assert fake.shut_down == 1


def test_sampler_context_manager_and_misuse():
    fake = FakeNvmlNew([sampling_gpu()])
    with NvmlSampler(0, interval_s=0.001, nvml=fake) as sampler:
        assert fake.enough.wait(timeout=10)
    assert not sampler._thread.is_alive()
    assert fake.shut_down == 1
    with pytest.raises(RuntimeError):
        NvmlSampler(0, nvml=fake).stop()
    with pytest.raises(ValueError, match="interval_s"):
        NvmlSampler(0, interval_s=0, nvml=fake)


# --------------------------------------------------------------------------- summarize


def sample(t_s=0.0, temp_c=60.0, power_w=300.0, sm=1900.0, reasons=0) -> TelemetrySample:
    return TelemetrySample(t_s, temp_c, power_w, sm, reasons)


def test_masks():
    assert THROTTLE_MASK == 0x4 | 0x8 | 0x20 | 0x40 | 0x80
    assert BENIGN_MASK == 0x1 | 0x2 | 0x10
    assert THROTTLE_MASK & BENIGN_MASK == 0
    assert reason_names(0x21) == ["GpuIdle", "SwThermalSlowdown"]


def test_summarize_thermal_bit_is_throttled():
    s = summarize([sample(0.0), sample(0.25, sm=1410.0, reasons=0x40)], {})
    assert s.available and s.n_samples == 2
    assert s.throttled
    assert s.throttle_reasons == ("HwThermalSlowdown",)
    assert s.min_sm_clock_mhz == 1410.0


def test_summarize_benign_bits_are_not_throttled():
    s = summarize([sample(reasons=0x1), sample(reasons=0x2 | 0x10)], {"power": 0, "thermal": 0})
    assert not s.throttled
    assert s.throttle_reasons == ()


def test_summarize_violation_time_is_throttled():
    assert summarize([sample()], {"power": 1_000_000, "thermal": 0}).throttled


def test_summarize_hot_and_figures():
    s = summarize([sample(temp_c=75.0, power_w=200.0), sample(temp_c=81.0, power_w=400.0)], {})
    assert s.hot
    assert s.max_temp_c == 81.0
    assert s.mean_power_w == 300.0
    assert not summarize([sample(temp_c=80.0)], {}).hot  # 80 C itself is still fine


def test_summarize_missing_fields_and_empty():
    s = summarize([sample(temp_c=None, power_w=None, sm=None)], {})
    assert s.available and s.max_temp_c is None and s.mean_power_w is None and not s.hot
    empty = summarize([], {"power": 5})
    assert empty.available is False
    assert (empty.max_temp_c, empty.mean_power_w, empty.min_sm_clock_mhz) == (None, None, None)
    assert empty.throttled is False and empty.hot is False


# --------------------------------------------------------------------------- inventory, doctor

NVLINK_18_UP = [1] * 18


def inventory_gpus() -> list[dict]:
    h100 = {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-00000000-1111-2222-3333-444444444444",
        "bus_id": "00000000:1B:00.0",
        "mem_bytes": 85_520_809_984,
        "gen": 5, "gen_max": 5, "width": 16, "width_max": 16,
        "limit_mw": 700_000, "default_limit_mw": 700_000,
        "nvlink": NVLINK_18_UP, "temps": [31],
    }  # fmt: skip
    consumer = {
        "name": b"NVIDIA GeForce RTX 3090",  # old pynvml returned bytes
        "uuid": b"GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
        "bus_id": b"00000000:08:00.0",
        "mem_bytes": 25_769_803_776,
        "gen": 1, "gen_max": 4, "width": 4, "width_max": 16,
        "limit_mw": 300_000, "default_limit_mw": 420_000,
        "nvlink": None, "temps": [85],
    }  # fmt: skip
    unbridged = {
        "name": "NVIDIA RTX A6000", "uuid": None, "bus_id": "00000000:41:00.0",
        "mem_bytes": 51_527_024_640, "gen": 4, "gen_max": 4, "width": 16, "width_max": 16,
        "limit_mw": None, "default_limit_mw": None, "nvlink": [0, 0, 0, 0], "temps": [40],
    }  # fmt: skip
    return [h100, consumer, unbridged]


def test_inventory():
    fake = FakeNvml(inventory_gpus())
    inv = nvml_inventory(nvml=fake)
    assert fake.initialised == fake.shut_down == 1
    assert [g["index"] for g in inv] == [0, 1, 2]
    h100, consumer, unbridged = inv
    assert h100 == {
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-00000000-1111-2222-3333-444444444444",
        "pci_bus_id": "00000000:1B:00.0",
        "memory_total_bytes": 85_520_809_984,
        "pcie_gen_current": 5,
        "pcie_gen_max": 5,
        "pcie_width_current": 16,
        "pcie_width_max": 16,
        "power_limit_w": 700.0,
        "power_default_limit_w": 700.0,
        "nvlink_active_count": 18,
        "temp_c": 31.0,
    }
    assert consumer["name"] == "NVIDIA GeForce RTX 3090"
    assert consumer["nvlink_active_count"] is None  # NotSupported on every link
    assert consumer["power_limit_w"] == 300.0
    assert unbridged["uuid"] is None
    assert unbridged["power_limit_w"] is None
    assert unbridged["nvlink_active_count"] == 0


def test_doctor_warnings():
    warnings = doctor_warnings(nvml_inventory(nvml=FakeNvml(inventory_gpus())))
    by_gpu = {}
    for w in warnings:
        assert isinstance(w, DoctorWarning)
        by_gpu.setdefault(w.gpu, {})[w.code] = w
    assert 0 not in by_gpu  # a healthy H100 SXM box
    consumer = by_gpu[1]
    assert set(consumer) == {
        "pcie_gen_below_max",
        "pcie_width_below_max",
        "power_limit_below_default",
        "hot",
    }
    assert consumer["pcie_gen_below_max"].invalidates is False
    assert "idle" in consumer["pcie_gen_below_max"].message.lower()
    assert consumer["pcie_width_below_max"].invalidates is True
    assert "x4 of x16" in consumer["pcie_width_below_max"].message
    assert consumer["power_limit_below_default"].invalidates is True
    assert "300 W" in consumer["power_limit_below_default"].message
    assert consumer["hot"].invalidates is True
    assert set(by_gpu[2]) == {"nvlink_inactive"}
    assert by_gpu[2]["nvlink_inactive"].invalidates is False
    assert doctor_warnings([]) == []


# --------------------------------------------------------------------------- availability


def test_nvml_available_with_fake():
    fake = FakeNvml(inventory_gpus())
    assert nvml_available(nvml=fake) == (True, "3 GPU(s), driver 550.54.15")
    assert fake.shut_down == 1
