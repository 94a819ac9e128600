"""The optimizer as Hugging Face Trainer builds it, recorded per run and part of the workload
compare checks (``workloads/optimizer.py``, ``runs.optimizer_impl`` since v14,
``compare/fingerprint.py``): fused AdamW on CPU, DeepSpeedCPUAdam exactly where accelerate swaps
it in, a v13 database's runs read unknown, and an old sweep is a different workload from a new
one rather than a speed change."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from orchestrator.compare.fingerprint import UNKNOWN, fingerprint, workload_mismatch
from orchestrator.store import SCHEMA_VERSION, Store
from tests.unit.schema_downgrade import as_version
from workloads.optimizer import (
    DS_CPU_ADAM,
    FUSED_ADAMW,
    implementation,
    trainer_adamw,
    zero_optimizer,
)


def _params() -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(3))]


def test_trainer_adamw_is_fused_on_cpu_and_steps():
    params = _params()
    opt = trainer_adamw(params, 1e-3)
    assert implementation(opt) == FUSED_ADAMW
    assert opt.defaults["weight_decay"] == 0.0  # Trainer's default, not torch's 1e-2
    before = params[0].detach().clone()
    params[0].sum().backward()
    opt.step()  # the fused CPU kernel really runs
    assert not torch.equal(before, params[0].detach())


def test_a_torch_default_adamw_is_named_as_such():
    opt = torch.optim.AdamW(_params(), lr=1e-3)
    assert implementation(opt) == "torch.optim.AdamW(foreach=None)"


class _FakeCPUAdam:
    """Stands in for DeepSpeedCPUAdam (whose first construction compiles a C++ op)."""

    __module__ = "deepspeed.ops.adam.cpu_adam"

    def __init__(self, params, lr, weight_decay):
        self.params, self.lr, self.weight_decay = list(params), lr, weight_decay
        self.defaults = {"lr": lr}


_FakeCPUAdam.__qualname__ = "DeepSpeedCPUAdam"


@pytest.fixture
def fake_ds_adam(monkeypatch):
    module = types.ModuleType("deepspeed.ops.adam")
    module.DeepSpeedCPUAdam = _FakeCPUAdam
    monkeypatch.setitem(sys.modules, "deepspeed.ops.adam", module)
    return module


@pytest.mark.parametrize(
    "config,expected",
    [
        (None, FUSED_ADAMW),
        ({"zero_optimization": {"stage": 3}}, FUSED_ADAMW),
        ({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none"}}}, FUSED_ADAMW),
        ({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}, DS_CPU_ADAM),
        (
            {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}},
            DS_CPU_ADAM,
        ),
        # a deepspeed: block that turns DeepSpeed's check off keeps the torch optimizer, as
        # accelerate then does
        (
            {
                "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
                "zero_force_ds_cpu_optimizer": False,
            },
            FUSED_ADAMW,
        ),
    ],
)
def test_zero_gets_what_trainer_with_accelerate_gets(fake_ds_adam, config, expected):
    opt = zero_optimizer(_params(), 2e-4, config)
    assert implementation(opt) == expected
    if expected == DS_CPU_ADAM:
        assert (opt.lr, opt.weight_decay) == (2e-4, 0.0)


OLD = [{"model": "gpt2", "world_size": 2, "optimizer_impl": None}] * 2
NEW = [{"model": "gpt2", "world_size": 2, "optimizer_impl": FUSED_ADAMW}] * 2


def test_an_old_sweep_and_a_new_one_are_different_workloads():
    assert workload_mismatch(OLD, NEW) == [
        {"field": "optimizer_impl", "baseline": UNKNOWN, "candidate": FUSED_ADAMW}
    ]
    assert workload_mismatch(NEW, NEW) == []
    assert workload_mismatch(OLD, OLD) == []  # two old sweeps still compare


def test_the_fingerprint_names_the_optimizer():
    def facts(runs):
        return types.SimpleNamespace(
            sweep={}, runs=runs, nodes=[], gpus=[], gpu_links=[], link_descriptions=[]
        )

    assert fingerprint(facts(NEW))["optimizer_impl"] == FUSED_ADAMW
    assert fingerprint(facts(OLD))["optimizer_impl"] == UNKNOWN
    assert fingerprint(facts([]))["optimizer_impl"] is None


def test_a_v13_database_gains_the_column_empty(tmp_path):
    db = str(tmp_path / "v13.duckdb")
    with Store(db) as s, s.transaction():
        s.insert("sweeps", [{"sweep_id": "s", "name": "v13"}])
        s.insert("runs", [{"run_id": "r", "seq": 1, "strategy": "ddp", "world_size": 2}])
    as_version(db, 13)
    with Store(db) as s:
        assert s.query("SELECT run_id, optimizer_impl FROM runs")[1] == [("r", None)]
        assert s.query("SELECT value FROM meta WHERE key = 'schema_version'")[1] == [
            (str(SCHEMA_VERSION),)
        ]
