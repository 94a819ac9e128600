"""The device-level fakes of a simulated node (``tests/unit/hwprofiles.py`` puts them together):
torch's CUDA view of one process, NVML, and DeepSpeed's accelerator.

- :class:`CudaView`: ``torch.cuda`` as one process on a node sees it. Like the CUDA driver, it
  reads ``CUDA_VISIBLE_DEVICES`` once, when CUDA starts in the process (``cuInit``), and keeps
  that set until the process ends: setting the variable later changes nothing, where the old
  fake followed it at every call and let code pass that a real node misreads. What starts CUDA
  is what does in torch 2.13: ``is_available()`` (``cudaGetDeviceCount``, which runs ``cuInit``:
  ``torch/cuda/__init__.py``), ``init()``, ``set_device`` (its C++ side lazily initialises
  torch's CUDA first), and every call that initialises torch's CUDA (``current_device``,
  names, capability, properties, ``synchronize``, a tensor on a CUDA device). Not
  ``device_count()``: before torch's CUDA is initialised it counts through NVML, parsing
  ``CUDA_VISIBLE_DEVICES`` as it is now (a MIG id excepted: torch asks CUDA then, which starts
  it), and only afterwards gives the initialised count.
  :meth:`CudaView.reset` is a new process. Devices: names (a MIG device is
  "<GPU> MIG <profile>", as torch names it), capability, properties, ``is_bf16_supported``
  (torch 2.13's rule: native from capability 8.0; below it, True only ``including_emulation``),
  ``set_device`` (an ordinal the process cannot see raises "invalid device ordinal", as CUDA
  does), ``current_device`` and ``torch.cuda.device``.
- :class:`CudaTensorsOnCpu`: a torch function mode under which a tensor asked for on
  ``cuda:k`` is made on the CPU instead (this torch has no CUDA), after the view checked that
  the process sees ``k``; GPU ``k`` is then busy in the node's NVML (its PCIe generation is the
  trained one) until the process ends. It lets code that allocates on its GPU run its CPU-side
  logic; nothing about a GPU's speed or memory is simulated.
- :class:`ProfileNvml`: ``fake_nvml.FakeNvml`` with the calls the node probe adds.
- :func:`deepspeed_device`: the device DeepSpeed 0.19.8's real engine takes in this process's
  environment, through a recording accelerator installed with DeepSpeed's ``set_accelerator``.
"""

from __future__ import annotations

import contextlib
import os
from types import SimpleNamespace

import torch
from torch.overrides import TorchFunctionMode

from tests.unit.fake_nvml import FakeNvml

TORCH_CUDA = "12.8"
"""``torch.version.cuda`` of the CUDA build a GPU node runs."""
NCCL_VERSION = (2, 27, 3)
"""``torch.cuda.nccl.version()`` of that build."""


# -- the CUDA view --------------------------------------------------------------------------


