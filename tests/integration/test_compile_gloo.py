"""``compile: true`` on real gloo ranks, without Ray: a compiled DDP run and a compiled FSDP2 run
(world size 2, gpt2-tiny, ``aot_eager``) through ``workloads.train.run_training``, as a rank runs
it. Each rank's record must say: a ``compile`` phase of its own before warmup, no graph compiled
during the profiled or the timed steps, the timed steps calling compiled graphs (and the
profiled step none: it runs eager under the recorder's dispatch mode,
``workloads/compiling.py``), the optimizer that stepped (fused AdamW), and bytes per step equal
to the theory (``orchestrator/analysis/theories.py``). One child process imports torch and
transformers once and forks both ranks of both cases (``forked_ranks.py``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.integration.forked_ranks import measured_by
from tests.integration.rayports import free_port

STEPS, WARMUP, PROFILE = 2, 2, 1
CASES = {"ddp": {"grad_accum": 2}, "fsdp": {"grad_accum": 1}}


def _config(strategy: str, grad_accum: int):
    from workloads import catalog
    from workloads.contract import RunConfig

    axes = catalog.filled({"strategy": strategy, "grad_accum": grad_accum, "compile": "true"})
    return RunConfig(
        run_id=f"compile-{strategy}", strategy=strategy, grad_accum=grad_accum, bucket_mb=None,
        offload="none", model="gpt2-tiny", dataset="builtin", precision="fp32", seq_len=16,
        micro_batch_size=1, steps=STEPS, warmup_steps=WARMUP, seed=0, lr=1e-3,
        profile_steps=PROFILE, pg_timeout_s=120.0, grad_sync=axes["grad_sync"], axes=axes,
    )  # fmt: skip


def _rank(rank: int, world: int, port: int, out_dir: str) -> None:
    import torch
    import torch.distributed as dist

    from workloads.train import run_training

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    out = {}
    for strategy, case in CASES.items():
        rec = run_training(_config(strategy, **case), rank, world, torch.device("cpu"))
        out[strategy] = {
            "phases": [p.phase for p in rec.phases],
            "compile_s": sum(p.seconds for p in rec.phases if p.phase == "compile"),
            "comm_bytes_per_step": sum(c.msg_bytes * c.count for c in rec.comms) / PROFILE,
            "n_params": rec.n_params,
            "optimizer_impl": rec.optimizer_impl,
            "compile_backend": rec.compile_backend,
            "compile_cache": rec.compile_cache,
            "recompiles_timed": rec.recompiles_timed,
            "recompiles_profiled": rec.recompiles_profiled,
            "graph_calls_timed_step": rec.graph_calls_timed_step,
            "graph_calls_profiled_step": rec.graph_calls_profiled_step,
            "losses": [s.loss for s in rec.steps],
        }
    dist.destroy_process_group()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(out))


def main(out_dir: str) -> None:
    import os

    import torch.multiprocessing as mp
    from transformers import GPT2LMHeadModel  # noqa: F401 - resolved once, inherited by ranks

    import workloads.train  # noqa: F401

    os.environ["LINKSWEEP_COMPILE_BACKEND"] = "aot_eager"  # inductor's C++ builds: minutes
    mp.start_processes(_rank, args=(2, free_port(), out_dir), nprocs=2, start_method="fork")


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict[str, list[dict]]:
    out = tmp_path_factory.mktemp("compile_gloo")
    return measured_by("tests.integration.test_compile_gloo", out, "rank*.json")


def _theory_bytes(strategy: str, grad_accum: int, n_params: int) -> int:
    from orchestrator.analysis.theories import TheoryFacts, theory_of

    variant = {"strategy": strategy, "grad_accum": grad_accum, "compile": "true"}
    facts = TheoryFacts(variant, 2, "fp32", "gpt2-tiny", n_params=n_params)
    return theory_of(facts).bytes_per_step


@pytest.mark.parametrize("strategy", list(CASES))
def test_a_compiled_run_records_its_compile_and_sends_the_theorys_bytes(measured, strategy):
    ranks = measured[strategy]
    assert len(ranks) == 2
    for r in ranks:
        # compiling is a phase of its own, after strategy_init and before warmup
        assert r["phases"].index("strategy_init") < r["phases"].index("compile")
        assert r["phases"].index("compile") < r["phases"].index("warmup")
        assert r["compile_s"] > 0
        assert (r["compile_backend"], r["compile_cache"]) == ("aot_eager", "n/a: aot_eager")
        # the timed steps ran the compile step's graphs: none compiled since, every step calls
        assert r["recompiles_timed"] == 0 and r["recompiles_profiled"] == 0
        assert r["graph_calls_timed_step"] > 0
        assert r["graph_calls_profiled_step"] == 0  # eager under the recorder, as documented
        assert r["optimizer_impl"] == "torch.optim.AdamW(fused=True)"
        expected = _theory_bytes(strategy, CASES[strategy]["grad_accum"], r["n_params"])
        assert r["comm_bytes_per_step"] == expected
        assert all(loss == loss for loss in r["losses"])  # finite, not NaN


if __name__ == "__main__":
    main(sys.argv[1])
