"""The rank's ``cuda_init`` phase (``workloads/rank.py``): a rank given a GPU times the device
decision and its CUDA context between its imports and its process group; a CPU rank has no such
phase. CUDA is faked as far as the rank asks it (torch here is a CPU build)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from workloads import rank as rank_mod
from workloads.contract import LinkbenchConfig
from workloads.device import TRUE_LOCAL_RANK_ENV

EXPORTED = ("CUDA_VISIBLE_DEVICES", "RANK", "WORLD_SIZE", "LOCAL_RANK", TRUE_LOCAL_RANK_ENV,
            "MASTER_ADDR", "MASTER_PORT")  # fmt: skip


class _Stop(Exception):
    """Raised where the process group would start: the phases before it are what is checked."""


@pytest.fixture
def started(monkeypatch):
    """Run a rank up to its process group; returns (phases timed, CUDA calls made)."""
    for key in EXPORTED:  # Rank.run exports these: monkeypatch puts them back
        monkeypatch.setenv(key, "unset-by-test")
    phases, cuda = [], []

    class Clock(rank_mod.PhaseClock):
        def add(self, name, seconds):
            phases.append(name)
            super().add(name, seconds)

    monkeypatch.setattr(rank_mod, "PhaseClock", Clock)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: cuda.append("set_device"))
    monkeypatch.setattr(torch.cuda, "init", lambda: cuda.append("init"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: cuda.append(str(device)))
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: (_ for _ in ()).throw(_Stop))
    monkeypatch.setattr(rank_mod, "wait_for_master", lambda *a: True)

    def start(node_gpu_ids):
        phases.clear()
        cuda.clear()
        cfg = LinkbenchConfig(run_id="cuda-init", max_bytes=1024, pg_timeout_s=5.0)
        with pytest.raises(_Stop):
            rank_mod.Rank().run(cfg, 0, 1, 0, "127.0.0.1", 1, node_gpu_ids)
        return list(phases), list(cuda)

    return start


def test_a_gpu_rank_times_its_cuda_context_between_imports_and_pg_init(started):
    phases, cuda = started(["GPU-5f1c"])
    assert phases[:3] == ["imports", "cuda_init", "pg_init"]
    assert cuda == ["set_device", "init", "cuda:0"]  # decided, then its context, waited for


def test_a_cpu_rank_has_no_cuda_init_and_touches_no_cuda(started):
    phases, cuda = started(None)
    assert "cuda_init" not in phases and phases[:2] == ["imports", "pg_init"]
    assert cuda == []
