"""FSDP2 / HSDP theory: gpt2's units as FSDP2 groups them, padding, and the bytes per
micro-batch, per step and in the non-final micro-batches for every flavour."""

from __future__ import annotations

import pytest

from orchestrator.analysis.fsdp_theory import (
    ShardedModel,
    expected_fsdp,
    gpt2_sharded,
    gpt2_sharded_by_name,
    padded_numel,
)

TINY = gpt2_sharded_by_name("gpt2-tiny")  # 2 blocks, n_embd 64, vocab 50257
BLOCK = 49_984  # elements of one gpt2-tiny block (every dim 0 is a multiple of 64)
ROOT_2 = 50_258 * 64 + 1024 * 64 + 2 * 64  # the token embedding padded by a row on 2 ranks
ROOT_4 = 50_260 * 64 + 1024 * 64 + 2 * 64  # ... and by three rows on 4


def test_gpt2_units_are_the_models_own_parameters():
    """Every parameter of the real model is in exactly one unit: each block's own, the rest
    (token embedding tied to the LM head, position embedding, final norm) in the root."""
    from workloads.model import build_model, n_params

    model = build_model("gpt2-tiny", 0)
    blocks = [tuple(tuple(p.shape) for p in block.parameters()) for block in model.transformer.h]
    in_blocks = {id(p) for block in model.transformer.h for p in block.parameters()}
    root = tuple(tuple(p.shape) for p in model.parameters() if id(p) not in in_blocks)
    assert ShardedModel(root=root, blocks=tuple(blocks)) == TINY
    assert model.lm_head.weight is model.transformer.wte.weight  # tied: one parameter
    total = padded_numel(TINY.root, 1) + sum(padded_numel(b, 1) for b in TINY.blocks)
    assert total == n_params(model)


def test_padding_rounds_dim0_up_to_the_shard_size():
    assert padded_numel([(50_257, 64)], 2) == 50_258 * 64
    assert padded_numel([(50_257, 64)], 4) == 50_260 * 64
    assert padded_numel([(3,), (4, 5)], 4) == 4 + 20
    assert padded_numel(TINY.blocks[0], 2) == BLOCK
    assert padded_numel(TINY.root, 2) == ROOT_2


@pytest.mark.parametrize("reshard", [True, False])
def test_fsdp_each_reduces_every_micro_batch(reshard):
    exp = expected_fsdp("fsdp", "each", reshard, 4, 2, TINY)
    gathered = (ROOT_2 + (2 if reshard else 1) * 2 * BLOCK) * 4
    reduced = (ROOT_2 + 2 * BLOCK) * 4
    assert exp.per_micro_batch == ({"all_gather": gathered, "reduce_scatter": reduced},) * 4
    assert exp.per_step == {"all_gather": 4 * gathered, "reduce_scatter": 4 * reduced}
    assert exp.non_final == {"all_gather": 3 * gathered, "reduce_scatter": 3 * reduced}
    assert exp.group_size == {"all_gather": 2, "reduce_scatter": 2}


def test_fsdp_last_reduces_once_but_still_gathers_every_micro_batch():
    exp = expected_fsdp("fsdp", "last", True, 4, 2, TINY)
    gathered, reduced = (ROOT_2 + 4 * BLOCK) * 4, (ROOT_2 + 2 * BLOCK) * 4
    assert exp.per_step == {"all_gather": 4 * gathered, "reduce_scatter": reduced}
    assert exp.non_final == {"all_gather": 3 * gathered}
    assert exp.per_micro_batch[-1] == {"all_gather": gathered, "reduce_scatter": reduced}
    # at grad_accum 1 both flavours are the same single micro-batch
    one = expected_fsdp("fsdp", "last", True, 1, 2, TINY)
    assert one.per_step == expected_fsdp("fsdp", "each", True, 1, 2, TINY).per_step
    assert one.non_final == {}


