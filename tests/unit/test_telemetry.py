"""Tests for workloads.telemetry with a fake NVML module (tests/unit/fake_nvml.py: same function
names and error classes as pynvml, with old-driver, permission, MIG and multi-GPU modes). The real
NVML on whatever machine runs the tests: tests/integration/test_node_probe.py.
"""

from __future__ import annotations

import pytest

from tests.unit.fake_nvml import FakeNvml
from workloads.telemetry import (
    BENIGN_MASK,
    SLOWDOWN_MASK,
    DoctorWarning,
    NvmlSampler,
    TelemetrySample,
    doctor_warnings,
    nvml_available,
    nvml_inventory,
    reason_names,
    summarize,
)


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


def run_sampler(fake: FakeNvml, interval_s: float = 0.001, device: int | str = 0):
    sampler = NvmlSampler(device, interval_s=interval_s, nvml=fake)
    sampler.start()
    assert fake.enough.wait(timeout=10), "sampler thread produced no samples"
    result = sampler.stop()
    assert not sampler._thread.is_alive()
    return result


def test_sampler_collects_and_stops_cleanly():
    fake = FakeNvml([sampling_gpu()])
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
    fake = FakeNvml([sampling_gpu()])
    result = run_sampler(fake)
    assert result.violation_ns == {"power": 250_000, "thermal": 0}


def test_sampler_old_driver_and_unsupported_power():
    """The old-driver mode: ...ClocksEventReasons raises FunctionNotFound (the library lacks the
    symbol); the sampler falls back to ...ClocksThrottleReasons and keeps sampling."""
    fake = FakeNvml([sampling_gpu(power_mw=None, reasons=0x20)], driver="old")
    result = run_sampler(fake)
    assert result.error is None and len(result.samples) >= 3
    assert all(s.power_w is None for s in result.samples)
    assert all(s.reasons == 0x20 for s in result.samples)  # via ...ClocksThrottleReasons
    assert result.reasons_available
    assert fake.throttle_reason_reads >= 3


def test_sampler_unsupported_violation_counters():
    fake = FakeNvml([sampling_gpu(violations=None)])
    assert run_sampler(fake).violation_ns == {}


def test_sampler_records_lost_gpu_and_still_releases_nvml():
    fake = FakeNvml([sampling_gpu(lost_at_read=3)])
    result = run_sampler(fake)
    assert len(result.samples) == 2
    assert result.error is not None and "GpuIsLost" in result.error
    assert fake.shut_down == 1


def test_sampler_context_manager_and_misuse():
    fake = FakeNvml([sampling_gpu()])
    with NvmlSampler(0, interval_s=0.001, nvml=fake) as sampler:
        assert fake.enough.wait(timeout=10)
    assert not sampler._thread.is_alive()
    assert fake.shut_down == 1
    with pytest.raises(RuntimeError):
        NvmlSampler(0, nvml=fake).stop()
    with pytest.raises(ValueError, match="interval_s"):
        NvmlSampler(0, interval_s=0, nvml=fake)


def test_sampler_ancient_driver_records_reasons_as_unavailable():
    fake = FakeNvml([sampling_gpu(reasons=0x40)], driver="ancient")
    result = run_sampler(fake)
    assert result.error is None and len(result.samples) >= 3  # the sampler did not die
    assert not result.reasons_available
    assert all(s.reasons == 0 for s in result.samples)
    assert all(s.temp_c is not None for s in result.samples)


@pytest.mark.parametrize(
    "fake,device,why",
    [
        (FakeNvml([sampling_gpu()], no_permission=True), 0, "NoPermission"),
        (FakeNvml([sampling_gpu()]), 3, "InvalidArgument"),
        (FakeNvml([sampling_gpu(uuid="GPU-1")]), "GPU-unknown", "NotFound"),
        (
            FakeNvml([sampling_gpu()], init_error=FakeNvml.NVMLError_Uninitialized("x")),
            0,
            "nvmlInit failed",
        ),
    ],
)
def test_sampler_start_errors_leave_it_absent(fake, device, why):
    sampler = NvmlSampler(device, interval_s=0.001, nvml=fake)
    sampler.start()  # must not raise into the training loop
    assert sampler.absent is not None and why in sampler.absent
    result = sampler.stop()
    assert result.samples == () and result.absent == sampler.absent
    assert fake.shut_down == fake.initialised  # every nvmlInit given back


def multi_gpus() -> list[dict]:
    return [
        sampling_gpu(uuid=f"GPU-{i}0000000-1111-2222-3333-444444444444", sm_mhz=1000 + i)
        for i in range(4)
    ]


@pytest.mark.parametrize("device,want_index", [(2, 2), ("3", 3)])
def test_sampler_multi_gpu_by_index(device, want_index):
    fake = FakeNvml(multi_gpus())
    result = run_sampler(fake, device=device)
    assert fake.handles_asked == [want_index]
    assert result.samples[0].sm_clock_mhz == 1000 + want_index


