"""GPU telemetry: sample temperature, power, SM clock and clock-event reasons while steps run.

A link benchmark compares step times; a GPU that throttles (too hot, a hardware slowdown) makes
one variant slow for reasons that have nothing to do with the link. So each rank samples its GPU
through NVML during the timed steps, and every run records the reasons it saw and whether the
throttle policy (``workloads/throttle.py``, ``docs/gpu-telemetry.md``) excludes it.

Pieces:

- ``NvmlSampler``: thin I/O. A daemon thread reads one GPU every ``interval_s`` (paced by
  ``Event.wait``, which is also how ``stop()`` ends it), plus NVML's cumulative power/thermal
  violation counters at start and stop, diffed over the window. The NVML module is injectable
  (``nvml=``), so tests pass a fake; by default it is ``pynvml`` from the ``nvidia-ml-py``
  package (the ``pynvml`` PyPI package is deprecated). Telemetry never fails a run: an NVML error
  in ``start()`` (no permission, unknown UUID, driver trouble) leaves the sampler ``absent`` with
  the reason, an error while sampling stops the thread and keeps what it has.
- ``summarize``: pure. Max temperature, mean power, min SM clock, ``hot`` (> 80 C, the
  sustained-load ceiling of the Hugging Face hardware guide; throttling starts ~84-90 C), and
  the throttle verdict of ``workloads.throttle``.
- ``nvml_inventory``: what each GPU is (PCIe gen and width, power limits, NVLink); which of
  those readings make link results suspect: ``workloads.gpu_doctor.doctor_warnings``
  (re-exported here).
- ``nvml_available``: whether NVML can be used here, and why not (CPU-only machine, no driver).

Driver differences handled here (nvidia-ml-py 13.615 ``pynvml.py``):

- ``nvmlDeviceGetCurrentClocksEventReasons`` is always defined in the Python package, but a
  driver whose library lacks the symbol raises ``NVMLError_FunctionNotFound`` when it is called;
  the sampler then uses ``nvmlDeviceGetCurrentClocksThrottleReasons`` (the older name for the
  same bits), and if that fails too records the reasons as unavailable and samples the rest.
- ``nvmlDeviceGetHandleByUUID`` hands its argument to ``ctypes.c_char_p`` without converting it,
  so a UUID must be passed as bytes.
- A MIG device handle does not answer clock, power or temperature queries (NotSupported): those
  are properties of the whole GPU. The sampler reads the parent GPU
  (``nvmlDeviceGetDeviceHandleFromMigDeviceHandle``) and says so in ``TelemetryResult.note``:
  the readings are shared with every other instance on that GPU.

May import: contract, gpu_doctor, throttle.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from workloads.contract import TelemetrySample
from workloads.gpu_doctor import DoctorWarning, doctor_warnings
from workloads.throttle import (
    BENIGN_MASK,
    HOT_TEMP_C,
    REASON_NAMES,
    REASONS_UNAVAILABLE,
    SLOWDOWN_MASK,
    reason_names,
    verdict,
)

__all__ = [
    "BENIGN_MASK",
    "CLOCK_EVENT_NAMES",
    "HOT_TEMP_C",
    "REASONS_UNAVAILABLE",
    "SLOWDOWN_MASK",
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

CLOCK_EVENT_NAMES = REASON_NAMES

# NVML's nvmlPerfPolicyType_t values, used if the injected module lacks the constants.
_PERF_POLICIES = {
    "power": ("NVML_PERF_POLICY_POWER", 0),
    "thermal": ("NVML_PERF_POLICY_THERMAL", 1),
}
REASON_FNS = (
    "nvmlDeviceGetCurrentClocksEventReasons",  # drivers >= 535
    "nvmlDeviceGetCurrentClocksThrottleReasons",  # the older name of the same bits
)
MIG_NOTE = (
    "MIG instance: clocks, power and temperature are its parent GPU's, shared by all its instances"
)


@dataclass(frozen=True)
class TelemetryResult:
    """What one ``NvmlSampler`` window recorded."""

    device: int | str
    samples: tuple[TelemetrySample, ...]
    violation_ns: dict[str, int] = field(default_factory=dict)
    """Nanoseconds spent in power / thermal violation during the window (supported policies)."""
    duration_s: float = 0.0
    error: str | None = None
    """Why sampling stopped early (e.g. the GPU fell off the bus); None if it ran to ``stop()``."""
    absent: str | None = None
    """Why the sampler never started (NVML error in ``start()``); None if it ran."""
    reasons_available: bool = True
    """False when neither clock-reason call worked on this driver (samples carry reasons=0)."""
    note: str | None = None
    """What the readings are when it is not obvious (a MIG instance's parent GPU)."""


@dataclass(frozen=True)
class TelemetrySummary:
    """One run's telemetry in a few numbers (all None and ``available=False`` without samples)."""

    available: bool
    n_samples: int
    max_temp_c: float | None
    mean_power_w: float | None
    min_sm_clock_mhz: float | None
    throttled: bool
    """The throttle policy excludes the run (``workloads/throttle.py``)."""
    hot: bool
    """Any sample above ``HOT_TEMP_C``."""
    throttle_why: str | None = None
    """Why the run is excluded, per GPU; None if it is not."""
    clock_reasons: str | None = None
    """Every clock-event reason seen (``SwPowerCap,HwSlowdown``), ``none``, or unavailability."""


def _load_nvml(nvml: ModuleType | Any | None) -> Any:
    return nvml if nvml is not None else importlib.import_module("pynvml")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _errors(nvml: Any, *names: str) -> tuple[type[BaseException], ...]:
    """The NVML error classes of these names that the module defines (older ones lack some)."""
    return tuple(getattr(nvml, n) for n in names if isinstance(getattr(nvml, n, None), type))


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def device_handle(nvml: Any, device: int | str) -> Any:
    """NVML handle for an index (int or digit string) or a UUID / MIG UUID string."""
    if isinstance(device, int) or device.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(device))
    return nvml.nvmlDeviceGetHandleByUUID(device.encode())  # pynvml: c_char_p needs bytes


