"""What NVMe offload needs on a node: DeepSpeed's async_io op, and what building it takes.

DeepSpeed 0.19.8 builds async_io on first use (JIT, ``OpBuilder.jit_load``) unless the wheel was
built with it (``DS_BUILD_AIO=1``: ``deepspeed.git_version_info.installed_ops``). What the build
needs depends on the node (``deepspeed/ops/op_builder``):

- Always: libaio's headers and library (``AsyncIOBuilder.is_compatible`` compiles and links a
  test program calling ``io_submit``, so a C compiler too) and ninja (``verify_ninja_availability``).
- Where torch sees CUDA: DeepSpeed's accelerator is ``cuda`` and async_io is a ``CUDAOpBuilder``;
  ``jit_load`` sets ``build_for_cpu = not torch.cuda.is_available()``, so on a GPU node it is
  built as a CUDA extension: ``include_paths`` joins ``torch.utils.cpp_extension.CUDA_HOME``
  (None without a toolkit: a TypeError that names neither CUDA nor async_io) and the build runs
  nvcc from it. torch finds CUDA_HOME from ``CUDA_HOME``/``CUDA_PATH``, else nvcc on PATH, else
  ``/usr/local/cuda``. A GPU node with only the driver and torch's pip CUDA libraries has none.
- On a CPU node: the ``cpu`` accelerator's ``AsyncIOBuilder`` (a ``CPUOpBuilder``): no CUDA.

``aio_facts`` reads these facts (I/O); ``async_io_missing`` decides what to tell the user (pure).
``node_nvme_facts`` is what ``orchestrator/sweep/preflight.py`` runs in a Ray task on every node that
can run a rank, before anything runs (the async_io facts and whether ``nvme_path`` is writable
there: the driver's machine is often a GPU-less head that runs no rank); ``workloads/strategies.py``
uses the same ``async_io_missing`` when ``deepspeed.initialize`` fails in a rank on a node.

May import: deepspeed, torch.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class AioFacts:
    """What this node has for building async_io."""

    cuda: bool
    """torch sees a CUDA device here (DeepSpeed then builds async_io in CUDA mode)."""
    cuda_home: str | None
    """``torch.utils.cpp_extension.CUDA_HOME``: where torch looks for the CUDA toolkit."""
    nvcc: bool
    """``CUDA_HOME/bin/nvcc`` exists and is executable."""
    libaio: bool
    """DeepSpeed's own probe: a test program calling io_submit compiles and links with -laio."""
    ninja: bool
    prebuilt: bool = False
    """The installed DeepSpeed was built with async_io (nothing to build)."""
    torch_cuda: str | None = None
    """``torch.version.cuda``: the toolkit version the build must match."""


def async_io_missing(f: AioFacts) -> str | None:
    """What this node lacks to build async_io, each with its fix; None when nothing is missing."""
    if f.prebuilt:
        return None
    missing = []
    if f.cuda:
        version = f" {f.torch_cuda}" if f.torch_cuda else ""
        if f.cuda_home is None:
            missing.append(
                "the CUDA toolkit: torch sees a GPU here, so DeepSpeed builds async_io as a CUDA "
                f"extension, which needs nvcc; install the CUDA{version} toolkit (torch's CUDA "
                "version) and set CUDA_HOME to it"
            )
        elif not f.nvcc:
            missing.append(
                f"nvcc: CUDA_HOME={f.cuda_home} has no bin/nvcc (a runtime-only CUDA install); "
                f"torch sees a GPU here, so async_io is built with nvcc: install the CUDA{version} "
                "toolkit and point CUDA_HOME at it"
            )
    if not f.libaio:
        missing.append(
            "libaio: apt-get install libaio-dev (DeepSpeed checks it by compiling a test program, "
            "so a C compiler is needed too; set CFLAGS/LDFLAGS if libaio is installed elsewhere)"
        )
    if not f.ninja:
        missing.append("ninja: pip install ninja")
    return "; ".join(missing) or None


@dataclass(frozen=True)
class NodeNvmeFacts:
    """What one node answers to the NVMe preflight (crosses Ray: no torch objects)."""

    aio: AioFacts | None
    """The node's async_io facts; None when reading them failed (``aio_error``)."""
    aio_error: str | None
    """Why the facts could not be read (torch or DeepSpeed failed to import, ...)."""
    nvme_path_error: str | None
    """Why ``nvme_path`` is not a writable folder on this node (the OS's words); None: it is."""


def nvme_path_error(path: str) -> str | None:
    """Why ``path`` is not a writable folder here, None when it is (creates it, as a run would,
    and writes and removes one small file, named for this host and process: nodes sharing a
    folder, or two preflights at once, would otherwise remove each other's file)."""
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".linksweep-write-test-{socket.gethostname()}-{os.getpid()}")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def node_nvme_facts(nvme_path: str) -> NodeNvmeFacts:
    """This node's answer to the NVMe preflight; never raises (a failed read is an answer)."""
    try:
        aio, aio_error = aio_facts(), None
    except Exception as exc:  # noqa: BLE001 - torch/DeepSpeed cannot even be asked
        aio, aio_error = None, f"{type(exc).__name__}: {exc}"
    return NodeNvmeFacts(aio=aio, aio_error=aio_error, nvme_path_error=nvme_path_error(nvme_path))


def aio_facts() -> AioFacts:
    """This node's facts (imports torch and DeepSpeed; compiles DeepSpeed's libaio probe)."""
    import torch
    import torch.utils.cpp_extension as cpp_ext

    cuda_home = cpp_ext.CUDA_HOME
    nvcc = cuda_home is not None and os.access(os.path.join(cuda_home, "bin", "nvcc"), os.X_OK)
    try:
        from deepspeed.git_version_info import installed_ops

        prebuilt = bool(installed_ops.get("async_io", False))
    except ImportError:
        prebuilt = False
    try:
        from deepspeed.ops.op_builder import AsyncIOBuilder

        libaio = bool(AsyncIOBuilder().has_function("io_submit", ("aio",)))
    except Exception:  # noqa: BLE001 - a probe that cannot run has not found libaio
        libaio = False
    return AioFacts(
        cuda=torch.cuda.is_available(),
        cuda_home=cuda_home,
        nvcc=nvcc,
        libaio=libaio,
        ninja=cpp_ext.is_ninja_available(),
        prebuilt=prebuilt,
        torch_cuda=torch.version.cuda,
    )
