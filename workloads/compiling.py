"""``torch.compile`` as people apply it per strategy (the ``compile`` axis), and what it did.

Where each strategy compiles:

- DDP: the whole model after wrapping it in ``DistributedDataParallel`` (torch's DDP tutorial,
  accelerate's ``dynamo_backend``). Dynamo's DDPOptimizer (``torch._dynamo.config.optimize_ddp``,
  on by default in torch 2.13: ``"ddp_optimizer"``) splits the graph at DDP's bucket boundaries so
  each bucket's all-reduce can start while backward goes on; :func:`compile_ddp` refuses to run
  with it off (one graph would all-reduce only after the whole backward).
- FSDP2: each transformer block on its own, before ``fully_shard`` (torchtitan's
  ``apply_compile``): ``torch.compile(block)`` replaces the block in ``model.transformer.h`` and
  ``fully_shard`` then wraps the compiled module, so FSDP2's all-gather and reduce-scatter hooks
  run outside the compiled regions. Not ``fullgraph=True`` as torchtitan: a block that breaks
  its graph somewhere (a transformers version's attention code) still runs, compiled in parts.
- ZeRO: DeepSpeed 0.19.8's ``engine.compile(backend=...)`` (``runtime/engine.py``), which
  compiles the engine's module and runs on CPU too. DeepCompile (``compile.deepcompile`` in the
  DeepSpeed config) needs CUDA and is refused without it (:func:`refuse_deepcompile`).

The backend is chosen here only (:func:`backend_name`): ``inductor`` (torch's default, what the
benchmark and a GPU run use) unless ``LINKSWEEP_COMPILE_BACKEND`` names another; the suite sets
``aot_eager`` (inductor's C++ builds cost minutes on 2 cores). An environment variable rather
than a sweep field because it changes how long compiling takes, not the variant: a run stores the
backend it used (``runs.compile_backend``), so a sweep's rows say it either way.

Counting (:class:`CompileStats`): the backend is wrapped so that every graph it compiles and
every call of a compiled graph is counted. Compilation is lazy; ``workloads/train.py`` runs one
untimed step (its ``compile`` phase) before warmup, so the graphs exist before any measured step,
then reads the counts over the profiled step(s) and over the timed steps: a graph compiled there
is a recompile. What the recorder does to compiled code: the collective recorder
(``workloads/collectives.py``) is a ``TorchDispatchMode``; while it is on, dynamo's tensor
guards (which include the dispatch keys, the ``Python`` key among them) fail, and a frame that
misses its cache under a non-infra dispatch mode is skipped (``convert_frame.py``
``CatchErrorsWrapper``) and its code then runs eager for good: left so, one profiled step made
every later step of a compiled run eager (seen: no compiled-graph call in the timed steps). So
the recorder runs under ``torch.compiler.set_stance("force_eager")``: the profiled step runs
eager, dynamo is not asked, and the timed steps after it run the compile step's graphs. The
profiled step's collectives are the compiled step's all the same: DDP's reducer, FSDP2's hooks
and DeepSpeed's hooks issue every collective outside the compiled regions, which is why the
compiled runs' bytes still equal the theory (the suite checks it). The counts say so per run:
graph calls per profiled step (0: eager) and per timed step, recompiles in each (0).

May import: torch, deepspeed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

BACKEND_ENV = "LINKSWEEP_COMPILE_BACKEND"
DEFAULT_BACKEND = "inductor"


def backend_name() -> str:
    """The backend compiled runs use: ``LINKSWEEP_COMPILE_BACKEND`` or inductor."""
    return os.environ.get(BACKEND_ENV, "").strip() or DEFAULT_BACKEND


def enabled(cfg: Any) -> bool:
    """Does the run compile (its ``compile`` axis, ``true``/``false`` text or a bool)?"""
    value = (getattr(cfg, "axes", None) or {}).get("compile", "false")
    return str(value).lower() == "true"


@dataclass
class CompileStats:
    """Graphs the backend compiled and calls of compiled graphs, so far (counters)."""

    backend: str
    graphs: int = 0
    calls: int = 0

    def wrap(self) -> Any:
        """A backend for ``torch.compile``: the named one, each graph and each call counted."""
        import torch._dynamo

        real = torch._dynamo.lookup_backend(self.backend)

        def counting_backend(gm: Any, example_inputs: Any) -> Any:
            self.graphs += 1
            compiled = real(gm, example_inputs)

            def run(*args: Any, **kwargs: Any) -> Any:
                self.calls += 1
                return compiled(*args, **kwargs)  # as called: dynamo boxes, DDPOptimizer not

            if getattr(compiled, "_boxed_call", False):  # dynamo then passes one list
                run._boxed_call = True
            return run

        return counting_backend

    def snapshot(self) -> tuple[int, int]:
        return self.graphs, self.calls


def inductor_cache_counts() -> tuple[int, int]:
    """(hits, misses) of inductor's FX graph cache so far in this process."""
    from torch._dynamo.utils import counters

    return counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]


def cache_state(backend: str, before: tuple[int, int], after: tuple[int, int]) -> str:
    """Was inductor's cache cold for the compile step: ``cold`` (a graph missed it), ``warm``
    (every graph hit it), ``n/a: <backend>`` for a backend that does not use it."""
    if backend != "inductor":
        return f"n/a: {backend}"
    hits, misses = after[0] - before[0], after[1] - before[1]
    if misses:
        return "cold"
    return "warm" if hits else "n/a: no graph compiled"


def compile_ddp(model: Any, stats: CompileStats) -> Any:
    """``torch.compile`` of the DDP-wrapped model (DDPOptimizer splits it at the buckets)."""
    import torch
    import torch._dynamo

    if not torch._dynamo.config.optimize_ddp:
        raise ValueError(
            "compile=true with DDP needs torch._dynamo.config.optimize_ddp (DDPOptimizer): off, "
            "the compiled backward all-reduces only after it ends"
        )
    return torch.compile(model, backend=stats.wrap())


def compile_blocks(model: Any, stats: CompileStats) -> None:
    """Each of gpt2's transformer blocks compiled on its own, in place in
    ``model.transformer.h`` (before ``fully_shard`` wraps them)."""
    import torch

    blocks = model.transformer.h
    for i, block in enumerate(list(blocks)):
        blocks[i] = torch.compile(block, backend=stats.wrap())


def refuse_deepcompile(ds_config: dict | None, cuda: bool) -> None:
    """DeepCompile (``compile.deepcompile``) needs CUDA: a ValueError naming the field without."""
    if ((ds_config or {}).get("compile") or {}).get("deepcompile") and not cuda:
        raise ValueError(
            "deepspeed.compile.deepcompile: DeepCompile needs CUDA (its passes schedule CUDA "
            "streams and memory); this rank has none. Use compile: true alone (engine.compile)"
        )