class NvmlSampler:
    """Sample one GPU on a background thread between ``start()`` and ``stop()``.

    Use it around the timed steps only (warmup excluded)::

        sampler = NvmlSampler(local_gpu_index)   # or a UUID / MIG id string
        sampler.start()
        ...timed steps...
        result = sampler.stop()

    A sample is taken at start, every ``interval_s`` after, and once more at stop, so even a short
    window has two. NVML calls are cheap (microseconds) and never synchronise the CUDA stream.
    """

    def __init__(self, device: int | str, interval_s: float = 0.25, nvml: Any | None = None):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        if not isinstance(device, (int, str)) or device == "":
            raise ValueError(f"device must be an NVML index or a UUID string, got {device!r}")
        self.device = device
        self.interval_s = interval_s
        self._nvml = _load_nvml(nvml)
        self._handle: Any = None
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False
        self._absent: str | None = None
        self._note: str | None = None
        self._samples: list[TelemetrySample] = []
        self._violations_start: dict[str, int] = {}
        self._t0 = 0.0
        self._error: str | None = None
        self._reason_fns = [n for n in REASON_FNS if hasattr(self._nvml, n)]
        # A reading this GPU or driver cannot give is None, not an error that ends sampling.
        self._unanswered = _errors(
            self._nvml,
            "NVMLError_NotSupported",
            "NVMLError_NoPermission",
            "NVMLError_FunctionNotFound",
        )

    # -- NVML reads -------------------------------------------------------------------------
    def _read(self, fn_name: str, *args: Any) -> Any:
        """One NVML call; None where the GPU, the driver or our permissions do not allow it."""
        try:
            return getattr(self._nvml, fn_name)(self._handle, *args)
        except self._unanswered:
            return None

    def _reasons(self) -> int | None:
        """Clock-event bits, from the newest call this driver has; None once none works."""
        while self._reason_fns:
            try:
                return int(getattr(self._nvml, self._reason_fns[0])(self._handle))
            except self._unanswered:
                self._reason_fns.pop(0)  # e.g. FunctionNotFound: a driver older than the name
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
        reasons = self._reasons()
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
                self._error = _describe(exc)
                return
            if self._stop_event.wait(self.interval_s):
                return

    def _open(self) -> None:
        """The GPU's handle (a MIG instance's parent GPU) and the violation counters' start."""
        nvml = self._nvml
        handle = device_handle(nvml, self.device)
        try:
            is_mig = bool(nvml.nvmlDeviceIsMigDeviceHandle(handle))
        except (AttributeError, *self._unanswered):  # no MIG on this driver or GPU
            is_mig = False
        if is_mig:
            handle = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
            self._note = MIG_NOTE
        self._handle = handle
        self._violations_start = self._violations()

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Initialise NVML, find the GPU, read the violation counters, start the thread.

        An NVML error here does not escape: the sampler is ``absent`` (with the reason) and
        ``stop()`` returns an empty result saying why.
        """
        if self._started:
            raise RuntimeError("NvmlSampler.start() called twice")
        self._started = True
        try:
            self._nvml.nvmlInit()
        except self._nvml.NVMLError as exc:
            self._absent = f"nvmlInit failed: {_describe(exc)}"
            return
        try:
            self._open()
        except self._nvml.NVMLError as exc:
            self._absent = f"NVML cannot read GPU {self.device!r}: {_describe(exc)}"
            self._shutdown()  # nvmlInit is reference-counted: give ours back
            return
        except BaseException:
            self._shutdown()
            raise
        self._t0 = time.monotonic()
        self._thread = threading.Thread(
            target=self._run, name=f"nvml-sampler-gpu{self.device}", daemon=True
        )
        self._thread.start()

    def _shutdown(self) -> None:
        """Give back our nvmlInit; a driver error here loses nothing the window recorded."""
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            self._error = self._error or f"nvmlShutdown: {_describe(exc)}"

    @property
    def absent(self) -> str | None:
        """Why ``start()`` could not sample this GPU; None if it did (or has not run)."""
        return self._absent

    def stop(self) -> TelemetryResult:
        """Stop the thread, take a last sample, diff the violation counters, release NVML."""
        if not self._started:
            raise RuntimeError("NvmlSampler.stop() called before start()")
        if self._thread is None:
            return TelemetryResult(device=self.device, samples=(), absent=self._absent)
        self._stop_event.set()
        self._thread.join()
        try:
            if self._error is None:
                try:
                    self._samples.append(self._sample())
                except self._nvml.NVMLError as exc:
                    self._error = _describe(exc)
            end: dict[str, int] = {}
            try:
                end = self._violations()
            except self._nvml.NVMLError as exc:
                self._error = self._error or _describe(exc)
            violation_ns = {
                k: end[k] - self._violations_start[k] for k in end if k in self._violations_start
            }
            duration_s = time.monotonic() - self._t0
        finally:
            self._shutdown()
        return TelemetryResult(
            device=self.device,
            samples=tuple(self._samples),
            violation_ns=violation_ns,
            duration_s=duration_s,
            error=self._error,
            reasons_available=bool(self._reason_fns),
            note=self._note,
        )

    def __enter__(self) -> NvmlSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None and not self._stop_event.is_set():
            self.stop()


def summarize(
    by_gpu: Mapping[str, Sequence[TelemetrySample]],
    violation_ns: Mapping[str, Mapping[str, int]] | None = None,
    reasons_unavailable: Sequence[str] = (),
) -> TelemetrySummary:
    """Reduce each GPU's window (keyed by a label, e.g. ``rank 0``) to the figures a run stores.

    ``violation_ns``: per label, the violation counters' growth; ``reasons_unavailable``: labels
    whose driver reported no clock-event reasons. The verdict: ``workloads.throttle.verdict``.
    """
    samples = [s for group in by_gpu.values() for s in group]
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
    v = verdict(by_gpu, violation_ns, reasons_unavailable)
    return TelemetrySummary(
        available=True,
        n_samples=len(samples),
        max_temp_c=max(temps) if temps else None,
        mean_power_w=sum(powers) / len(powers) if powers else None,
        min_sm_clock_mhz=min(clocks) if clocks else None,
        throttled=v.throttled,
        hot=any(t > HOT_TEMP_C for t in temps),
        throttle_why=v.why,
        clock_reasons=v.clock_reasons,
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
    a GPU without NVLink. A reading NVML refuses (``NoPermission``: a container or a driver
    policy that restricts the call; any other NVML error of that one call) is None too, and
    ``notes`` says which and why: one refused reading must not cost the node the rest of its
    inventory. A GPU whose handle NVML refuses keeps its index, every reading None and the
    note. Raises if NVML itself cannot start or count its GPUs (check ``nvml_available``
    first).
    """
    nvml = _load_nvml(nvml)
    unsupported = _errors(nvml, "NVMLError_NotSupported")
    refused = _errors(nvml, "NVMLError")  # pynvml's base class: NoPermission and the rest

    def watts(mw: Any) -> float | None:
        return None if mw is None else mw / 1000.0

    nvml.nvmlInit()
    try:
        return [
            _inventory_gpu(nvml, index, unsupported, refused, watts)
            for index in range(nvml.nvmlDeviceGetCount())
        ]
    finally:
        nvml.nvmlShutdown()


