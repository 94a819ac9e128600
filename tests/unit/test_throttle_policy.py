"""Telemetry that survives older drivers and a throttle rule that excludes only real slowdowns,
where they meet a run's row: the throttle policy applied by
``orchestrator.sweep.rows._telemetry_facts`` and the rank-side ``workloads.train.Telemetry`` boundary,
which must never fail a run over NVML trouble. NVML is the fake of tests/unit/fake_nvml.py."""

from __future__ import annotations

import pytest

from orchestrator.sweep.rows import _telemetry_facts
from tests.unit.fake_nvml import FakeNvml
from workloads.contract import TelemetryRecord, TelemetrySample, TrainingRecord
from workloads.throttle import CLOCK_FALL_RATIO, MIN_CLOCK_SAMPLES, clock_fall


def trained(*telemetry: TelemetryRecord) -> list[tuple[int, TrainingRecord]]:
    return [
        (
            rank,
            TrainingRecord(
                steps=(),
                n_params=1,
                data_source="builtin",
                tokenizer="gpt2",
                first_step_wall_s=0.0,
                peak_mem_bytes=0,
                comms=(),
                profile_steps=0,
                telemetry=t,
                nvme_swap_files=0,
            ),
        )
        for rank, t in enumerate(telemetry)
    ]


def busy(n=12, sm=1755.0, reasons=0x4, fall_mhz=0.0) -> tuple[TelemetrySample, ...]:
    """A compute-bound GPU's window: power-capped (SwPowerCap), clocks wandering by 20 MHz."""
    return tuple(
        TelemetrySample(i * 0.25, 70.0, 690.0, sm + (i % 3) * 20 - fall_mhz * i, reasons)
        for i in range(n)
    )


def test_power_capped_run_is_recorded_not_excluded():
    """Failed on 24a5ba5 (any SwPowerCap bit or power-violation time set throttled)."""
    rec = TelemetryRecord("nvml", busy(), {"power": 3_000_000_000, "thermal": 0})
    _, facts = _telemetry_facts("r", trained(rec, rec))
    assert facts["throttled"] is False
    assert facts["throttle_why"] is None
    assert facts["clock_reasons"] == "SwPowerCap"


def test_hw_slowdown_on_one_rank_excludes_and_says_where():
    ok = TelemetryRecord("nvml", busy())
    slowed = TelemetryRecord("nvml", busy(reasons=0x4 | 0x8))
    _, facts = _telemetry_facts("r", trained(ok, slowed))
    assert facts["throttled"] is True
    assert facts["throttle_why"] == "rank 1: HwSlowdown"
    assert facts["clock_reasons"] == "SwPowerCap,HwSlowdown"


def test_clock_fall_excludes_without_any_bit():
    sinking = TelemetryRecord("nvml", busy(reasons=0x4, fall_mhz=40.0))
    _, facts = _telemetry_facts("r", trained(sinking))
    assert facts["throttled"] is True and "SM clock fell" in facts["throttle_why"]


def test_unavailable_reasons_and_absent_telemetry_are_said():
    no_reasons = TelemetryRecord("nvml (clock reasons unavailable)", busy(reasons=0))
    _, facts = _telemetry_facts("r", trained(no_reasons))
    assert facts["clock_reasons"] == "none; clock reasons unavailable on rank 0"
    _, absent = _telemetry_facts("r", trained(TelemetryRecord("absent: CPU run")))
    assert absent["throttled"] is None and absent["clock_reasons"] is None


def test_clock_fall_rule_edges():
    steady = busy(n=30)
    assert clock_fall(steady) is None
    # idle samples (GpuIdle) are left out: clocks drop by design there
    idle_tail = steady[:15] + busy(n=15, sm=300.0, reasons=0x1)
    assert clock_fall(idle_tail) is None
    # too few samples decide nothing, however low the last one
    assert clock_fall(busy(n=MIN_CLOCK_SAMPLES - 1, fall_mhz=300.0)) is None
    # just inside and just past the limit
    first = 2000.0
    inside = [TelemetrySample(0, None, None, first, 0)] * 3 + [
        TelemetrySample(0, None, None, first * CLOCK_FALL_RATIO + 1, 0)
    ] * 3
    past = inside[:3] + [TelemetrySample(0, None, None, first * CLOCK_FALL_RATIO - 1, 0)] * 3
    assert clock_fall(inside) is None
    assert clock_fall(past) is not None


# ----------------------------------------------------------------- the rank-side boundary


def gpu() -> dict:
    return {
        "uuid": "GPU-1",
        "temps": [50],
        "power_mw": 300_000,
        "sm_mhz": 1900,
        "reasons": 0x4,
        "violations": {0: [0, 0], 1: [0, 0]},
    }


def cuda0():
    torch = pytest.importorskip("torch")
    return torch.device("cuda", 0)  # a device object only: nothing touches CUDA


def test_telemetry_no_permission_is_absent_and_the_run_goes_on():
    """Failed on 24a5ba5: NoPermission from the handle lookup escaped start()."""
    from workloads.train import Telemetry

    tel = Telemetry(cuda0(), 0, nvml=FakeNvml([gpu()], no_permission=True))
    tel.start()
    rec = tel.stop()
    assert rec.status.startswith("absent: ") and "NoPermission" in rec.status
    assert rec.samples == ()


def test_telemetry_old_driver_samples_and_ancient_driver_says_so():
    from workloads.train import Telemetry

    fake = FakeNvml([gpu()], enough_samples=2, driver="old")
    tel = Telemetry(cuda0(), "GPU-1", nvml=fake)
    tel.start()
    assert fake.enough.wait(10)
    rec = tel.stop()
    assert rec.status == "nvml" and rec.samples and all(s.reasons == 0x4 for s in rec.samples)

    fake = FakeNvml([gpu()], enough_samples=2, driver="ancient")
    tel = Telemetry(cuda0(), "0", nvml=fake)
    tel.start()
    assert fake.enough.wait(10)
    rec = tel.stop()
    assert rec.status == "nvml (clock reasons unavailable)" and rec.samples
