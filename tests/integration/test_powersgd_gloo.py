"""DDP's gradient compression on two real gloo ranks, without Ray: the recorder's bytes equal
the theory's, PowerSGD's P and Q all-reduces included.

Why two ranks: PowerSGD issues its P and Q all-reduces from callbacks chained on the first
all-reduce's future; with two gloo ranks that future completes in gloo's worker thread, where a
recorder that does not wait for each collective would not listen (one rank completes at once and
hides it: tests/unit/test_powersgd.py). ``DDPStrategy`` records timed, so all three are seen.

One child process (this file run as a module) imports torch and transformers once, then forks
2 ranks, which train gpt2-tiny through ``workloads.strategies.DDPStrategy`` (wrapped in the
accumulation probe, as ``workloads/train.py`` does) for 3 warmup steps (the last one profiled,
as the planner's ``PROFILE_STEPS`` 1 makes it) and 1 more, and write what the profiled step
sent as JSON; the tests compare it with ``orchestrator.analysis.theories``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from tests.integration.forked_ranks import measured_by
from tests.integration.rayports import free_port

REPO = Path(__file__).resolve().parents[2]
WORLD = 2
WARMUP = 3
SEQ_LEN = 16

CASES = {
    "powersgd-r1-last-ga2": {"ga": 2, "sync": "last", "comp": "powersgd", "rank": 1},
    "powersgd-r4-each-ga2": {"ga": 2, "sync": "each", "comp": "powersgd", "rank": 4},
    "fp16-overlap-off-ga2": {"ga": 2, "sync": "each", "comp": "fp16", "overlap": "false"},
}


def _rank(rank: int, port: int, out_dir: str) -> None:
    import types

    import torch
    import torch.distributed as dist

    from workloads.collectives import AccumulationProbe
    from workloads.model import VOCAB_SIZE, build_model
    from workloads.strategies import DDPStrategy
    from workloads.train import profiled_warmup_start

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    out = {}
    for name, c in CASES.items():
        cfg = types.SimpleNamespace(
            grad_accum=c["ga"],
            grad_sync=c["sync"],
            overlap_comm=c.get("overlap", "default"),
            bucket_mb=None,
            lr=1e-3,
            axes={"grad_compression": c["comp"], "powersgd_rank": c.get("rank", 0)},
        )
        model = build_model("gpt2-tiny", 0)
        strategy = AccumulationProbe(
            DDPStrategy(model, torch.device("cpu"), cfg, torch.bfloat16), c["ga"]
        )
        gen = torch.Generator().manual_seed(rank)
        start = profiled_warmup_start(WARMUP, 1)
        comms = ()
        for step in range(WARMUP + 1):
            if step == start:
                strategy.profile_start()
            if step == WARMUP:
                comms = strategy.profile_stop()
            for micro in range(c["ga"]):
                batch = torch.randint(0, VOCAB_SIZE, (1, SEQ_LEN), generator=gen)
                strategy.micro_step(batch, boundary=micro == c["ga"] - 1)
            strategy.optimizer_step()
        reductions = [r for r in strategy.collectives if r.op == "all_reduce"]
        out[name] = {
            "comm_bytes": sum(r.msg_bytes * r.count for r in comms),
            "reductions": [[r.micro_batch, r.msg_bytes, r.dtype] for r in reductions],
            "non_final": strategy.non_final_bytes,
            "checksum": sum(float(p.double().sum()) for p in model.parameters()),
            "iter": getattr(strategy.hook_state, "iter", None),
        }
        strategy.teardown()
    dist.destroy_process_group()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(out))


def main(out_dir: str) -> None:
    import torch.multiprocessing as mp
    import transformers  # noqa: F401 - imported once here, inherited by every forked rank
    from transformers import GPT2LMHeadModel  # noqa: F401 - the lazy module, resolved

    import workloads.strategies  # noqa: F401

    mp.start_processes(_rank, args=(free_port(), out_dir), nprocs=WORLD, start_method="fork")


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict[str, list[dict]]:
    """case name -> one result per rank."""
    out = tmp_path_factory.mktemp("powersgd_gloo")
    return measured_by("tests.integration.test_powersgd_gloo", out, "rank*.json")


def _theory(c: dict):
    from orchestrator.analysis.theories import TheoryFacts, theory_of

    variant = {
        "strategy": "ddp",
        "grad_accum": c["ga"],
        "grad_sync": c["sync"],
        "grad_compression": c["comp"],
        "powersgd_rank": c.get("rank", 0),
        "overlap_comm": c.get("overlap", "default"),
    }
    return theory_of(TheoryFacts(variant, WORLD, "bf16", "gpt2-tiny", 3_382_080))


@pytest.mark.parametrize("name", list(CASES))
def test_the_profiled_step_sends_the_theorys_bytes(measured, name):
    from orchestrator.analysis.comm_model import accumulation_verdict

    c = CASES[name]
    theory = _theory(c)
    ranks = measured[name]
    assert len(ranks) == WORLD
    for result in ranks:
        assert result["comm_bytes"] == theory.bytes_per_step
        dtypes = {dtype for _, _, dtype in result["reductions"]}
        assert dtypes == {"fp32" if c["comp"] == "powersgd" else c["comp"]}
        verdict = accumulation_verdict(
            result["non_final"], theory.non_final, c["ga"], theory.ignore
        )
        assert verdict == "ok"
    # the replicas stay in step: every rank applied the same averaged gradients
    assert math.isclose(ranks[0]["checksum"], ranks[1]["checksum"], rel_tol=1e-9)


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c["comp"] == "powersgd"])
def test_powersgd_p_and_q_are_seen_on_two_ranks(measured, name):
    """Each synced backward: three all-reduces per bucket (whole tensors, P, Q), all recorded;
    together below the uncompressed gradients' bytes; torch counted one iteration per synced
    backward."""
    c = CASES[name]
    syncs = c["ga"] if c["sync"] == "each" else 1
    for result in measured[name]:
        per_micro: dict[int, list[int]] = {}
        for micro, nbytes, _ in result["reductions"]:
            per_micro.setdefault(micro, []).append(nbytes)
        assert len(per_micro) == syncs
        for sizes in per_micro.values():
            assert len(sizes) % 3 == 0 and len(sizes) >= 3
            assert sum(sizes) < 3_382_080 * 4
        assert result["iter"] == syncs * (WARMUP + 1)


if __name__ == "__main__":
    main(sys.argv[1])
