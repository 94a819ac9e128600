"""A stand-in for ``pynvml`` (nvidia-ml-py 13.615): the same function names, error classes and
argument conventions, with the driver behaviours the sampler must survive as modes.

GPUs are dicts (see ``sampling_gpu`` in test_telemetry.py); a key set to None raises
NotSupported, an exception instance raises it. Modes:

- ``driver="new"``: both reason calls work (drivers >= 535).
- ``driver="old"``: ``nvmlDeviceGetCurrentClocksEventReasons`` exists in the package, as in the
  real one, but raises ``NVMLError_FunctionNotFound``: the driver's library lacks the symbol.
- ``driver="ancient"``: both reason calls raise FunctionNotFound.
- ``no_permission``: handle lookups raise ``NVMLError_NoPermission`` (a container without
  access to the device node, or a restricted API). One GPU's lookup only: its dict's
  ``handle_error`` (an exception instance) is raised by ``nvmlDeviceGetHandleByIndex``.
- MIG: a GPU with ``"mig": ["MIG-<uuid>", ...]`` has MIG instances; their handles answer no
  clock, power, temperature, reason or violation query (NotSupported), as on real MIG handles,
  and ``nvmlDeviceGetDeviceHandleFromMigDeviceHandle`` returns the parent GPU.
- multi-GPU: several dicts with distinct ``uuid``; ``nvmlDeviceGetHandleByUUID`` takes bytes
  only (pynvml hands it to ``ctypes.c_char_p``, which raises TypeError for str).
- health (the fleet check): ``sm_max_mhz`` answers ``nvmlDeviceGetMaxClockInfo``; ``ecc``
  (``{"uncorrected": n, "corrected": m}``, or None: ECC off / unsupported) answers
  ``nvmlDeviceGetTotalEccErrors`` for the volatile counters. ``health_gpu`` builds a healthy GPU;
  ``x8_of_x16_gpu`` and ``thermally_throttled_gpu`` the two faults a fleet check must name.
- PCIe generation follows the load, as on real GPUs: ``gen`` is the generation the link trained
  at, read by ``nvmlDeviceGetCurrPcieLinkGeneration`` only while the GPU is under load (its
  index in ``busy``); at idle the GPU lowers it to save power and the call reads ``gen_idle``
  (default :data:`IDLE_PCIE_GEN`; never above ``gen``). ``nvmlDeviceGetMaxPcieLinkGeneration``
  reads ``gen_max`` whatever the load. ``busy`` is a set the caller may share between fakes of
  one node (every process there sees the same GPUs), and :meth:`FakeNvml.loaded` marks GPUs busy
  for a block. The width does not change with load (a link trained at x8 stays x8).
"""

from __future__ import annotations

import contextlib
import threading
from types import SimpleNamespace

IDLE_PCIE_GEN = 1
"""What ``nvmlDeviceGetCurrPcieLinkGeneration`` reads on an idle GPU: drivers drop the link to
gen 1 at idle to save power and raise it to the trained generation under load (NVIDIA's
nvidia-smi documentation: "the current link generation ... may be reduced when the GPU is not
in use"; ``workloads/gpu_doctor.py`` and ``orchestrator/fleet/suspects.py`` judge by it)."""


