"""``workloads/compiling.py``: the ``compile`` axis read from a run's axes, the backend chosen in
one place, inductor's cache state, DeepCompile refused without CUDA naming the field, and the
graph counts: a compiled module keeps calling its graphs after the collective recorder has
listened (without the recorder's eager stance, a dispatch mode left it eager for good)."""

from __future__ import annotations

import types

import pytest
import torch

from workloads import compiling
from workloads.collectives import CollectiveRecorder


def test_the_axis_and_the_backend(monkeypatch):
    assert compiling.enabled(types.SimpleNamespace(axes={"compile": "true"}))
    assert compiling.enabled(types.SimpleNamespace(axes={"compile": True}))
    assert not compiling.enabled(types.SimpleNamespace(axes={"compile": "false"}))
    assert not compiling.enabled(types.SimpleNamespace(axes={}))  # an older config: eager
    monkeypatch.delenv(compiling.BACKEND_ENV, raising=False)
    assert compiling.backend_name() == "inductor"
    monkeypatch.setenv(compiling.BACKEND_ENV, "aot_eager")
    assert compiling.backend_name() == "aot_eager"


def test_cache_state():
    assert compiling.cache_state("inductor", (0, 0), (0, 3)) == "cold"
    assert compiling.cache_state("inductor", (2, 1), (5, 1)) == "warm"
    assert compiling.cache_state("aot_eager", (0, 0), (0, 0)) == "n/a: aot_eager"


def test_deepcompile_is_refused_without_cuda_naming_the_field():
    config = {"compile": {"deepcompile": True}}
    with pytest.raises(
        ValueError, match=r"deepspeed\.compile\.deepcompile: DeepCompile needs CUDA"
    ):
        compiling.refuse_deepcompile(config, cuda=False)
    compiling.refuse_deepcompile(config, cuda=True)
    compiling.refuse_deepcompile({"zero_optimization": {"stage": 3}}, cuda=False)


def test_ddp_compile_needs_dynamos_ddp_optimizer(monkeypatch):
    import torch._dynamo

    assert torch._dynamo.config.optimize_ddp  # torch 2.13's default: the graph split at buckets
    monkeypatch.setattr(torch._dynamo.config, "optimize_ddp", False)
    with pytest.raises(ValueError, match="optimize_ddp"):
        compiling.compile_ddp(torch.nn.Linear(2, 2), compiling.CompileStats("aot_eager"))


class _Net(torch.nn.Module):  # a class of its own: dynamo's code cache is per code object
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x))


def test_compiled_graphs_run_again_after_the_recorder():
    stats = compiling.CompileStats("aot_eager")
    model = torch.compile(_Net(), backend=stats.wrap())

    def step() -> None:
        model(torch.randn(2, 4)).sum().backward()

    step()
    assert stats.snapshot() == (1, 1)
    with CollectiveRecorder():
        step()  # eager under the recorder: no call, no graph
    assert stats.snapshot() == (1, 1)
    step()
    step()
    assert stats.snapshot() == (1, 3)  # the same graph, called again, nothing recompiled