def test_sampler_multi_gpu_by_uuid():
    """Ray GPU ids can be UUIDs; pynvml's ...GetHandleByUUID needs bytes (c_char_p)."""
    fake = FakeNvml(multi_gpus())
    uuid = "GPU-10000000-1111-2222-3333-444444444444"
    result = run_sampler(fake, device=uuid)
    assert fake.handles_asked == [uuid]
    assert result.samples[0].sm_clock_mhz == 1001.0
    assert result.device == uuid and result.note is None


def test_sampler_mig_instance_reads_the_parent_gpu():
    gpus = multi_gpus()
    gpus[1]["mig"] = ["MIG-aaaaaaaa-0000-0000-0000-000000000001"]
    fake = FakeNvml(gpus)
    result = run_sampler(fake, device="MIG-aaaaaaaa-0000-0000-0000-000000000001")
    assert result.error is None and result.note is not None and "parent GPU" in result.note
    assert result.samples[0].sm_clock_mhz == 1001.0  # GPU 1's clock, not NotSupported


def test_fake_mig_handle_answers_nothing():
    """The fake's MIG handles behave as NVML's: whole-GPU readings are NotSupported."""
    gpus = [sampling_gpu(mig=["MIG-x"])]
    fake = FakeNvml(gpus)
    handle = fake.nvmlDeviceGetHandleByUUID(b"MIG-x")
    with pytest.raises(FakeNvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetClockInfo(handle, fake.NVML_CLOCK_SM)
    with pytest.raises(TypeError):
        fake.nvmlDeviceGetHandleByUUID("MIG-x")  # str: c_char_p refuses it


def test_sampler_keeps_its_samples_when_nvml_shutdown_fails():
    fake = FakeNvml([sampling_gpu()])

    def shutdown():
        raise FakeNvml.NVMLError_Uninitialized("Uninitialized")

    fake.nvmlShutdown = shutdown
    result = run_sampler(fake)
    assert len(result.samples) >= 3 and "nvmlShutdown" in result.error


def test_sampler_rejects_a_bad_device():
    with pytest.raises(ValueError, match="device"):
        NvmlSampler(None, nvml=FakeNvml([]))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- summarize


def sample(t_s=0.0, temp_c=60.0, power_w=300.0, sm=1900.0, reasons=0) -> TelemetrySample:
    return TelemetrySample(t_s, temp_c, power_w, sm, reasons)


def test_masks():
    assert SLOWDOWN_MASK == 0x8 | 0x20 | 0x40 | 0x80
    assert BENIGN_MASK == 0x1 | 0x2 | 0x10 | 0x100
    assert SLOWDOWN_MASK & BENIGN_MASK == 0
    assert not SLOWDOWN_MASK & 0x4  # SwPowerCap is the GPU working, not throttling
    assert reason_names(0x21) == ["GpuIdle", "SwThermalSlowdown"]
    assert reason_names(0x604) == ["SwPowerCap", "BoardLimit", "Reliability"]
    assert reason_names(0x1000 | 0x4) == ["SwPowerCap", "0x1000"]  # unknown bits as hex


def one(samples) -> dict:
    return {"rank 0": samples}


def test_summarize_thermal_bit_is_throttled():
    s = summarize(one([sample(0.0), sample(0.25, sm=1410.0, reasons=0x40)]), {})
    assert s.available and s.n_samples == 2
    assert s.throttled
    assert s.throttle_why == "rank 0: HwThermalSlowdown"
    assert s.clock_reasons == "HwThermalSlowdown"
    assert s.min_sm_clock_mhz == 1410.0


def test_summarize_benign_bits_are_not_throttled():
    s = summarize(one([sample(reasons=0x1), sample(reasons=0x2 | 0x10)]), {"rank 0": {}})
    assert not s.throttled and s.throttle_why is None
    assert s.clock_reasons == "GpuIdle,ApplicationsClocksSetting,SyncBoost"


def test_summarize_sw_power_cap_and_power_violation_are_recorded_not_excluded():
    """SwPowerCap is normal under load (power capping); it used to exclude the run."""
    busy = [sample(t_s=i * 0.25, sm=1755.0 + (i % 3) * 20, reasons=0x4) for i in range(12)]
    s = summarize(one(busy), {"rank 0": {"power": 2_000_000_000, "thermal": 0}})
    assert not s.throttled
    assert s.throttle_why is None
    assert s.clock_reasons == "SwPowerCap"


def test_summarize_board_limit_and_reliability_are_recorded_not_excluded():
    s = summarize(one([sample(reasons=0x200), sample(reasons=0x400 | 0x4)]), {})
    assert not s.throttled
    assert s.clock_reasons == "SwPowerCap,BoardLimit,Reliability"


def test_summarize_thermal_violation_time_is_throttled():
    s = summarize(one([sample()]), {"rank 0": {"power": 0, "thermal": 40_000_000}})
    assert s.throttled and s.throttle_why == "rank 0: thermal violation 40 ms"


def test_summarize_clock_fall_is_throttled_per_gpu():
    """Rank 1's clock sinks over the window (a heat soak) with no bit set; rank 0 is steady."""
    steady = [sample(t_s=i * 0.25, sm=1980.0, reasons=0x4) for i in range(9)]
    sinking = [sample(t_s=i * 0.25, sm=1980.0 - 80 * i, reasons=0x4) for i in range(9)]
    s = summarize({"rank 0": steady, "rank 1": sinking}, {})
    assert s.throttled
    assert s.throttle_why.startswith("rank 1: SM clock fell")
    assert "rank 0" not in s.throttle_why


def test_summarize_unavailable_reasons_are_said():
    s = summarize(one([sample()]), {}, reasons_unavailable=["rank 0"])
    assert s.clock_reasons == "none; clock reasons unavailable on rank 0"
    assert not s.throttled


def test_summarize_hot_and_figures():
    s = summarize(one([sample(temp_c=75.0, power_w=200.0), sample(temp_c=81.0, power_w=400.0)]))
    assert s.hot
    assert s.max_temp_c == 81.0
    assert s.mean_power_w == 300.0
    assert not summarize(one([sample(temp_c=80.0)])).hot  # 80 C itself is still fine
    assert not s.throttled  # hot is recorded, not excluding


def test_summarize_missing_fields_and_empty():
    s = summarize(one([sample(temp_c=None, power_w=None, sm=None)]), {})
    assert s.available and s.max_temp_c is None and s.mean_power_w is None and not s.hot
    empty = summarize({}, {"rank 0": {"thermal": 5}})
    assert empty.available is False
    assert (empty.max_temp_c, empty.mean_power_w, empty.min_sm_clock_mhz) == (None, None, None)
    assert empty.throttled is False and empty.hot is False
    assert empty.clock_reasons is None and empty.throttle_why is None


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
    with fake.loaded(0, 1, 2):  # the trained PCIe generations: read under load
        inv = nvml_inventory(nvml=fake)
    assert fake.initialised == fake.shut_down == 1
    assert [g["pcie_gen_current"] for g in nvml_inventory(nvml=fake)] == [1, 1, 1]  # idle
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
        "notes": [],
    }
    assert consumer["name"] == "NVIDIA GeForce RTX 3090"
    assert consumer["nvlink_active_count"] is None  # NotSupported on every link
    assert consumer["power_limit_w"] == 300.0
    assert unbridged["uuid"] is None
    assert unbridged["power_limit_w"] is None
    assert unbridged["nvlink_active_count"] == 0