class FakeNvml:
    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's spelling
        pass

    class NVMLError_InvalidArgument(NVMLError):  # noqa: N801
        pass

    class NVMLError_GpuIsLost(NVMLError):  # noqa: N801
        pass

    class NVMLError_FunctionNotFound(NVMLError):  # noqa: N801
        pass

    class NVMLError_NoPermission(NVMLError):  # noqa: N801
        pass

    class NVMLError_NotFound(NVMLError):  # noqa: N801
        pass

    class NVMLError_Uninitialized(NVMLError):  # noqa: N801
        pass

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_PERF_POLICY_POWER = 0
    NVML_PERF_POLICY_THERMAL = 1
    NVML_NVLINK_MAX_LINKS = 18
    NVML_FEATURE_ENABLED = 1
    # nvidia-ml-py 13.615 pynvml.py values
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1

    def __init__(
        self,
        gpus: list[dict],
        enough_samples: int = 3,
        driver: str = "new",
        no_permission: bool = False,
        init_error: Exception | None = None,
        busy: set[int] | None = None,
    ):
        assert driver in ("new", "old", "ancient")
        self.gpus = gpus
        self.busy = set() if busy is None else busy
        """Indices of the GPUs under load now (module docstring: the PCIe generation)."""
        self.driver = driver
        self.no_permission = no_permission
        self.init_error = init_error
        self.initialised = 0
        self.shut_down = 0
        self.temp_reads = 0
        self.event_reason_reads = 0
        self.throttle_reason_reads = 0
        self.handles_asked: list = []
        self.enough = threading.Event()
        self.enough_samples = enough_samples

    # library
    def nvmlInit(self):
        if self.init_error is not None:
            raise self.init_error
        self.initialised += 1

    def nvmlShutdown(self):
        self.shut_down += 1

    def nvmlSystemGetDriverVersion(self):
        return "550.54.15" if self.driver == "new" else "470.82.01"

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def _check_permission(self):
        if self.no_permission:
            raise self.NVMLError_NoPermission("Insufficient Permissions")

    def nvmlDeviceGetHandleByIndex(self, index):
        self._check_permission()
        self.handles_asked.append(index)
        if not 0 <= index < len(self.gpus):
            raise self.NVMLError_InvalidArgument("Invalid Argument")
        if isinstance(self.gpus[index].get("handle_error"), Exception):
            raise self.gpus[index]["handle_error"]
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if not isinstance(uuid, bytes):  # ctypes.c_char_p(str) in the real pynvml
            raise TypeError("bytes or integer address expected instead of str instance")
        self._check_permission()
        text = uuid.decode()
        self.handles_asked.append(text)
        for i, gpu in enumerate(self.gpus):
            if gpu.get("uuid") == text:
                return i
            if text in gpu.get("mig", ()):
                return ("mig", i, gpu["mig"].index(text))
        raise self.NVMLError_NotFound("Not Found")

    def nvmlDeviceGetIndex(self, handle):
        if isinstance(handle, tuple):  # NVML: a MIG handle has no index of its own
            raise self.NVMLError_InvalidArgument("Invalid Argument")
        return handle

    def nvmlDeviceIsMigDeviceHandle(self, handle):
        return isinstance(handle, tuple)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle):
        if not isinstance(handle, tuple):
            raise self.NVMLError_InvalidArgument("Invalid Argument")
        return handle[1]

    def _get(self, handle, key):
        if isinstance(handle, tuple):  # a MIG instance: whole-GPU readings are not its own
            raise self.NVMLError_NotSupported("Not Supported")
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
        if isinstance(handle, tuple):
            raise self.NVMLError_NotSupported("Not Supported")
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

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        if self.driver != "new":
            raise self.NVMLError_FunctionNotFound("Function Not Found")
        self.event_reason_reads += 1
        return self._get(handle, "reasons")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        if self.driver == "ancient":
            raise self.NVMLError_FunctionNotFound("Function Not Found")
        self.throttle_reason_reads += 1
        return self._get(handle, "reasons")

    def nvmlDeviceGetViolationStatus(self, handle, policy):
        counters = self._get(handle, "violations")[policy]
        value = counters.pop(0) if len(counters) > 1 else counters[0]
        return SimpleNamespace(referenceTime=0, violationTime=value)

    # inventory
    def nvmlDeviceGetName(self, handle):
        return self._get(handle, "name")

    def nvmlDeviceGetUUID(self, handle):
        return self._get(handle, "uuid")

    def nvmlDeviceGetPciInfo(self, handle):
        return SimpleNamespace(busId=self._get(handle, "bus_id"))

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(total=self._get(handle, "mem_bytes"), used=0, free=0)

    @contextlib.contextmanager
    def loaded(self, *indices: int):
        """GPUs ``indices`` under load for the block (a workload's steps running there)."""
        added = {i for i in indices if i not in self.busy}
        self.busy.update(added)
        try:
            yield
        finally:
            self.busy.difference_update(added)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        trained = self._get(handle, "gen")
        if handle in self.busy:
            return trained
        idle = self.gpus[handle].get("gen_idle", IDLE_PCIE_GEN)
        return trained if idle is None else min(trained, idle)

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

    # health (fleet check)
    def nvmlDeviceGetMaxClockInfo(self, handle, clock):
        assert clock == self.NVML_CLOCK_SM
        return self._get(handle, "sm_max_mhz")

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter_type):
        assert counter_type == self.NVML_VOLATILE_ECC, "the fleet check reads volatile counters"
        ecc = self._get(handle, "ecc")
        if error_type == self.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            return ecc["uncorrected"]
        assert error_type == self.NVML_MEMORY_ERROR_TYPE_CORRECTED
        return ecc["corrected"]


def health_gpu(index: int = 0, **over) -> dict:
    """A healthy H100-like GPU as the fleet check's health read sees it; ``over`` changes keys."""
    gpu = {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": f"GPU-{index:08d}-0000-0000-0000-000000000000",
        "temps": [41],
        "sm_mhz": 1980,
        "sm_max_mhz": 1980,
        "reasons": 0x1,  # GpuIdle
        "gen": 5,
        "gen_max": 5,
        "width": 16,
        "width_max": 16,
        "ecc": {"uncorrected": 0, "corrected": 0},
    }
    gpu.update(over)
    return gpu


def x8_of_x16_gpu(index: int = 0, **over) -> dict:
    """A GPU whose PCIe link trained at x8 of its x16 (a reseat or riser fault)."""
    return health_gpu(index, width=8, **over)


def thermally_throttled_gpu(index: int = 0, **over) -> dict:
    """A GPU held down by HwThermalSlowdown (0x40): hot, SM clock far below its max."""
    return health_gpu(index, reasons=0x40, temps=[92], sm_mhz=1200, **over)
