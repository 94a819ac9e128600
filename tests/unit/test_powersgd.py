"""DDP with PowerSGD (``grad_compression: powersgd``): torch's rule for which tensors it
compresses, the warmup rule against torch's own iteration count, the theory's bytes for
gpt2-tiny worked by hand, and the bytes a real run's recorder counts against that theory.

Real collectives on a one-rank gloo group in this process (as tests/unit/test_comm_dtypes.py):
message bytes do not depend on the number of ranks, and a one-rank all_reduce still runs the
hook. Two ranks (PowerSGD's P and Q all-reduces issued from future callbacks in gloo's thread):
tests/integration/test_powersgd_gloo.py.

gpt2-tiny (n_layer 2, n_embd d = 64, vocab 50257, 1024 positions; 3,382,080 parameters), as DDP
holds it (wte tied to lm_head: once). A tensor is viewed as n x m = (shape[0], prod(rest)),
compressed to P (n x r) and Q (m x r), r = min(n, m, rank), iff (n + m) r x 2 < n m:

- wte (50257, 64), rank 1: (50257 + 64) x 2 = 100,642 < 3,216,448: P + Q = 50,321 elements;
  rank 4: 201,284 x 2 = 402,568 < 3,216,448: 201,284.
- wpe (1024, 64): rank 1: 1,088; rank 4: 4,352 (8,704 < 65,536).
- each block: c_attn.weight (64, 192): 256 (r 1), 1,024 (r 4); attn.c_proj.weight (64, 64):
  128, 512 (r 4: 512 x 2 = 1,024 < 4,096); mlp.c_fc.weight (64, 256) and mlp.c_proj.weight
  (256, 64): 320 each, 1,280 each (r 4). Compressed per block: 1,024 (r 1), 4,096 (r 4).
- every 1-D tensor is n x 1: (n + 1) x 2 > n, sent whole: per block ln_1 (64 + 64), c_attn.bias
  192, c_proj.bias 64, ln_2 (64 + 64), c_fc.bias 256, mlp.c_proj.bias 64 = 832; ln_f 128.

Per synced backward, rank 1: 50,321 + 1,088 + 2 x (1,024 + 832) + 128 = 55,249 elements x 4 B
= 220,996 B (of 13,528,320 uncompressed: 61x less); rank 4: 201,284 + 4,352 + 2 x (4,096 +
832) + 128 = 215,620 elements = 862,480 B. Whole: 1,792 elements each (2 x 832 + 128).
"""

from __future__ import annotations

import itertools
import math
import types

import pytest
import torch
import torch.distributed as dist

from orchestrator.analysis import comm_model
from orchestrator.analysis.theories import TheoryFacts, theory_of
from tests.unit.tiny_lm import TinyLM
from workloads import compression
from workloads.collectives import AccumulationProbe
from workloads.strategies import DDPStrategy

N_PARAMS = 3_382_080
RANK1_BYTES = 220_996
RANK4_BYTES = 862_480