def test_a_refused_reading_is_none_with_a_note_and_the_rest_stays():
    gpus = inventory_gpus()
    denied = FakeNvml.NVMLError_NoPermission("Insufficient Permissions")
    gpus[0]["limit_mw"] = denied  # a restricted call on one GPU
    gpus[0]["nvlink"] = FakeNvml.NVMLError_NoPermission("Insufficient Permissions")
    gpus[1]["handle_error"] = FakeNvml.NVMLError_NoPermission("Insufficient Permissions")
    fake = FakeNvml(gpus)
    h100, consumer, unbridged = nvml_inventory(nvml=fake)
    assert fake.initialised == fake.shut_down == 1
    assert h100["power_limit_w"] is None and h100["nvlink_active_count"] is None
    assert h100["notes"] == [
        "nvmlDeviceGetNvLinkState: NVMLError_NoPermission: Insufficient Permissions",
        "nvmlDeviceGetPowerManagementLimit: NVMLError_NoPermission: Insufficient Permissions",
    ]
    assert (h100["name"], h100["pcie_width_current"], h100["power_default_limit_w"]) == (
        "NVIDIA H100 80GB HBM3",
        16,
        700.0,
    )
    # a GPU NVML will not open: listed, every reading None, and why
    assert consumer["index"] == 1 and consumer["name"] is None and consumer["temp_c"] is None
    assert consumer["notes"] == [
        "nvmlDeviceGetHandleByIndex: NVMLError_NoPermission: Insufficient Permissions"
    ]
    assert unbridged == nvml_inventory(nvml=FakeNvml(inventory_gpus()))[2]  # untouched


def test_doctor_warnings():
    fake = FakeNvml(inventory_gpus())
    idle = {(w.gpu, w.code, w.invalidates) for w in doctor_warnings(nvml_inventory(nvml=fake))}
    assert (0, "pcie_gen_below_max", False) in idle  # an idle H100 at gen 1: a note, no more
    with fake.loaded(0, 1, 2):
        warnings = doctor_warnings(nvml_inventory(nvml=fake))
    by_gpu = {}
    for w in warnings:
        assert isinstance(w, DoctorWarning)
        by_gpu.setdefault(w.gpu, {})[w.code] = w
    assert 0 not in by_gpu  # a healthy H100 SXM box under load
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
