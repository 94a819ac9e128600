"""GPU telemetry: sample temperature, power, SM clock and throttle reasons while steps run.

A link benchmark compares step times; a GPU that throttles (too hot, power-capped) makes one
variant slow for reasons that have nothing to do with the link. So each rank samples its GPU
through NVML during the timed steps, and every run records whether it throttled.

Pieces:

- ``NvmlSampler``: thin I/O. A daemon thread reads one GPU every ``interval_s`` (paced by
  ``Event.wait``, which is also how ``stop()`` ends it), plus NVML's cumulative power/thermal
  violation counters at start and stop, diffed over the window. The NVML module is injectable
  (``nvml=``), so tests pass a fake; by default it is ``pynvml`` from the ``nvidia-ml-py``
  package (the ``pynvml`` PyPI package is deprecated).
- ``summarize``: pure. Max temperature, mean power, min SM clock, and two flags: ``throttled``
  (a power/thermal clock-event bit in any sample, or violation time > 0) and ``hot`` (> 80 C,
  the sustained-load ceiling of the Hugging Face hardware guide; throttling starts ~84-90 C).
- ``nvml_inventory`` / ``doctor_warnings``: what each GPU is (PCIe gen and width, power limits,
  NVLink) and which of those readings make link results suspect.
- ``nvml_available``: whether NVML can be used here, and why not (CPU-only machine, no driver).

Clock-event ("throttle") reason bits, from NVML's ``nvmlClocksEventReason*`` constants. Only the
power and thermal ones lower clocks against the user's wishes; idle, application clocks and
sync boost are normal operation.

May import: contract.
"""

from __future__ import annotations

import importlib
import threading
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from workloads.contract import TelemetrySample

__all__ = [
    "BENIGN_MASK",
    "CLOCK_EVENT_NAMES",
    "HOT_TEMP_C",
    "THROTTLE_MASK",
    "DoctorWarning",
    "NvmlSampler",
    "TelemetryResult",
    "TelemetrySample",
    "TelemetrySummary",
    "doctor_warnings",
    "nvml_available",
    "nvml_inventory",
    "reason_names",
    "summarize",
]

# Benign: clocks are low because there is nothing to do or because someone chose them.
CLOCK_EVENT_GPU_IDLE = 0x1
CLOCK_EVENT_APPLICATIONS_CLOCKS_SETTING = 0x2
CLOCK_EVENT_SYNC_BOOST = 0x10
# Throttling: clocks lowered by the power or thermal controller.
CLOCK_EVENT_SW_POWER_CAP = 0x4
CLOCK_EVENT_HW_SLOWDOWN = 0x8
CLOCK_EVENT_SW_THERMAL_SLOWDOWN = 0x20
CLOCK_EVENT_HW_THERMAL_SLOWDOWN = 0x40
CLOCK_EVENT_HW_POWER_BRAKE_SLOWDOWN = 0x80

THROTTLE_MASK = (
    CLOCK_EVENT_SW_POWER_CAP
    | CLOCK_EVENT_HW_SLOWDOWN
    | CLOCK_EVENT_SW_THERMAL_SLOWDOWN
    | CLOCK_EVENT_HW_THERMAL_SLOWDOWN
    | CLOCK_EVENT_HW_POWER_BRAKE_SLOWDOWN
)
BENIGN_MASK = (
    CLOCK_EVENT_GPU_IDLE | CLOCK_EVENT_APPLICATIONS_CLOCKS_SETTING | CLOCK_EVENT_SYNC_BOOST
)

CLOCK_EVENT_NAMES: dict[int, str] = {
    CLOCK_EVENT_GPU_IDLE: "GpuIdle",
    CLOCK_EVENT_APPLICATIONS_CLOCKS_SETTING: "ApplicationsClocksSetting",
    CLOCK_EVENT_SW_POWER_CAP: "SwPowerCap",
    CLOCK_EVENT_HW_SLOWDOWN: "HwSlowdown",
    CLOCK_EVENT_SYNC_BOOST: "SyncBoost",
    CLOCK_EVENT_SW_THERMAL_SLOWDOWN: "SwThermalSlowdown",
    CLOCK_EVENT_HW_THERMAL_SLOWDOWN: "HwThermalSlowdown",
    CLOCK_EVENT_HW_POWER_BRAKE_SLOWDOWN: "HwPowerBrakeSlowdown",
}

HOT_TEMP_C = 80.0
"""Above this a GPU under sustained load is "hot" (HF hardware guide: < 80 C fine, 84-90 throttles)."""

# NVML's nvmlPerfPolicyType_t values, used if the injected module lacks the constants.
_PERF_POLICIES = {
    "power": ("NVML_PERF_POLICY_POWER", 0),
    "thermal": ("NVML_PERF_POLICY_THERMAL", 1),
}


