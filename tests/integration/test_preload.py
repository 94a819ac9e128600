"""What the fork launcher's server preloads (``workloads.launcher.PRELOAD``) is safe to import
before forking, and the forked ranks really start with it.

A fork copies one thread: a thread started by an import would be missing in every rank while
whatever it guarded (a lock, a queue) was copied mid-use; a CUDA context cannot cross a fork at
all. So importing the list, in a fresh interpreter set up as the fork server is, must leave the
threads as ``workloads.forkserver_preload`` (torch, transformers, deepspeed, datasets) leaves
them, and CUDA uninitialised. On a GPU node (the launcher actor inherits the raylet's GPU
list) the server must also see no GPU, load neither libcuda nor NVML, and still give DeepSpeed
the CUDA accelerator the ranks need; a forked child sees only the GPUs its call names. (On this
CPU machine libcuda and NVML cannot load at all: there the checks guard the code path, on a GPU
node they read the hardware's libraries.) Each name must also import: the server skips a name whose import
raises (``launcher.import_quietly``), so a module DeepSpeed moved would silently stop being
preloaded.

This module imports only the standard library and pytest at its top: a forked child imports it
to run :func:`forked_view`, and must find the preloaded modules already there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RAYLET_GPUS = "0,1"
"""The ``CUDA_VISIBLE_DEVICES`` a launcher actor inherits on a GPU node: Ray 2.60 leaves the
raylet's list to a zero-GPU worker (``override_on_zero=False``)."""

_IMPORT_PRELOAD = """
import importlib, json, os, sys, threading
sys.path.insert(0, {repo!r})
from workloads.launcher import LAZY_PRELOAD, PRELOAD

def counts():
    return {{"threads": threading.active_count(), "tasks": len(os.listdir("/proc/self/task"))}}

first = counts()
import torch
asked = []  # what would ask CUDA how many GPUs there are, and cache the server's answer
for name in ("is_available", "device_count", "get_device_capability", "get_device_properties"):
    real = getattr(torch.cuda, name)
    setattr(torch.cuda, name, lambda *a, _n=name, _f=real, **k: asked.append(_n) or _f(*a, **k))
importlib.import_module(PRELOAD[0])  # the NVML guard, then torch, transformers, deepspeed...
base = counts()
failed = {{}}
for name in LAZY_PRELOAD:  # each must import here (this environment has DeepSpeed)
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = repr(exc)
import torch
sys.path.insert(0, {here!r})
import test_preload
print(json.dumps({{"first": first, "base": base, "after": counts(), "failed": failed,
                  "cuda": torch.cuda.is_initialized(), "preload": PRELOAD,
                  "lazy": list(LAZY_PRELOAD), "gpu": test_preload.gpu_state(),
                  "asked": asked}}))
"""


def _run(code: str, as_server: bool, cwd: Path = REPO) -> dict:
    """``code`` in a fresh interpreter whose environment is a GPU-node launcher actor's
    (``RAYLET_GPUS``), with what ``Launcher("cuda")`` gives its fork server on top when
    ``as_server``."""
    from workloads.launcher import server_env

    env = {**os.environ, "CUDA_VISIBLE_DEVICES": RAYLET_GPUS}
    env |= server_env("cuda") if as_server else {}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def gpu_state() -> dict:
    """What this process holds of CUDA and NVML, and the DeepSpeed accelerator it has picked.
    In a forked child, the libraries' state is the fork server's: a library mapped there is
    mapped here, NVML's reference count is the server's."""
    import pynvml

    with open("/proc/self/maps") as f:
        maps = f.read()
    ds = sys.modules.get("deepspeed.accelerator.real_accelerator")
    acc = getattr(ds, "ds_accelerator", None)
    return {
        "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cuda": sys.modules["torch"].cuda.is_initialized(),
        "libcuda": "libcuda.so" in maps,
        "libnvidia_ml": "libnvidia-ml.so" in maps,
        "nvml_refcount": pynvml._nvmlLib_refcount,
        "nvml_loaded": pynvml.nvmlLib is not None,
        "nvml_init_guarded": pynvml.nvmlInit.__module__ != "pynvml",
        "ds_accelerator": getattr(acc, "_name", None),
    }


def _assert_no_gpu_touched(gpu: dict) -> None:
    assert gpu["cuda"] is False, gpu
    assert not gpu["libcuda"] and not gpu["libnvidia_ml"], gpu  # never even loaded
    assert gpu["nvml_refcount"] == 0 and not gpu["nvml_loaded"], gpu
    assert gpu["ds_accelerator"] == "cuda", gpu  # picked for the GPU ranks, without a probe


def test_importing_the_preload_list_on_a_gpu_node_touches_no_gpu_and_starts_no_thread():
    here = Path(__file__).parent
    r = _run(_IMPORT_PRELOAD.format(repo=str(REPO), here=str(here)), as_server=True)
    # no Python thread at any point; the native threads are those the base import leaves
    assert r["first"]["threads"] == r["base"]["threads"] == r["after"]["threads"] == 1, r
    assert r["after"]["tasks"] == r["base"]["tasks"], r
    assert r["cuda"] is False
    # the server sees no GPU (not the raylet's list) and may not initialise NVML meanwhile
    assert r["gpu"]["cvd"] == "" and r["gpu"]["nvml_init_guarded"], r["gpu"]
    _assert_no_gpu_touched(r["gpu"])
    # nor asked torch about CUDA at all: no answer from the server's view (no GPU) is cached
    # for the ranks (DeepSpeed's accelerator comes from DS_ACCELERATOR, not from a probe)
    assert r["asked"] == [], r["asked"]
    # every name imports here (this environment has DeepSpeed): none was renamed or moved
    assert r["failed"] == {}, r["failed"]
    assert r["preload"] == ["workloads.forkserver_preload", "workloads.forkserver_lazy"]
    assert len(r["lazy"]) > 1


def forked_view() -> dict:
    """Run in a forked child: which PRELOAD modules it started with, what the collector sees,
    what it holds of the GPUs (:func:`gpu_state`)."""
    import gc
    import threading

    from workloads.launcher import LAZY_PRELOAD, PRELOAD

    return {
        "missing": [m for m in [*PRELOAD, *LAZY_PRELOAD] if m not in sys.modules],
        "frozen": gc.get_freeze_count(),
        "threads": threading.active_count(),
        "gpu": gpu_state(),
    }


_FORK = """
import json, sys
sys.path[:0] = [{repo!r}, {here!r}]
from workloads.launcher import Launcher
import test_preload
launcher = Launcher("cuda")
print(json.dumps({{"default": launcher.call({{}}, test_preload.forked_view, ()),
                  "rank": launcher.call({{"CUDA_VISIBLE_DEVICES": "GPU-5f1c"}},
                                        test_preload.forked_view, ())}}))
"""


def test_a_forked_rank_starts_with_the_preload_list_and_only_the_gpus_it_was_given():
    here = Path(__file__).parent
    out = _run(_FORK.format(repo=str(REPO), here=str(here)), as_server=False)
    for r in out.values():
        assert r["missing"] == [], r  # imported by the fork server, not by the child
        assert r["frozen"] > 100_000, r  # torch & co. (~500,000 objects) frozen after the fork
        assert r["threads"] == 1, r
        _assert_no_gpu_touched(r["gpu"])
        assert not r["gpu"]["nvml_init_guarded"], r  # the child's own NVML init works again
    # never the raylet's list the launcher inherited: nothing, or exactly what the call gave
    assert out["default"]["gpu"]["cvd"] == ""
    assert out["rank"]["gpu"]["cvd"] == "GPU-5f1c"
