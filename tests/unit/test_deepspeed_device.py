"""The device DeepSpeed picks from a rank's environment is the device linksweep chose.

Assembled as a GPU node would assemble it, faked only at its edges: torch's CUDA view answers
from the ``CUDA_VISIBLE_DEVICES`` the rank exported (device count, ``set_device``), the process
group is stopped at ``init_process_group`` (its kwargs recorded), and DeepSpeed's accelerator is
a recording CUDA stand-in installed with DeepSpeed's own ``set_accelerator``. Between those
edges everything is the real code: ``Rank.run`` decides and exports, then DeepSpeed 0.19.8's
``DeepSpeedEngine._configure_with_arguments`` and ``_set_distributed_vars`` (what
``deepspeed.initialize`` runs) read that environment and call ``set_device``. DeepSpeed takes
its device from ``LOCAL_RANK``; a rank whose ``LOCAL_RANK`` is its position among two ranks
sharing one GPU asked for ``cuda:1`` with one GPU visible ("invalid device ordinal").
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from workloads.contract import LinkbenchConfig
from workloads.device import choose_device

deepspeed = pytest.importorskip("deepspeed")
from deepspeed.accelerator import get_accelerator, set_accelerator  # noqa: E402
from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator  # noqa: E402
from deepspeed.runtime import engine as ds_engine  # noqa: E402

TRUE_LOCAL_RANK_ENV = "LINKSWEEP_LOCAL_RANK"  # workloads.device.TRUE_LOCAL_RANK_ENV
EXPORTED = ("CUDA_VISIBLE_DEVICES", "RANK", "WORLD_SIZE", "LOCAL_RANK", TRUE_LOCAL_RANK_ENV,
            "MASTER_ADDR", "MASTER_PORT")  # fmt: skip


def _visible() -> list[str]:
    return [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]


class RecordingCuda(CPU_Accelerator):
    """DeepSpeed's accelerator as CUDA would answer with this process's
    ``CUDA_VISIBLE_DEVICES``: it counts the visible GPUs, refuses an ordinal past them as the
    CUDA runtime does, and records every ``set_device``."""

    def __init__(self) -> None:
        super().__init__()
        self._name = "cuda"
        self._communication_backend_name = "nccl"
        self.set_devices: list[int] = []

    def device_name(self, device_index=None):
        return "cuda" if device_index is None else f"cuda:{device_index}"

    def device_count(self):
        return len(_visible())

    def set_device(self, device_index):
        index = int(device_index)
        if not 0 <= index < self.device_count():
            raise RuntimeError("CUDA error: invalid device ordinal")
        self.set_devices.append(index)


@pytest.fixture
def cuda_accelerator():
    """The recording accelerator, installed through DeepSpeed's own hook; the one DeepSpeed
    had is put back afterwards."""
    before = get_accelerator()
    fake = RecordingCuda()
    set_accelerator(fake)
    try:
        yield fake
    finally:
        set_accelerator(before)


class _Stop(Exception):
    """Raised by the fake init_process_group: the rank stops once it has exported its env."""


@pytest.fixture
def node(monkeypatch):
    """A CUDA node as torch sees it from the exported CUDA_VISIBLE_DEVICES; returns a function
    running one rank of a run up to its process group, giving (exported env, pg kwargs)."""
    for key in EXPORTED:
        monkeypatch.setenv(key, "unset-by-test")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(_visible()))
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    # the rank's cuda_init phase: the context it would create on its device
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    seen: dict = {}

    def fake_init(backend, init_method=None, timeout=None, world_size=-1, rank=-1,
                  device_id=None):  # fmt: skip
        seen["env"] = {k: os.environ[k] for k in EXPORTED}
        seen["kwargs"] = {"backend": backend, "device_id": device_id}
        raise _Stop

    monkeypatch.setattr(dist, "init_process_group", fake_init)
    # no rank 0 listens here: the rank's wait for it (tests/unit/test_pg_init_order.py) is skipped
    monkeypatch.setattr("workloads.rank.wait_for_master", lambda *a: True)

    def run_rank(rank: int, world_size: int, local_rank: int, node_gpu_ids: list[str]):
        from workloads.rank import Rank

        cfg = LinkbenchConfig(run_id="ds-device", max_bytes=1024, pg_timeout_s=5.0)
        with pytest.raises(_Stop):
            Rank().run(cfg, rank, world_size, local_rank, "127.0.0.1", 1, node_gpu_ids)
        return dict(seen["env"]), dict(seen["kwargs"])

    return run_rank


def _deepspeed_device(env: dict[str, str], monkeypatch) -> int:
    """The device DeepSpeed's real engine code sets from ``env`` (what deepspeed.initialize
    runs before it builds the model's partitions)."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("OMPI_COMM_WORLD_LOCAL_RANK", raising=False)
    # the process group itself is not under test: DeepSpeed's comm answers for it
    monkeypatch.setattr(ds_engine.dist, "get_world_size", lambda *a, **k: int(env["WORLD_SIZE"]))
    monkeypatch.setattr(ds_engine.dist, "get_rank", lambda *a, **k: int(env["RANK"]))
    engine = SimpleNamespace()
    ds_engine.DeepSpeedEngine._configure_with_arguments(engine, None, None)
    ds_engine.DeepSpeedEngine._set_distributed_vars(engine, None)
    accel = get_accelerator()
    assert engine.device == torch.device(f"cuda:{accel.set_devices[-1]}")
    return accel.set_devices[-1]


