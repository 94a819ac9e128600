"""What the fork launcher's server preloads (``workloads.launcher.PRELOAD``) is safe to import
before forking, and the forked ranks really start with it.

A fork copies one thread: a thread started by an import would be missing in every rank while
whatever it guarded (a lock, a queue) was copied mid-use; a CUDA context cannot cross a fork at
all. So importing the list, in a fresh interpreter set up as the fork server is, must leave the
threads as ``workloads.forkserver_preload`` (torch, transformers, deepspeed, datasets) leaves
them, and CUDA uninitialised. Each name must also import: the server skips a name whose import
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
SERVER_ENV = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1", "TOKENIZERS_PARALLELISM": "false"}
"""What ``Launcher.__init__`` puts in the fork server's environment."""

_IMPORT_PRELOAD = """
import importlib, json, os, sys, threading
sys.path.insert(0, {repo!r})
from workloads.launcher import LAZY_PRELOAD, PRELOAD

def counts():
    return {{"threads": threading.active_count(), "tasks": len(os.listdir("/proc/self/task"))}}

first = counts()
importlib.import_module(PRELOAD[0])  # the base: torch, transformers, deepspeed, datasets
base = counts()
failed = {{}}
for name in LAZY_PRELOAD:  # each must import here (this environment has DeepSpeed)
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = repr(exc)
import torch
print(json.dumps({{"first": first, "base": base, "after": counts(), "failed": failed,
                  "cuda": torch.cuda.is_initialized(), "preload": PRELOAD,
                  "lazy": list(LAZY_PRELOAD)}}))
"""


def _run(code: str, cwd: Path = REPO) -> dict:
    env = {**os.environ, **SERVER_ENV}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_importing_the_preload_list_starts_no_thread_and_no_cuda_context():
    r = _run(_IMPORT_PRELOAD.format(repo=str(REPO)))
    # no Python thread at any point; the native threads are those the base import leaves
    assert r["first"]["threads"] == r["base"]["threads"] == r["after"]["threads"] == 1, r
    assert r["after"]["tasks"] == r["base"]["tasks"], r
    assert r["cuda"] is False
    # every name imports here (this environment has DeepSpeed): none was renamed or moved
    assert r["failed"] == {}, r["failed"]
    assert r["preload"] == ["workloads.forkserver_preload", "workloads.forkserver_lazy"]
    assert len(r["lazy"]) > 1


def forked_view() -> dict:
    """Run in a forked child: which PRELOAD modules it started with, what the collector sees."""
    import gc
    import threading

    from workloads.launcher import LAZY_PRELOAD, PRELOAD

    return {
        "missing": [m for m in [*PRELOAD, *LAZY_PRELOAD] if m not in sys.modules],
        "frozen": gc.get_freeze_count(),
        "threads": threading.active_count(),
        "cuda": sys.modules["torch"].cuda.is_initialized(),
    }


_FORK = """
import json, sys
sys.path[:0] = [{repo!r}, {here!r}]
from workloads.launcher import Launcher
import test_preload
launcher = Launcher()
print(json.dumps(launcher.call({{}}, test_preload.forked_view, ())))
"""


def test_a_forked_rank_starts_with_the_preload_list_and_out_of_the_collectors_sight():
    here = Path(__file__).parent
    r = _run(_FORK.format(repo=str(REPO), here=str(here)))
    assert r["missing"] == [], r  # imported by the fork server, not by the child
    assert r["frozen"] > 100_000, r  # torch & co. (~500,000 objects) frozen after the fork
    assert r["threads"] == 1 and r["cuda"] is False, r