def test_the_measured_gpt2_tiny_figures():
    """What the recorder measured on 2 gloo ranks (fp32): 13,928,448 bytes gathered and
    13,528,576 reduce-scattered per micro-batch with resharding; 13,528,576 gathered without."""
    assert expected_fsdp("fsdp", "each", True, 1, 2, TINY).per_step == {
        "all_gather": 13_928_448,
        "reduce_scatter": 13_528_576,
    }
    assert expected_fsdp("fsdp", "each", False, 1, 2, TINY).per_step["all_gather"] == 13_528_576


def test_bf16_gathers_half_and_still_reduces_in_fp32():
    fp32 = expected_fsdp("fsdp", "each", True, 2, 2, TINY)
    bf16 = expected_fsdp("fsdp", "each", True, 2, 2, TINY, precision="bf16")
    assert bf16.per_step["all_gather"] * 2 == fp32.per_step["all_gather"]
    assert bf16.per_step["reduce_scatter"] == fp32.per_step["reduce_scatter"]


def test_fsdp_on_four_ranks_pads_for_four():
    exp = expected_fsdp("fsdp", "each", False, 1, 4, TINY)
    assert exp.per_step == {
        "all_gather": (ROOT_4 + 2 * BLOCK) * 4,
        "reduce_scatter": (ROOT_4 + 2 * BLOCK) * 4,
    }


@pytest.mark.parametrize(
    ("flavour", "non_final_ops", "all_reduces"),
    [
        ("each", {"all_gather", "reduce_scatter", "all_reduce"}, 4),
        ("last", {"all_gather"}, 1),
        ("replicate_last", {"all_gather", "reduce_scatter"}, 1),
    ],
)
def test_hsdp_flavours(flavour, non_final_ops, all_reduces):
    exp = expected_fsdp("hsdp", flavour, True, 4, 4, TINY, shard_size=2)
    reduced = (ROOT_2 + 2 * BLOCK) * 4
    assert set(exp.non_final) == non_final_ops
    assert exp.per_step["all_reduce"] == all_reduces * reduced // 2  # the shard, replicated
    scatters = 1 if flavour == "last" else 4
    assert exp.per_step["reduce_scatter"] == scatters * reduced
    assert exp.group_size == {"all_gather": 2, "reduce_scatter": 2, "all_reduce": 2}


def test_wire_bytes_use_each_ops_own_group():
    """hsdp on 4 ranks, shard 2: every op runs on a group of 2, so each moves half its
    message, not the world's 3/4 (all-gather, reduce-scatter) or 3/2 (all-reduce)."""
    exp = expected_fsdp("hsdp", "each", True, 1, 4, TINY, shard_size=2)
    assert exp.wire_bytes_per_step == sum(b // 2 for op, b in exp.per_step.items()) + (
        exp.per_step["all_reduce"] // 2
    )
    # one node holding every rank (shard = world): the replicate group is one rank, no wire
    solo = expected_fsdp("hsdp", "each", True, 1, 2, TINY, shard_size=2)
    assert solo.group_size["all_reduce"] == 1
    fsdp = expected_fsdp("fsdp", "each", True, 1, 2, TINY)
    assert solo.wire_bytes_per_step == fsdp.wire_bytes_per_step


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"strategy": "zero3"}, "strategy"),
        ({"grad_sync": "replicate_last"}, "grad_sync"),
        ({"grad_accum": 0}, "grad_accum"),
        ({"world_size": 1}, "world_size"),
        ({"shard_size": 2, "world_size": 4}, "hsdp_shard_size"),
        ({"strategy": "hsdp", "shard_size": 3, "world_size": 4}, "hsdp_shard_size"),
        ({"strategy": "hsdp", "shard_size": None}, "hsdp_shard_size"),
        ({"precision": "fp16"}, "precision"),
    ],
)
def test_bad_arguments_name_their_field(kwargs, field):
    args = {
        "strategy": "fsdp",
        "grad_sync": "each",
        "reshard_after_forward": True,
        "grad_accum": 1,
        "world_size": 2,
        "model": TINY,
    } | kwargs
    with pytest.raises(ValueError, match=field):
        expected_fsdp(**args)


def test_sizes_follow_the_model_name():
    assert gpt2_sharded_by_name("gpt2") == gpt2_sharded(12, 768)
    with pytest.raises(ValueError, match="model"):
        gpt2_sharded_by_name("llama")
