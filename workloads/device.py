"""The rank's device: which one it uses, and waiting for it before a clock is read.

:func:`choose_device` is the one place a rank's device is decided, pure: from the GPU ids Ray
assigned to the run's ranks on this node, the rank's local rank and what torch sees, it returns
the backend, the device, the ``CUDA_VISIBLE_DEVICES`` value and the GPU NVML samples, or raises
:class:`DeviceError` saying what is wrong. Its rules, each with its reason:

- No GPU assigned (a CPU bundle: an actor, or a rank forked for a CPU bundle): gloo on CPU, and
  ``CUDA_VISIBLE_DEVICES=""``. Ray 2.60 no longer blanks it for ``num_gpus=0`` workers
  (``ray/_private/utils.py``, ``override_on_zero=False``): on a GPU host whose Ray advertises no
  GPUs, a CPU rank would otherwise train with NCCL on GPUs nobody gave it.
- GPUs assigned: every same-node rank sees the distinct ids of the run's ranks there (NCCL
  needs peer GPUs visible for P2P/NVLink, as in Ray Train) and takes its own by position among
  them, so two ranks sharing one GPU (``ranks_per_gpu: 2``) both use ``cuda:0``.
- Ray ids stay strings: an index (``"3"``), a UUID (``"GPU-..."``) or a MIG id (``"MIG-..."``),
  whatever the raylet's own ``CUDA_VISIBLE_DEVICES`` held; never ``int()``. CUDA index i is
  NVML index i because every rank runs with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
  (``orchestrator/planner.run_env``).
- GPUs assigned but torch sees no CUDA: an error naming the torch build (``2.13.0+cpu`` is a
  CPU-only wheel on a GPU node); more ids than CUDA devices, or a local rank without an id: an
  error. The rank raises before ``init_process_group``; the run's stored error says why.

What the rank exports follows the decision (:func:`rank_env`, :func:`pg_init_kwargs`):

- ``LOCAL_RANK`` is the rank's CUDA device index, not its position among the node's ranks:
  DeepSpeed 0.19.8 sets its device from it (``runtime/engine.py`` ``_set_distributed_vars``:
  ``set_device(local_rank)``; ZeRO-3's ``partition_parameters.Init`` and ``zero/utils.py``
  build tensors on ``device_name(LOCAL_RANK)``), and so does torch 2.13's ``DeviceMesh`` when
  no device is set yet (``get_node_local_rank`` documents it as the device to bind). Two ranks
  sharing one GPU both export 0 (rank 1 exporting 1 made DeepSpeed ask for a second GPU that
  is not visible: "invalid device ordinal"). The rank's position stays in
  ``LINKSWEEP_LOCAL_RANK``. On CPU the two are the same.
- ``init_process_group`` gets ``device_id`` on NCCL, so the communicator is created there
  (timed as ``pg_init``) rather than lazily inside the first collective of ``strategy_init``;
  not for a one-rank group, where DeepSpeed 0.19.8 (``comm/torch.py``) skips it too because
  binding a device made NCCL's init fail there.

``sync(device)`` is the one place a rank waits for its GPU: a clock read after queued CUDA work
would time the launch, not the work (on CPU every op has finished when it returns).

May import: contract, torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch

from workloads.contract import DeviceDecision


class DeviceError(RuntimeError):
    """This rank cannot use the GPUs Ray assigned it; the message says why and what to fix."""


def visible_devices(node_gpu_ids: Sequence[str] | None) -> str:
    """``CUDA_VISIBLE_DEVICES`` for a rank: the distinct GPU ids of the run's ranks on its node,
    in order; ``""`` (hide every GPU) when Ray assigned none."""
    return ",".join(dict.fromkeys(str(g) for g in node_gpu_ids or ()))


def choose_device(
    node_gpu_ids: Sequence[str] | None,
    local_rank: int,
    cuda_available: bool,
    device_count: int,
    torch_version: str,
    torch_cuda: str | None,
) -> DeviceDecision:
    """The rank's device decision (see the module docstring). Pure.

    ``node_gpu_ids``: Ray's GPU ids of the run's ranks on this node, one per rank in local-rank
    order (ranks sharing a GPU repeat its id); ``cuda_available`` and ``device_count``: what
    torch sees once ``CUDA_VISIBLE_DEVICES`` is :func:`visible_devices` of them;
    ``torch_version`` / ``torch_cuda``: ``torch.__version__`` and ``torch.version.cuda``.
    """
    ids = tuple(str(g) for g in node_gpu_ids or ())
    cvd = visible_devices(ids)
    if not ids:
        return DeviceDecision(backend="gloo", device="cpu", cuda_visible_devices="", nvml_id=None)
    if not 0 <= local_rank < len(ids):
        raise DeviceError(
            f"local_rank {local_rank} has no GPU: this node's ranks of the run were assigned "
            f"{len(ids)} GPU id(s) {list(ids)}, one per rank; allowed local ranks: "
            f"0..{len(ids) - 1}"
        )
    own = ids[local_rank]
    if not cuda_available:
        build = f"torch {torch_version} (CUDA {torch_cuda or 'none'})"
        why = (
            "a CPU-only torch wheel on a GPU node: install a CUDA build of torch on every node"
            if not torch_cuda
            else "check the driver (nvidia-smi) and that these GPU ids exist on this node"
        )
        raise DeviceError(
            f"Ray assigned GPU {own} to this rank (CUDA_VISIBLE_DEVICES={cvd}) but {build} "
            f"sees no CUDA device: {why}"
        )
    visible = cvd.split(",")
    if len(visible) > device_count:
        raise DeviceError(
            f"Ray assigned {len(visible)} GPU(s) {visible} to this node's ranks of the run but "
            f"torch {torch_version} sees {device_count} CUDA device(s) with "
            f"CUDA_VISIBLE_DEVICES={cvd}: the ids Ray holds do not match this node's GPUs"
        )
    return DeviceDecision(
        backend="nccl",
        device=f"cuda:{visible.index(own)}",
        cuda_visible_devices=cvd,
        nvml_id=own,
    )


TRUE_LOCAL_RANK_ENV = "LINKSWEEP_LOCAL_RANK"
"""The rank's position among the run's ranks on its node (``LOCAL_RANK`` holds its device)."""


def rank_env(
    decision: DeviceDecision,
    rank: int,
    world_size: int,
    local_rank: int,
    master_addr: str,
    master_port: int,
) -> dict[str, str]:
    """The launcher variables a rank exports before its process group and DeepSpeed start.
    Pure. ``LOCAL_RANK``: the decided CUDA index on a GPU rank, else ``local_rank`` (see the
    module docstring)."""
    index = decision.cuda_index
    return {
        "CUDA_VISIBLE_DEVICES": decision.cuda_visible_devices,
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(local_rank if index is None else index),
        TRUE_LOCAL_RANK_ENV: str(local_rank),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
    }


def pg_init_kwargs(
    decision: DeviceDecision, world_size: int, accepts_device_id: bool
) -> dict[str, torch.device]:
    """Extra ``init_process_group`` arguments: ``device_id`` (the decided GPU) on NCCL with two
    or more ranks, so NCCL's communicator is created inside ``pg_init``; nothing on gloo, for
    one rank, or where this torch's ``init_process_group`` lacks the parameter
    (``accepts_device_id``; torch 2.11 and 2.13 have it). Pure."""
    index = decision.cuda_index
    if decision.backend != "nccl" or index is None or world_size < 2 or not accepts_device_id:
        return {}
    return {"device_id": torch.device("cuda", index)}


def native_bf16(device: int | None = None) -> bool:
    """Whether this GPU (``device``: a CUDA index; None: the current one) computes bf16 in
    hardware. ``torch.cuda.is_bf16_supported()`` alone also says True on V100 and T4, where
    torch emulates bf16 in fp32 (slow, and cuBLAS/cuDNN lack kernels); torch 2.13 answers the
    hardware question with ``including_emulation=False`` (compute capability 8.0 or newer, or
    ROCm). A torch without that keyword is asked the same through the capability. False
    without CUDA."""
    if not torch.cuda.is_available():
        return False
    with torch.cuda.device(device) if device is not None else contextlib.nullcontext():
        try:
            return bool(torch.cuda.is_bf16_supported(including_emulation=False))
        except TypeError:  # an older torch: no including_emulation keyword
            return bool(torch.version.hip) or torch.cuda.get_device_capability()[0] >= 8


def nvml_target(nvml_id: str | None) -> int | str | None:
    """What the NVML sampler opens for a Ray GPU id: an index as an int (``"3"`` -> 3), a UUID
    or MIG id as the string (``nvmlDeviceGetHandleByUUID``); None: no GPU."""
    if nvml_id is None:
        return None
    return int(nvml_id) if nvml_id.isdigit() else nvml_id


def sync(device: torch.device) -> None:
    """Wait until ``device`` has finished its queued work. Note: a CPU-GPU sync point, so it is
    called only around clocks and barriers, never inside a timed step."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