def reason_names(reasons: int) -> list[str]:
    """Names of the clock-event bits set in ``reasons``, lowest bit first."""
    return [name for bit, name in sorted(CLOCK_EVENT_NAMES.items()) if reasons & bit]


@dataclass(frozen=True)
class TelemetryResult:
    """What one ``NvmlSampler`` window recorded."""

    device_index: int
    samples: tuple[TelemetrySample, ...]
    violation_ns: dict[str, int] = field(default_factory=dict)
    """Nanoseconds spent in power / thermal violation during the window (supported policies)."""
    duration_s: float = 0.0
    error: str | None = None
    """Why sampling stopped early (e.g. the GPU fell off the bus); None if it ran to ``stop()``."""


@dataclass(frozen=True)
class TelemetrySummary:
    """One run's telemetry in a few numbers (all None and ``available=False`` without samples)."""

    available: bool
    n_samples: int
    max_temp_c: float | None
    mean_power_w: float | None
    min_sm_clock_mhz: float | None
    throttled: bool
    """A power/thermal clock-event bit in any sample, or any violation time > 0."""
    hot: bool
    """Any sample above ``HOT_TEMP_C``."""
    throttle_reasons: tuple[str, ...] = ()
    """Names of the throttling bits seen, e.g. ``("SwPowerCap",)``."""


