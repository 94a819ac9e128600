"""FSDP2 and HSDP on real gloo ranks, without Ray: the recorder's bytes equal the theory's.

One child process (this file run as a module) imports torch and transformers once, then forks
a 2-rank job (fsdp at grad_accum 1 and 4, both reshard settings and both flavours; bf16 with CPU
offload; hsdp with one replica; the planted accumulation bug) and a 4-rank job (hsdp, shard 2,
every flavour at grad_accum 4; the bug once more, as NVIDIA/cosmos-framework#161 met it). Every rank trains gpt2-tiny for 2 optimizer steps per case
with ``workloads.fsdp.FsdpStrategy`` while ``workloads.collectives``' recorder listens, and
writes its bytes per step and per non-final micro-batches as JSON; the tests compare them with
``orchestrator.analysis.fsdp_theory``. Forking after the imports (and before any tensor work,
so no OpenMP pool exists to break the fork) keeps six ranks' start-up to one import.
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
STEPS = 2
SEQ_LEN = 16


def case(name, world, strategy="fsdp", grad_sync="each", reshard=True, ga=1, **extra):
    return {
        "name": name,
        "world": world,
        "strategy": strategy,
        "grad_sync": grad_sync,
        "reshard": reshard,
        "ga": ga,
        "precision": extra.get("precision", "fp32"),
        "offload": extra.get("offload", "none"),
        "shard": extra.get("shard"),
        "bug": extra.get("bug", False),
    }


CASES = [
    *(
        case(f"fsdp-{sync}-ga{ga}-reshard{int(reshard)}", 2, "fsdp", sync, reshard, ga)
        for ga in (1, 4)
        for reshard in (True, False)
        for sync in ("each", "last")
    ),
    case("fsdp-bf16-offload", 2, ga=2, precision="bf16", offload="cpu"),
    case("hsdp-one-replica", 2, "hsdp", "replicate_last", ga=2, shard=2),
    case("fsdp-last-bug", 2, "fsdp", "last", ga=4, bug=True),
    *(case(f"hsdp-{sync}-ga4", 4, "hsdp", sync, ga=4, shard=2) for sync in ("each", "last")),
    case("hsdp-replicate_last-ga4", 4, "hsdp", "replicate_last", ga=4, shard=2),
    case("hsdp-replicate_last-bug", 4, "hsdp", "replicate_last", ga=2, shard=2, bug=True),
]
BY_NAME = {c["name"]: c for c in CASES}


# --- the child: ranks forked from one process ---------------------------------------------


def _rank(rank: int, world: int, port: int, cases: list[dict], out_dir: str) -> None:
    import types

    import torch
    import torch.distributed as dist

    from workloads.collectives import bytes_by_step, non_final_bytes_by_step
    from workloads.fsdp import FsdpOptions, FsdpStrategy
    from workloads.model import VOCAB_SIZE, build_model

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    out = {}
    for c in cases:
        cfg = types.SimpleNamespace(
            strategy=c["strategy"],
            grad_accum=c["ga"],
            precision=c["precision"],
            offload=c["offload"],
            lr=1e-3,
            pg_timeout_s=120.0,
            bucket_mb=None,
            overlap_comm="default",
        )
        options = FsdpOptions(
            c["strategy"], c["reshard"], c["grad_sync"], c["shard"], sync_switch_bug=c["bug"]
        )
        strategy = FsdpStrategy(
            build_model("gpt2-tiny", 0), torch.device("cpu"), cfg, None, options
        )
        gen = torch.Generator().manual_seed(rank)
        losses = []
        strategy.profile_start()
        for _ in range(STEPS):
            for micro in range(c["ga"]):
                batch = torch.randint(0, VOCAB_SIZE, (1, SEQ_LEN), generator=gen)
                losses.append(float(strategy.micro_step(batch, boundary=micro == c["ga"] - 1)))
            strategy.optimizer_step()
        comms = strategy.profile_stop()
        records = strategy.collectives
        out[c["name"]] = {
            "losses": losses,
            "by_step": bytes_by_step(records),
            "non_final": non_final_bytes_by_step(records, c["ga"]),
            "groups": sorted({(r.op, r.group_size, r.dtype) for r in records}),
            "comm_bytes": sum(r.count * r.msg_bytes for r in comms),
        }
        strategy.teardown()
    dist.destroy_process_group()
    Path(out_dir, f"world{world}-rank{rank}.json").write_text(json.dumps(out))


def main(out_dir: str) -> None:
    import torch.multiprocessing as mp
    import transformers  # noqa: F401 - imported once here, inherited by every forked rank
    from transformers import GPT2LMHeadModel  # noqa: F401 - the lazy module, resolved

    import workloads.collectives  # noqa: F401
    import workloads.fsdp  # noqa: F401

    for world in (2, 4):
        cases = [c for c in CASES if c["world"] == world]
        mp.start_processes(
            _rank,
            args=(world, free_port(), cases, out_dir),
            nprocs=world,
            start_method="fork",
        )


# --- the tests ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict[str, list[dict]]:
    """case name -> one result per rank."""
    out = tmp_path_factory.mktemp("fsdp_gloo")
    return measured_by("tests.integration.test_fsdp_gloo", out, "world*-rank*.json")


def _theory(c: dict):
    from orchestrator.analysis.fsdp_theory import expected_fsdp, gpt2_sharded_by_name

    return expected_fsdp(
        c["strategy"],
        c["grad_sync"],
        c["reshard"],
        c["ga"],
        c["world"],
        gpt2_sharded_by_name("gpt2-tiny"),
        shard_size=c["shard"],
        precision=c["precision"],
    )


def _steps(by_step: dict) -> list[dict]:
    return [by_step[str(step)] for step in range(STEPS)]


@pytest.mark.parametrize("name", [c["name"] for c in CASES if not c["bug"]])
def test_measured_bytes_equal_the_theory(measured, name):
    c = BY_NAME[name]
    ranks = measured[name]
    assert len(ranks) == c["world"]
    theory = _theory(c)
    for result in ranks:
        assert all(math.isfinite(loss) for loss in result["losses"])
        assert _steps(result["by_step"]) == [theory.per_step] * STEPS
        assert _steps(result["non_final"]) == [theory.non_final] * STEPS
        assert result["comm_bytes"] == STEPS * sum(theory.per_step.values())
        # every op ran on the group the theory names, in the dtype FSDP2 sends it in
        gather_dtype = "bf16" if c["precision"] == "bf16" else "fp32"
        assert result["groups"] == sorted(
            [op, theory.group_size[op], gather_dtype if op == "all_gather" else "fp32"]
            for op in theory.per_step
        )


@pytest.mark.parametrize("name", [c["name"] for c in CASES if c["bug"]])
def test_the_planted_sync_bug_sends_what_the_flavour_promises_not_to(measured, name):
    """NVIDIA/cosmos-framework#161's DDP-only ``no_sync`` wrapper is a null context for an FSDP2
    module: the non-final micro-batches reduce as ``each`` does, not as the flavour promises."""
    c = BY_NAME[name]
    promised = _theory(c).non_final
    as_each = _theory({**c, "grad_sync": "each"}).non_final
    skipped = {"last": "reduce_scatter", "replicate_last": "all_reduce"}[c["grad_sync"]]
    assert skipped not in promised
    for result in measured[name]:
        for sent in _steps(result["non_final"]):
            assert sent != promised
            assert sent == as_each
            assert sent[skipped] > 0


if __name__ == "__main__":
    main(sys.argv[1])
