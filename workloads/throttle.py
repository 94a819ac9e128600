"""The throttle policy: which NVML clock-event reasons a run records, and which exclude it. Pure.

A compute-bound GPU sits at its power limit most of the time, so NVML reports SwPowerCap (0x4) in
nearly every sample of a busy GPU; that is the GPU working as designed, and health checks do not
count it (Azure/azurehpc-health-checks ``customTests/azure_gpu_clock_throttling.nhc`` ignores
None, GpuIdle and SwPowerCap and warns on every other reason). Excluding such runs would drop most
GPU runs from every figure. The policy, explained with its sources in ``docs/gpu-telemetry.md``:

- **Record every reason seen** (``runs.clock_reasons``): the names of all bits set in any sample
  of any rank, unknown bits as hex, ``none`` when no bit was ever set, and which ranks' driver
  could not report reasons at all.
- **Exclude a run** (``runs.throttled`` true, ``runs.throttle_why`` saying why) only when
  1. a *slowdown* bit was set in a sample: HwSlowdown (0x8), SwThermalSlowdown (0x20),
     HwThermalSlowdown (0x40), HwPowerBrakeSlowdown (0x80): the clock was cut by a thermal or
     hardware protection, which depends on the room, the fans or the PSU, not on the link;
  2. or NVML's thermal violation counter grew during the window (thermal slowdown between two
     samples);
  3. or the SM clock fell measurably during the timed steps (``clock_fall``): the median SM clock
     of the last third of the window's samples is below ``CLOCK_FALL_RATIO`` (90 %) of the
     median of the first third. Samples with GpuIdle set are left out (idle clocks drop by
     design), and fewer than ``MIN_CLOCK_SAMPLES`` usable samples decide nothing.

  SwPowerCap, power violation time, BoardLimit (0x200) and Reliability (0x400) are recorded but
  do not exclude by themselves: they are limits of the board under load (power, board-level
  current, reliability voltage), present on every run of that GPU alike, so comparing variants on
  one GPU stays fair. If one of them does cut clocks over the window, rule 3 catches it.

Why the first third against the last third, not the window's maximum or the GPU's max clock: a
power-capped GPU's SM clock oscillates around a steady level (a short spike to the boost clock
is common), and its steady level sits well below ``nvmlDeviceGetMaxClockInfo``; a ratio to a
maximum would flag ordinary power capping. A fall between the start and the end of the timed
window is what a heat soak or a failing fan looks like, and medians ignore single spikes. 10 %:
above the few-percent wander of a power-capped clock, and a 10 % slower GPU is a larger effect
than the link differences a sweep resolves on compute-bound variants.

May import: nothing (the standard library only).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

# NVML nvmlClocksEventReason* / nvmlClocksThrottleReason* bits (nvidia-ml-py 13.615 pynvml.py).
GPU_IDLE = 0x1
APPLICATIONS_CLOCKS_SETTING = 0x2
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SYNC_BOOST = 0x10
SW_THERMAL_SLOWDOWN = 0x20
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE_SLOWDOWN = 0x80
DISPLAY_CLOCK_SETTING = 0x100
BOARD_LIMIT = 0x200
RELIABILITY = 0x400

REASON_NAMES: dict[int, str] = {
    GPU_IDLE: "GpuIdle",
    APPLICATIONS_CLOCKS_SETTING: "ApplicationsClocksSetting",
    SW_POWER_CAP: "SwPowerCap",
    HW_SLOWDOWN: "HwSlowdown",
    SYNC_BOOST: "SyncBoost",
    SW_THERMAL_SLOWDOWN: "SwThermalSlowdown",
    HW_THERMAL_SLOWDOWN: "HwThermalSlowdown",
    HW_POWER_BRAKE_SLOWDOWN: "HwPowerBrakeSlowdown",
    DISPLAY_CLOCK_SETTING: "DisplayClockSetting",
    BOARD_LIMIT: "BoardLimit",
    RELIABILITY: "Reliability",
}

SLOWDOWN_MASK = HW_SLOWDOWN | SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN | HW_POWER_BRAKE_SLOWDOWN
"""Bits that exclude a run: clocks cut by thermal or hardware protection."""
BENIGN_MASK = GPU_IDLE | APPLICATIONS_CLOCKS_SETTING | SYNC_BOOST | DISPLAY_CLOCK_SETTING
"""Bits of normal operation: nothing to do, or clocks someone chose."""

HOT_TEMP_C = 80.0
"""Above this a GPU under sustained load is "hot" (HF hardware guide: < 80 C fine, 84-90 throttles).
Recorded (``runs.hot``), not excluding: a hot GPU that keeps its clocks measured what it measured."""

CLOCK_FALL_RATIO = 0.90
"""The last third's median SM clock below this fraction of the first third's: the clock fell."""
MIN_CLOCK_SAMPLES = 6
"""Fewer usable SM-clock samples than this (two per third) decide nothing."""

REASONS_UNAVAILABLE = "clock reasons unavailable"
"""Marker in a rank's telemetry status: its driver could not report clock-event reasons."""