# (what the node shows: Ray's GPU id per rank on the node, in local-rank order) -> the CUDA
# index linksweep decides for each rank (its position among CUDA_VISIBLE_DEVICES)
PROFILES = {
    "1 GPU, ranks_per_gpu 2": (["0", "0"], [0, 0]),
    "2 GPUs, one rank each": (["0", "1"], [0, 1]),
    "8 GPUs, CUDA_VISIBLE_DEVICES=0, ranks_per_gpu 2": (["0", "0"], [0, 0]),
    "8 GPUs, Ray gave GPU 5 to two ranks": (["5", "5"], [0, 0]),
    "8 GPUs, Ray gave GPUs 6 and 3": (["6", "3"], [0, 1]),
    "UUID ids, ranks_per_gpu 2": (["GPU-8f1a2b3c", "GPU-8f1a2b3c"], [0, 0]),
}


@pytest.mark.parametrize("profile", PROFILES)
def test_deepspeed_sets_the_device_linksweep_chose(profile, node, cuda_accelerator, monkeypatch):
    ids, expected = PROFILES[profile]
    for local_rank, index in enumerate(expected):
        env, _ = node(local_rank, len(ids), local_rank, ids)
        chosen = choose_device(ids, local_rank, True, len(set(ids)), "2.13.0+cu128", "12.8")
        assert chosen.device == f"cuda:{index}"  # linksweep's decision, as the table says
        assert _deepspeed_device(env, monkeypatch) == index  # and DeepSpeed's


@pytest.mark.parametrize("profile", PROFILES)
def test_the_rank_exports_its_device_and_binds_its_process_group_to_it(profile, node):
    ids, expected = PROFILES[profile]
    for local_rank, index in enumerate(expected):
        env, kwargs = node(local_rank, len(ids), local_rank, ids)
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(dict.fromkeys(ids))
        assert env["LOCAL_RANK"] == str(index)  # the device, which DeepSpeed and torch read
        assert env[TRUE_LOCAL_RANK_ENV] == str(local_rank)  # the rank's place on its node
        assert (env["RANK"], env["WORLD_SIZE"]) == (str(local_rank), str(len(ids)))
        # the process group binds the same device, so NCCL's communicator starts in pg_init
        assert kwargs == {"backend": "nccl", "device_id": torch.device("cuda", index)}


def test_a_cpu_rank_keeps_its_local_rank_and_binds_no_device(node, cuda_accelerator, monkeypatch):
    env, kwargs = node(1, 2, 1, [])
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["LOCAL_RANK"] == env[TRUE_LOCAL_RANK_ENV] == "1"
    assert kwargs == {"backend": "gloo", "device_id": None}


def test_the_fake_refuses_what_cuda_refuses(cuda_accelerator, monkeypatch):
    # the failure the test guards against: rank 1 of two sharing GPU 0, LOCAL_RANK=1
    env = {"CUDA_VISIBLE_DEVICES": "0", "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        _deepspeed_device(env, monkeypatch)