def _load_nvml(nvml: ModuleType | Any | None) -> Any:
    return nvml if nvml is not None else importlib.import_module("pynvml")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlSampler:
    """Sample one GPU on a background thread between ``start()`` and ``stop()``.

    Use it around the timed steps only (warmup excluded)::

        sampler = NvmlSampler(local_gpu_index)
        sampler.start()
        ...timed steps...
        result = sampler.stop()

    A sample is taken at start, every ``interval_s`` after, and once more at stop, so even a short
    window has two. NVML calls are cheap (microseconds) and never synchronise the CUDA stream.
    """

    def __init__(self, device_index: int, interval_s: float = 0.25, nvml: Any | None = None):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.device_index = device_index
        self.interval_s = interval_s
        self._nvml = _load_nvml(nvml)
        self._handle: Any = None
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._samples: list[TelemetrySample] = []
        self._violations_start: dict[str, int] = {}
        self._t0 = 0.0
        self._error: str | None = None
        self._reasons_fn = getattr(
            self._nvml,
            "nvmlDeviceGetCurrentClocksEventReasons",
            getattr(self._nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None),
        )

    # -- NVML reads -------------------------------------------------------------------------
    def _read(self, fn_name: str, *args: Any) -> Any:
        """One NVML call; None where the GPU does not support it."""
        try:
            return getattr(self._nvml, fn_name)(self._handle, *args)
        except self._nvml.NVMLError_NotSupported:
            return None

    def _violations(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for policy, (const, fallback) in _PERF_POLICIES.items():
            status = self._read(
                "nvmlDeviceGetViolationStatus", getattr(self._nvml, const, fallback)
            )
            if status is not None:
                out[policy] = int(status.violationTime)
        return out

    def _sample(self) -> TelemetrySample:
        nvml = self._nvml
        temp = self._read("nvmlDeviceGetTemperature", nvml.NVML_TEMPERATURE_GPU)
        power_mw = self._read("nvmlDeviceGetPowerUsage")
        clock = self._read("nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_SM)
        reasons = None
        if self._reasons_fn is not None:
            try:
                reasons = self._reasons_fn(self._handle)
            except nvml.NVMLError_NotSupported:
                reasons = None
        return TelemetrySample(
            t_s=time.monotonic() - self._t0,
            temp_c=None if temp is None else float(temp),
            power_w=None if power_mw is None else power_mw / 1000.0,
            sm_clock_mhz=None if clock is None else float(clock),
            reasons=int(reasons or 0),
        )

    def _run(self) -> None:
        while True:
            try:
                self._samples.append(self._sample())
            except self._nvml.NVMLError as exc:  # GPU lost, driver gone: stop, keep what we have
                self._error = f"{type(exc).__name__}: {exc}"
                return
            if self._stop_event.wait(self.interval_s):
                return

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Initialise NVML, read the violation counters, start the sampling thread."""
        if self._thread is not None:
            raise RuntimeError("NvmlSampler.start() called twice")
        self._nvml.nvmlInit()
        try:
            self._handle = self._nvml.nvmlDeviceGetHandleByIndex(self.device_index)
            self._violations_start = self._violations()
        except BaseException:
            self._nvml.nvmlShutdown()  # nvmlInit is reference-counted: give ours back
            raise
        self._t0 = time.monotonic()
        self._thread = threading.Thread(
            target=self._run, name=f"nvml-sampler-gpu{self.device_index}", daemon=True
        )
        self._thread.start()

    def stop(self) -> TelemetryResult:
        """Stop the thread, take a last sample, diff the violation counters, release NVML."""
        if self._thread is None:
            raise RuntimeError("NvmlSampler.stop() called before start()")
        self._stop_event.set()
        self._thread.join()
        try:
            if self._error is None:
                try:
                    self._samples.append(self._sample())
                except self._nvml.NVMLError as exc:
                    self._error = f"{type(exc).__name__}: {exc}"
            end: dict[str, int] = {}
            try:
                end = self._violations()
            except self._nvml.NVMLError as exc:
                self._error = self._error or f"{type(exc).__name__}: {exc}"
            violation_ns = {
                k: end[k] - self._violations_start[k] for k in end if k in self._violations_start
            }
            duration_s = time.monotonic() - self._t0
        finally:
            self._nvml.nvmlShutdown()
        return TelemetryResult(
            device_index=self.device_index,
            samples=tuple(self._samples),
            violation_ns=violation_ns,
            duration_s=duration_s,
            error=self._error,
        )

    def __enter__(self) -> NvmlSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None and not self._stop_event.is_set():
            self.stop()


def summarize(
    samples: list[TelemetrySample] | tuple[TelemetrySample, ...], violation_ns: dict[str, int]
) -> TelemetrySummary:
    """Reduce a window's samples (and violation-counter diffs) to the figures a run stores."""
    if not samples:
        return TelemetrySummary(
            available=False,
            n_samples=0,
            max_temp_c=None,
            mean_power_w=None,
            min_sm_clock_mhz=None,
            throttled=False,
            hot=False,
        )
    temps = [s.temp_c for s in samples if s.temp_c is not None]
    powers = [s.power_w for s in samples if s.power_w is not None]
    clocks = [s.sm_clock_mhz for s in samples if s.sm_clock_mhz is not None]
    throttle_bits = 0
    for s in samples:
        throttle_bits |= s.reasons & THROTTLE_MASK
    throttled = bool(throttle_bits) or any(v > 0 for v in violation_ns.values())
    return TelemetrySummary(
        available=True,
        n_samples=len(samples),
        max_temp_c=max(temps) if temps else None,
        mean_power_w=sum(powers) / len(powers) if powers else None,
        min_sm_clock_mhz=min(clocks) if clocks else None,
        throttled=throttled,
        hot=any(t > HOT_TEMP_C for t in temps),
        throttle_reasons=tuple(reason_names(throttle_bits)),
    )


def nvml_available(nvml: Any | None = None) -> tuple[bool, str]:
    """``(True, "2 GPU(s), driver 550.x")`` or ``(False, why)``; never raises."""
    try:
        nvml = _load_nvml(nvml)
    except ImportError as exc:
        return False, f"cannot import pynvml (package nvidia-ml-py): {exc}"
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded on CPU machines
        return False, f"nvmlInit failed: {type(exc).__name__}: {exc}"
    try:
        count = nvml.nvmlDeviceGetCount()
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        return True, f"{count} GPU(s), driver {driver}"
    except Exception as exc:
        return False, f"NVML initialised but could not list GPUs: {type(exc).__name__}: {exc}"
    finally:
        nvml.nvmlShutdown()


def nvml_inventory(nvml: Any | None = None) -> list[dict]:
    """One dict per GPU: identity, PCIe gen/width (current and max), power limits, NVLink, temp.

    Every reading that NVML does not support on a GPU is None, as is ``nvlink_active_count`` on
    a GPU without NVLink. Raises if NVML itself cannot start (check ``nvml_available`` first).
    """
    nvml = _load_nvml(nvml)

    def read(fn_name: str, handle: Any, *args: Any) -> Any:
        try:
            return getattr(nvml, fn_name)(handle, *args)
        except nvml.NVMLError_NotSupported:
            return None

    def watts(mw: Any) -> float | None:
        return None if mw is None else mw / 1000.0

    nvml.nvmlInit()
    try:
        out = []
        for index in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(index)
            name = read("nvmlDeviceGetName", h)
            uuid = read("nvmlDeviceGetUUID", h)
            pci = read("nvmlDeviceGetPciInfo", h)
            mem = read("nvmlDeviceGetMemoryInfo", h)
            active, answered = 0, False
            for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
                try:
                    state = nvml.nvmlDeviceGetNvLinkState(h, link)
                except (nvml.NVMLError_NotSupported, nvml.NVMLError_InvalidArgument):
                    continue  # no NVLink on this GPU, or past its last link
                answered = True
                active += int(state == getattr(nvml, "NVML_FEATURE_ENABLED", 1))
            temp = read("nvmlDeviceGetTemperature", h, nvml.NVML_TEMPERATURE_GPU)
            out.append(
                {
                    "index": index,
                    "name": None if name is None else _text(name),
                    "uuid": None if uuid is None else _text(uuid),
                    "pci_bus_id": None if pci is None else _text(pci.busId),
                    "memory_total_bytes": None if mem is None else int(mem.total),
                    "pcie_gen_current": read("nvmlDeviceGetCurrPcieLinkGeneration", h),
                    "pcie_gen_max": read("nvmlDeviceGetMaxPcieLinkGeneration", h),
                    "pcie_width_current": read("nvmlDeviceGetCurrPcieLinkWidth", h),
                    "pcie_width_max": read("nvmlDeviceGetMaxPcieLinkWidth", h),
                    "power_limit_w": watts(read("nvmlDeviceGetPowerManagementLimit", h)),
                    "power_default_limit_w": watts(
                        read("nvmlDeviceGetPowerManagementDefaultLimit", h)
                    ),
                    "nvlink_active_count": active if answered else None,
                    "temp_c": None if temp is None else float(temp),
                }
            )
        return out
    finally:
        nvml.nvmlShutdown()


@dataclass(frozen=True)
class DoctorWarning:
    """Something about a GPU that can distort link benchmarks."""

    gpu: int
    code: str
    """Stable identifier: ``pcie_gen_below_max``, ``pcie_width_below_max``,
    ``power_limit_below_default``, ``hot``, ``nvlink_inactive``."""
    message: str
    invalidates: bool
    """True when results measured on this GPU should not be compared with other machines."""


# The issue calls this type ``Warning``; the alias stays out of ``__all__`` so that a star import
# cannot shadow the builtin.
Warning = DoctorWarning  # noqa: A001


def doctor_warnings(inventory: list[dict]) -> list[DoctorWarning]:
    """Pure checks over ``nvml_inventory()`` output; missing (None) readings are skipped."""
    out: list[DoctorWarning] = []
    for gpu in inventory:
        i = gpu["index"]
        gen, gen_max = gpu.get("pcie_gen_current"), gpu.get("pcie_gen_max")
        if gen is not None and gen_max is not None and gen < gen_max:
            out.append(
                DoctorWarning(
                    i,
                    "pcie_gen_below_max",
                    f"GPU{i} PCIe link runs at gen {gen} of {gen_max}. Idle GPUs drop the PCIe "
                    "generation to save power, so this is normal at rest; only if it persists under "
                    "load does it cap PCIe/SHM transfers and slow the PCIe link variants.",
                    invalidates=False,
                )
            )
        width, width_max = gpu.get("pcie_width_current"), gpu.get("pcie_width_max")
        if width is not None and width_max is not None and width < width_max:
            out.append(
                DoctorWarning(
                    i,
                    "pcie_width_below_max",
                    f"GPU{i} PCIe link trained at x{width} of x{width_max} (narrow slot, riser or a "
                    "degraded link). Width does not recover under load: PCIe and SHM transfers get at "
                    f"most {width}/{width_max} of the bandwidth, so PCIe link results from this GPU "
                    "do not represent the hardware.",
                    invalidates=True,
                )
            )
        limit, default = gpu.get("power_limit_w"), gpu.get("power_default_limit_w")
        if limit is not None and default is not None and limit < default - 0.5:
            out.append(
                DoctorWarning(
                    i,
                    "power_limit_below_default",
                    f"GPU{i} power limit is {limit:.0f} W, below its default {default:.0f} W "
                    "(set with nvidia-smi -pl). Clocks drop under load, so step times grow and the "
                    "compute share of every variant changes; results do not compare with other boxes.",
                    invalidates=True,
                )
            )
        temp = gpu.get("temp_c")
        if temp is not None and temp > HOT_TEMP_C:
            out.append(
                DoctorWarning(
                    i,
                    "hot",
                    f"GPU{i} is at {temp:.0f} C before the benchmark, above {HOT_TEMP_C:.0f} C. "
                    "Under load it will reach the 84-90 C where GPUs throttle, mixing thermal "
                    "slowdowns into the link comparison. Check cooling and airflow first.",
                    invalidates=True,
                )
            )
        if gpu.get("nvlink_active_count") == 0:
            out.append(
                DoctorWarning(
                    i,
                    "nvlink_inactive",
                    f"GPU{i} supports NVLink but no link is active (no bridge, or links down). NV# "
                    "link variants cannot run here; peers talk over PCIe, as topo -m will show.",
                    invalidates=False,
                )
            )
    return out