@pytest.fixture(scope="module")
def one_rank_group(tmp_path_factory):
    """A one-rank gloo group for the module (left as it was found afterwards)."""
    if dist.is_initialized():
        yield
        return
    store = dist.FileStore(str(tmp_path_factory.mktemp("pg") / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


# --- torch's rule, on shapes --------------------------------------------------------------


def test_the_split_is_torchs_should_compress():
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _should_compress

    for shape, rank in itertools.product(
        [(7,), (64,), (3, 3), (4, 4), (5, 4), (64, 64), (3, 100), (8, 2, 5), (50257, 64)],
        [1, 2, 4, 32],
    ):
        n, m = shape[0], math.prod(shape[1:])
        r = min(n, m, rank)
        should, _, compressed = _should_compress(n, m, r, compression.POWERSGD_MIN_COMPRESSION_RATE)
        p, q = compression.powersgd_tensor(shape, rank, compression.POWERSGD_MIN_COMPRESSION_RATE)
        assert (p + q > 0) == should, (shape, rank)
        if should:
            assert (p, q) == (n * r, m * r) and p + q == compressed
    assert compression.powersgd_tensor((1000,), 1, 2) == (0, 0)  # 1-D: never


def test_gpt2_tiny_split_by_hand():
    from orchestrator.analysis.theories import _ddp_shapes

    shapes = _ddp_shapes("gpt2-tiny")
    assert sum(math.prod(s) for s in shapes) == N_PARAMS
    one = compression.powersgd_split(shapes, 1)
    assert (one.p + one.q, one.whole, one.compressed_tensors, one.whole_tensors) == (
        55_249 - 1_792,
        1_792,
        10,
        18,
    )
    assert one.p == 50_257 + 1_024 + 2 * (64 + 64 + 64 + 256)  # n x r of each matrix
    four = compression.powersgd_split(shapes, 4)
    assert (four.elements, four.whole) == (215_620, 1_792)


# --- the theory ------------------------------------------------------------------------------


def _facts(ga, sync, rank=1, world=2, model="gpt2-tiny", n_params=N_PARAMS, **axes):
    variant = {"strategy": "ddp", "grad_accum": ga, "grad_sync": sync, **axes}
    if "grad_compression" not in axes and "ddp_grad_dtype" not in axes:
        variant |= {"grad_compression": "powersgd", "powersgd_rank": rank}
    return TheoryFacts(variant, world, "bf16", model, n_params)


@pytest.mark.parametrize(
    ("ga", "sync", "rank", "per_step", "non_final"),
    [
        (1, "last", 1, RANK1_BYTES, {}),
        (4, "last", 1, RANK1_BYTES, {}),  # no_sync: one reduction per step
        (4, "last", 4, RANK4_BYTES, {}),
        (3, "each", 1, 3 * RANK1_BYTES, {"all_reduce": 2 * RANK1_BYTES}),
        (2, "each", 4, 2 * RANK4_BYTES, {"all_reduce": RANK4_BYTES}),
    ],
)
def test_powersgd_theory_for_gpt2_tiny(ga, sync, rank, per_step, non_final):
    theory = theory_of(_facts(ga, sync, rank))
    assert theory.bytes_per_step == per_step
    assert theory.per_op == {"all_reduce": per_step}
    assert theory.non_final == non_final
    assert f"grad_compression powersgd rank {rank} (powerSGD_hook)" in theory.note
    assert "all_reduce in fp32" in theory.note
    assert per_step < ga * N_PARAMS * 4  # it compresses


@pytest.mark.parametrize(
    ("compression_name", "per_element"), [("none", 4), ("bf16", 2), ("fp16", 2)]
)
def test_the_cast_compressions_send_their_bytes_per_element(compression_name, per_element):
    theory = theory_of(_facts(2, "each", grad_compression=compression_name))
    assert theory.bytes_per_step == 2 * N_PARAMS * per_element
    assert theory.non_final == {"all_reduce": N_PARAMS * per_element}
    assert f"grad_compression {compression_name} (" in theory.note


def test_the_older_ddp_grad_dtype_reads_as_its_compression():
    bf16 = theory_of(_facts(1, "last", ddp_grad_dtype="bf16"))
    assert bf16.bytes_per_step == N_PARAMS * 2 and "bf16_compress_hook" in bf16.note
    assert theory_of(_facts(1, "last", ddp_grad_dtype="fp32")).bytes_per_step == N_PARAMS * 4


def test_without_shapes_powersgd_has_no_figure_and_says_why():
    no_model = theory_of(_facts(2, "each", model="llama-7b"))
    assert no_model.bytes_per_step is None and no_model.non_final is None
    assert "no parameter shapes" in no_model.note and "no parameter shapes" in (
        no_model.no_promise_why
    )
    other = theory_of(_facts(2, "last", n_params=N_PARAMS + 1))
    assert other.bytes_per_step is None and "hold 3382080 elements" in other.note
    assert theory_of(_facts(2, "last", world=1)).note is None  # one rank: nothing to say


def test_compression_of_reads_the_axes():
    of = compression.compression_of
    assert of({"grad_compression": "powersgd", "powersgd_rank": 4}) == ("powersgd", 4)
    assert of({"grad_compression": "powersgd"}) == ("powersgd", 1)
    assert of({"grad_compression": "bf16", "powersgd_rank": 0}) == ("bf16", None)
    assert of({}) == ("none", None)
    with pytest.raises(ValueError, match="powersgd_rank must be an int >= 1"):
        of({"grad_compression": "powersgd", "powersgd_rank": 0})
    with pytest.raises(ValueError, match=r"grad_compression='int8' is not one of"):
        of({"grad_compression": "int8"})


def test_the_catalogs_compressions_are_the_ones_the_ranks_implement():
    from workloads import catalog

    if "grad_compression" not in catalog.AXES:
        pytest.skip("the catalog has no grad_compression axis yet")
    assert set(catalog.axis("grad_compression").values) <= set(compression.KNOWN)


def test_profile_steps_is_the_planners():
    from orchestrator.sweep import planner

    assert compression.PROFILE_STEPS == planner.PROFILE_STEPS


# --- the warmup rule -------------------------------------------------------------------------


def test_the_warmup_threshold_is_the_least_from_which_every_warmup_compresses():
    for ga, sync, profile in itertools.product([1, 2, 3, 8], ["last", "each"], [0, 1, 2, 3]):
        need, why = compression.powersgd_min_warmup_steps(ga, sync, profile)
        ok = [compression.powersgd_compresses(w, profile, ga, sync) for w in range(12)]
        assert all(ok[need:]), (ga, sync, profile)
        assert need == 0 or not ok[need - 1], (ga, sync, profile)
        assert "start_powerSGD_iter 2" in why
    assert compression.powersgd_min_warmup_steps(1, "last")[0] == 3
    assert compression.powersgd_min_warmup_steps(8, "last")[0] == 3
    assert compression.powersgd_min_warmup_steps(1, "each")[0] == 3
    assert compression.powersgd_min_warmup_steps(2, "each")[0] == 1
    assert compression.powersgd_min_warmup_steps(8, "each")[0] == 1


def test_the_first_measured_step_is_trains():
    from workloads.train import profiled_warmup_start

    for warmup, profile in itertools.product(range(6), range(4)):
        start = profiled_warmup_start(warmup, profile)
        assert compression.first_measured_step(warmup, profile) == (
            warmup if start is None else start
        )


def _cfg(ga=1, sync="last", comp="powersgd", rank=1, overlap="default"):
    return types.SimpleNamespace(
        grad_accum=ga,
        grad_sync=sync,
        overlap_comm=overlap,
        bucket_mb=None,
        lr=1e-3,
        axes={"grad_compression": comp, "powersgd_rank": rank},
    )


def _train(strategy, ga, warmup, profile, steps=2, vocab=64, seq=8):
    """train.py's loop: ``warmup + steps`` optimizer steps, the profiled ones the last warmup
    steps or a pass after; per step, did every backward that reached DDP's hook compress
    (PowerSGD's own count of the elements it considered grows by the model at each one); the
    steps measured; the profiled pass's comms."""
    from workloads.train import profiled_warmup_start

    state = strategy.hook_state
    n = sum(p.numel() for p in strategy.model.parameters())
    gen = torch.Generator().manual_seed(0)
    start = profiled_warmup_start(warmup, profile)
    compressed, comms = [], ()

    def step():
        before = state.total_numel_before_compression
        for micro in range(ga):
            batch = torch.randint(0, vocab, (2, seq), generator=gen)
            strategy.micro_step(batch, boundary=micro == ga - 1)
        strategy.optimizer_step()
        compressed.append((state.total_numel_before_compression - before) // n)

    for t in range(warmup + steps):
        if t == start:
            strategy.profile_start()
        if t == warmup and start is not None:
            comms = strategy.profile_stop()
        step()
    measured = list(range(warmup if start is None else start, warmup + steps))
    if profile and start is None:
        strategy.profile_start()
        for _ in range(profile):
            measured.append(len(compressed))
            step()
        comms = strategy.profile_stop()
    return compressed, measured, comms


@pytest.mark.parametrize(
    ("ga", "sync", "profile"),
    [
        (1, "last", 1),
        (4, "last", 1),
        (2, "each", 1),
        (3, "each", 1),
        (1, "last", 2),
        (1, "last", 0),
    ],
)
def test_the_rule_matches_torchs_own_iteration_count(one_rank_group, ga, sync, profile):
    syncs = compression.syncs_per_step(ga, sync)
    need, _ = compression.powersgd_min_warmup_steps(ga, sync, profile)
    for warmup in range(need + 2):
        strategy = DDPStrategy(TinyLM(), torch.device("cpu"), _cfg(ga, sync), None)
        compressed, measured, _ = _train(strategy, ga, warmup, profile)
        every = all(compressed[t] == syncs for t in measured)
        assert every == compression.powersgd_compresses(warmup, profile, ga, sync), (warmup,)
        # torch counts one iteration per backward that reaches the hook's last bucket
        assert strategy.hook_state.iter == syncs * len(compressed)


def test_overlap_false_refuses_powersgd_naming_both_fields(one_rank_group):
    with pytest.raises(ValueError, match="grad_compression=powersgd.*overlap_comm=false"):
        DDPStrategy(TinyLM(), torch.device("cpu"), _cfg(overlap="false"), None)


# --- a real run's bytes against the theory ------------------------------------------------


@pytest.mark.parametrize(("ga", "sync", "rank"), [(2, "last", 1), (2, "each", 4)])
def test_gpt2_tiny_sends_what_the_theory_says(one_rank_group, ga, sync, rank):
    """Three warmup steps (the last profiled): the recorder's bytes for one compressed step
    equal the theory; PowerSGD's three all-reduces per bucket, each in fp32; the accumulation
    check holds."""
    from workloads.model import VOCAB_SIZE, build_model

    cfg = _cfg(ga, sync, rank=rank)
    strategy = AccumulationProbe(
        DDPStrategy(build_model("gpt2-tiny", 0), torch.device("cpu"), cfg, torch.bfloat16), ga
    )
    warmup, profile = 3, 1
    assert compression.powersgd_compresses(warmup, profile, ga, sync)
    compressed, measured, comms = _train(strategy, ga, warmup, profile, 1, VOCAB_SIZE)
    assert measured == [2, 3] and compressed[2:] == [compression.syncs_per_step(ga, sync)] * 2
    records = strategy.collectives
    assert {r.step for r in records} == {warmup - 1}
    reductions = [r for r in records if r.op == "all_reduce"]
    assert {r.dtype for r in reductions} == {"fp32"}
    sent = sum(r.msg_bytes for r in reductions)
    theory = theory_of(_facts(ga, sync, rank))
    assert sent == theory.bytes_per_step
    assert sum(c.msg_bytes * c.count for c in comms) == sent  # what rows store per step
    assert {(c.op, c.dtype) for c in comms} == {("all_reduce", "fp32")}
    assert sent < N_PARAMS * 4 * compression.syncs_per_step(ga, sync)  # it really compressed
    assert len(reductions) % 3 == 0  # per bucket: the whole tensors, P, Q
    verdict = comm_model.accumulation_verdict(
        strategy.non_final_bytes, theory.non_final, ga, theory.ignore
    )
    assert verdict == "ok"