def _inventory_gpu(nvml: Any, index: int, unsupported, refused, watts) -> dict:
    """One GPU of :func:`nvml_inventory`; a refused call is None and a note, never a raise."""
    notes: list[str] = []

    def read(fn_name: str, handle: Any, *args: Any) -> Any:
        if handle is None:  # NVML refused this GPU's handle: nothing of it can be read
            return None
        try:
            return getattr(nvml, fn_name)(handle, *args)
        except unsupported:
            return None
        except refused as exc:
            notes.append(f"{fn_name}: {_describe(exc)}")
            return None

    h = read("nvmlDeviceGetHandleByIndex", index)
    name = read("nvmlDeviceGetName", h)
    uuid = read("nvmlDeviceGetUUID", h)
    pci = read("nvmlDeviceGetPciInfo", h)
    mem = read("nvmlDeviceGetMemoryInfo", h)
    active, answered = 0, False
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18) if h is not None else 0):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(h, link)
        except (*unsupported, *_errors(nvml, "NVMLError_InvalidArgument")):
            continue  # no NVLink on this GPU, or past its last link
        except refused as exc:  # a partial count would read as links down: none at all
            notes.append(f"nvmlDeviceGetNvLinkState: {_describe(exc)}")
            answered = False
            break
        answered = True
        active += int(state == getattr(nvml, "NVML_FEATURE_ENABLED", 1))
    temp = read("nvmlDeviceGetTemperature", h, nvml.NVML_TEMPERATURE_GPU)
    return {
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
        "power_default_limit_w": watts(read("nvmlDeviceGetPowerManagementDefaultLimit", h)),
        "nvlink_active_count": active if answered else None,
        "temp_c": None if temp is None else float(temp),
        "notes": notes,
    }