class CudaView:
    """torch.cuda as one process on ``node`` sees it (module docstring: when the visible set is
    fixed). ``busy``: the node's set of NVML indices under load, shared with its NVML fakes."""

    def __init__(self, node, busy: set[int] | None = None):
        self.node = node
        self.busy = set() if busy is None else busy
        self.reset()

    def reset(self) -> None:
        """A new process: CUDA not started, nothing current, no GPU of ours busy."""
        if getattr(self, "loading", None):
            self.busy.difference_update(self.loading)
        self.visible: list | None = None
        """The devices CUDA enumerated when it started here; None: not started."""
        self.started_with: str | None = None
        """``CUDA_VISIBLE_DEVICES`` when CUDA started (None: unset, or not started)."""
        self.torch_initialized = False
        self.current = 0
        self.set_calls: list[int] = []
        self.loading: set[int] = set()
        """NVML indices this process put work on (:class:`CudaTensorsOnCpu`)."""

    def _start(self) -> list:
        """``cuInit``: the visible set is read now, once per process."""
        if self.visible is None:
            self.started_with = os.environ.get("CUDA_VISIBLE_DEVICES")
            self.visible = self.node.devices(self.started_with)
        return self.visible

    def _lazy_init(self) -> list:
        """torch's ``_lazy_init``: starts CUDA where nothing has."""
        self.torch_initialized = True
        return self._start()

    def _devices(self):
        return self._lazy_init()

    def _index(self, device) -> int:
        if device is None:
            return self.current
        if isinstance(device, str):
            device = torch.device(device)
        if isinstance(device, torch.device):
            return self.current if device.index is None else device.index
        return int(device)

    def _dev(self, device):
        i = self._index(device)
        devices = self._devices()
        if not 0 <= i < len(devices):
            raise RuntimeError("CUDA error: invalid device ordinal")
        return devices[i]

    def nvml_index(self, device) -> int:
        """The NVML index of the physical GPU behind ``device`` (a MIG device's parent)."""
        _, _, nvml_id = self._dev(device)
        if nvml_id.isdigit():
            return int(nvml_id)
        return next(i for i, g in enumerate(self.node.gpus) if nvml_id in g.mig)

    def put_work_on(self, device) -> None:
        """A tensor made on ``device``: CUDA starts, the ordinal must be visible, and its GPU
        is busy until this process ends (:meth:`reset`)."""
        i = self.nvml_index(device)
        if i not in self.busy:
            self.loading.add(i)
            self.busy.add(i)

    def is_available(self) -> bool:
        return bool(self._start())

    def init(self) -> None:
        self._lazy_init()

    def is_initialized(self) -> bool:
        return self.torch_initialized

    def device_count(self) -> int:
        """torch 2.13: the initialised count once torch's CUDA is up; before, NVML's count of
        ``CUDA_VISIBLE_DEVICES`` as it is now, except for a MIG id, which torch's NVML count
        skips (``_device_count_nvml`` returns -1) for ``cudaGetDeviceCount``: CUDA starts."""
        if self.torch_initialized:
            return len(self.visible)
        cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
        if cvd and cvd.split(",")[0].strip().startswith("MIG-"):
            return len(self._start())
        return len(self.node.devices(cvd))

    def synchronize(self, device=None) -> None:
        self._dev(device)

    def get_device_name(self, device=None) -> str:
        return self._dev(device)[1]

    def get_device_capability(self, device=None) -> tuple[int, int]:
        return self._dev(device)[0].capability

    def get_device_properties(self, device=None):
        gpu, name, _ = self._dev(device)
        major, minor = gpu.capability
        return SimpleNamespace(name=name, major=major, minor=minor, total_memory=80 * 10**9)

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        """torch 2.13: native from compute capability 8.0; below, a bf16 tensor can still be
        made (emulation), which is what ``including_emulation=True`` (the default) asks."""
        if not self.is_available():
            return False
        if self.get_device_capability()[0] >= 8:
            return True
        return including_emulation

    def set_device(self, device) -> None:
        i = self._index(device)
        self.set_calls.append(i)
        self._dev(i)  # raises as CUDA does for an ordinal it does not have
        self.current = i

    def current_device(self) -> int:
        return self.current

    def can_device_access_peer(self, device, peer) -> bool:
        """P2P between two GPUs of the node (NVLink or a PCIe bridge lets it, in every profile)."""
        return self._dev(device) is not None and self._dev(peer) is not None

    def device(self, device):
        """``torch.cuda.device(i)``: ``i`` current inside the block."""
        view = self

        @contextlib.contextmanager
        def current():
            before, view.current = view.current, view._index(device)
            try:
                yield
            finally:
                view.current = before

        return current()

    def install(self, mp) -> None:
        for name in (
            "is_available",
            "init",
            "is_initialized",
            "synchronize",
            "device_count",
            "get_device_name",
            "get_device_capability",
            "get_device_properties",
            "is_bf16_supported",
            "set_device",
            "current_device",
            "device",
            "can_device_access_peer",
        ):
            mp.setattr(torch.cuda, name, getattr(self, name))
        mp.setattr(torch.cuda.nccl, "version", lambda: NCCL_VERSION)
        mp.setattr(torch.version, "cuda", TORCH_CUDA if self.node.gpus else None)


class CudaTensorsOnCpu(TorchFunctionMode):
    """Tensors asked for on ``cuda:k`` are made on the CPU, once ``view`` has checked that this
    process sees ``k`` (module docstring). Enter it on the thread that makes the tensors."""

    def __init__(self, view: CudaView):
        super().__init__()
        self.view = view

    def _cpu(self, value):
        if isinstance(value, str) and value.split(":")[0] == "cuda":
            value = torch.device(value)
        if isinstance(value, torch.device) and value.type == "cuda":
            self.view.put_work_on(value)
            return torch.device("cpu")
        return value

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.device:  # naming a device makes no tensor: cuda:k stays cuda:k
            return func(*args, **(kwargs or {}))
        args = tuple(self._cpu(a) for a in args)
        kwargs = {k: self._cpu(v) for k, v in (kwargs or {}).items()}
        return func(*args, **kwargs)


