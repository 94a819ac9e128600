"""The rank's device: which one it uses, and waiting for it before a clock is read.

:func:`choose_device` is the one place a rank's device is decided, pure: from the GPU ids Ray
assigned to the run's ranks on this node, the rank's local rank and what torch sees, it returns
the backend, the device, the ``CUDA_VISIBLE_DEVICES`` value and the GPU NVML samples, or raises
:class:`DeviceError` saying what is wrong. Its rules, each with its reason:

- No GPU assigned (a CPU bundle, or a forked rank, which gets no GPU ids): gloo on CPU, and
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

``sync(device)`` is the one place a rank waits for its GPU: a clock read after queued CUDA work
would time the launch, not the work (on CPU every op has finished when it returns).

May import: contract, torch.
"""

from __future__ import annotations

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