class _Sample(Protocol):
    sm_clock_mhz: float | None
    reasons: int


def reason_names(reasons: int) -> list[str]:
    """Names of the bits set in ``reasons``, lowest first; bits NVML has no name for, as hex."""
    names = [name for bit, name in sorted(REASON_NAMES.items()) if reasons & bit]
    unknown = reasons & ~sum(REASON_NAMES)
    bit = 1
    while unknown:
        if unknown & bit:
            names.append(f"0x{bit:x}")
            unknown &= ~bit
        bit <<= 1
    return names


def clock_fall(samples: Sequence[_Sample]) -> str | None:
    """Why the SM clock fell measurably over one GPU's window (see the module docstring), or None."""
    clocks = [
        s.sm_clock_mhz for s in samples if s.sm_clock_mhz is not None and not s.reasons & GPU_IDLE
    ]
    if len(clocks) < MIN_CLOCK_SAMPLES:
        return None
    third = len(clocks) // 3
    first, last = statistics.median(clocks[:third]), statistics.median(clocks[-third:])
    if first > 0 and last < CLOCK_FALL_RATIO * first:
        return (
            f"SM clock fell: last third's median {last:.0f} MHz is {last / first:.0%} of the "
            f"first third's {first:.0f} MHz (limit {CLOCK_FALL_RATIO:.0%})"
        )
    return None


@dataclass(frozen=True)
class ThrottleVerdict:
    """What the policy says about one run's telemetry."""

    throttled: bool
    why: str | None
    """Every reason the run is excluded, ``; ``-joined, each naming its GPU; None if not."""
    clock_reasons: str
    """Every reason bit seen (comma-joined names), ``none``, plus ranks without reason data."""


def verdict(
    by_gpu: Mapping[str, Sequence[_Sample]],
    violation_ns: Mapping[str, Mapping[str, int]] | None = None,
    reasons_unavailable: Sequence[str] = (),
) -> ThrottleVerdict:
    """Apply the policy to each GPU's samples (keyed by a label such as ``rank 1``).

    ``violation_ns``: per label, NVML's violation-time growth over the window (``power``,
    ``thermal``); ``reasons_unavailable``: labels whose driver reported no reasons.
    """
    seen = 0
    why: list[str] = []
    for label, samples in by_gpu.items():
        bits = 0
        for s in samples:
            bits |= s.reasons
        seen |= bits
        if bits & SLOWDOWN_MASK:
            why.append(f"{label}: {','.join(reason_names(bits & SLOWDOWN_MASK))}")
        thermal_ns = (violation_ns or {}).get(label, {}).get("thermal", 0)
        if thermal_ns > 0:
            why.append(f"{label}: thermal violation {thermal_ns / 1e6:.0f} ms")
        fell = clock_fall(samples)
        if fell:
            why.append(f"{label}: {fell}")
    text = ",".join(reason_names(seen)) or "none"
    if reasons_unavailable:
        text += f"; {REASONS_UNAVAILABLE} on {', '.join(reasons_unavailable)}"
    return ThrottleVerdict(bool(why), "; ".join(why) or None, text)