# -- NVML -----------------------------------------------------------------------------------


class ProfileNvml(FakeNvml):
    """FakeNvml with what the node probe and a MIG-aware reader also ask: the CUDA version the
    driver supports, and a MIG-mode GPU's instances as NVML names them (nvidia-ml-py 13.615:
    ``nvmlDeviceGetMigMode`` -> [current, pending], ``nvmlDeviceGetMaxMigDeviceCount``,
    ``nvmlDeviceGetMigDeviceHandleByIndex``; a MIG handle's name is "<GPU> MIG <profile>")."""

    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1
    MAX_MIG_DEVICES = 7
    """An A100's most instances (seven 1g slices)."""

    def nvmlSystemGetCudaDriverVersion(self):
        return 12040 if self.driver == "new" else 11040

    def nvmlDeviceGetName(self, handle):
        if isinstance(handle, tuple):
            gpu = self.gpus[handle[1]]
            return f"{gpu['name']} MIG {gpu['mig_profile']}"
        return super().nvmlDeviceGetName(handle)

    def nvmlDeviceGetUUID(self, handle):
        if isinstance(handle, tuple):
            return self.gpus[handle[1]]["mig"][handle[2]]
        return super().nvmlDeviceGetUUID(handle)

    def nvmlDeviceGetMigMode(self, handle):
        on = bool(self.gpus[handle].get("mig"))
        return [int(on), int(on)]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return self.MAX_MIG_DEVICES if self.gpus[handle].get("mig") else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index):
        if not 0 <= index < len(self.gpus[handle].get("mig") or ()):
            raise self.NVMLError_NotFound("Not Found")
        return ("mig", handle, index)


def nvml_for(node, busy: set[int] | None = None) -> ProfileNvml:
    """The node's NVML; ``busy``: the node's GPUs under load, shared with its CUDA views."""
    return ProfileNvml(
        node.nvml_gpus(),
        driver=node.nvml_driver,
        no_permission=node.nvml_no_permission,
        busy=busy,
    )


class NoNvml:
    """pynvml on a node without a driver: nvmlInit fails as NVMLError_LibraryNotFound does."""

    class NVMLError(Exception):
        pass

    def nvmlInit(self):
        raise self.NVMLError("NVML Shared Library Not Found")


# -- DeepSpeed's accelerator ----------------------------------------------------------------


def recording_accelerator():
    """DeepSpeed's CUDA accelerator, recording every ``set_device`` (and going through the
    faked ``torch.cuda.set_device``, so an ordinal the process cannot see raises as on a GPU)."""
    from deepspeed.accelerator.cuda_accelerator import CUDA_Accelerator

    class RecordingAccelerator(CUDA_Accelerator):
        def __init__(self):  # no pynvml: the real one calls nvmlInit
            self._name = "cuda"
            self._communication_backend_name = "nccl"
            self._compile_backend = "inductor"
            self._nvtx_domains = {}
            self.set_calls: list[int] = []

        def set_device(self, device_index):
            self.set_calls.append(device_index)
            super().set_device(device_index)

    return RecordingAccelerator()


def deepspeed_device(world_size: int, rank: int) -> str:
    """The device DeepSpeed's engine takes in this process's environment: its real
    ``_configure_with_arguments`` (LOCAL_RANK) and ``_set_distributed_vars`` on a bare engine,
    with a :class:`RecordingAccelerator` installed through ``set_accelerator``. ``error: ...``
    when DeepSpeed's ``set_device`` fails (an ordinal this process cannot see)."""
    import deepspeed.accelerator.real_accelerator as real
    import deepspeed.comm as ds_comm
    from deepspeed.accelerator import set_accelerator
    from deepspeed.runtime.engine import DeepSpeedEngine

    saved = real.ds_accelerator
    accel = recording_accelerator()
    set_accelerator(accel)
    try:
        with _patched(ds_comm, get_world_size=lambda *a: world_size, get_rank=lambda *a: rank):
            engine = DeepSpeedEngine.__new__(DeepSpeedEngine)
            torch.nn.Module.__init__(engine)
            engine._configure_with_arguments(None, None)
            try:
                engine._set_distributed_vars(None)
            except RuntimeError as exc:
                return f"error: set_device({accel.set_calls[-1]}): {exc}"
            return str(engine.device)
    finally:
        real.ds_accelerator = saved


@contextlib.contextmanager
def _patched(obj, **attrs):
    saved = {k: getattr(obj, k) for k in attrs}
    for k, v in attrs.items():
        setattr(obj, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(obj, k, v)
