"""Unit tests for orchestrator.sweep.ds_config: what each layer writes, as exact dicts.

That the generated configs equal DeepSpeed's own defaults except the variant's keys is checked
against DeepSpeed's config models in ``test_ds_defaults.py``.
"""

from __future__ import annotations

import pytest

from orchestrator.sweep.ds_config import (
    DDP_DEFAULT_BUCKET_MB,
    PRESETS,
    ZeroVariant,
    block_conflicts,
    bucket_elements,
    deep_merge,
    deepspeed_config,
    default_bucket_mb,
)

HARNESS = {"zero_allow_untested_optimizer": True, "steps_per_print": 10**9}


def test_zero1_fp32_no_offload_writes_only_the_variant():
    cfg = deepspeed_config(ZeroVariant("zero1", 4, 2, 8, "fp32", "none", None, None))
    assert cfg == {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 4,
        "train_batch_size": 64,
        "zero_optimization": {"stage": 1},
        **HARNESS,
    }


def test_zero2_bf16_cpu_offload_and_given_buckets():
    cfg = deepspeed_config(ZeroVariant("zero2", 1, 2, 2, "bf16", "cpu", 25, None))
    assert cfg == {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "train_batch_size": 4,
        "zero_optimization": {
            "stage": 2,
            # 25 MiB of bf16 = 13,107,200 elements (26,214,400 bytes, DDP's bucket_cap_mb 25)
            "reduce_bucket_size": 13_107_200,
            "allgather_bucket_size": 13_107_200,
            "offload_optimizer": {"device": "cpu"},
        },
        "bf16": {"enabled": True},
        **HARNESS,
    }


def test_zero3_nvme_offloads_optimizer_and_parameters():
    zero = deepspeed_config(ZeroVariant("zero3", 1, 1, 2, "fp32", "nvme", None, "/nvme/r1"))[
        "zero_optimization"
    ]
    assert zero == {
        "stage": 3,
        "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme/r1"},
        "offload_param": {"device": "nvme", "nvme_path": "/nvme/r1"},
    }


@pytest.mark.parametrize("axis,expected", [("default", None), ("true", True), ("false", False)])
def test_overlap_axis(axis, expected):
    zero = deepspeed_config(
        ZeroVariant("zero2", 1, 1, 2, "fp32", "none", None, None, overlap_comm=axis)
    )
    assert zero["zero_optimization"].get("overlap_comm") == expected
    assert ("overlap_comm" in zero["zero_optimization"]) == (axis != "default")


def test_user_block_is_deep_merged_and_the_variant_wins():
    user = {"zero_optimization": {"reduce_bucket_size": 1000, "stage": 1}, "gradient_clipping": 1}
    cfg = deepspeed_config(ZeroVariant("zero3", 2, 1, 2, "fp32", "none", None, None), user=user)
    assert cfg["zero_optimization"] == {"stage": 3, "reduce_bucket_size": 1000}
    assert cfg["gradient_clipping"] == 1
    assert user == {
        "zero_optimization": {"reduce_bucket_size": 1000, "stage": 1},
        "gradient_clipping": 1,
    }  # the caller's block is not changed


def test_serialized_preset_pins_the_former_study_config():
    cfg = deepspeed_config(
        ZeroVariant("zero3", 1, 1, 2, "fp32", "none", None, None), preset="serialized"
    )
    z = cfg["zero_optimization"]
    elements = bucket_elements(DDP_DEFAULT_BUCKET_MB, "fp32")
    assert z["overlap_comm"] is False
    assert z["stage3_param_persistence_threshold"] == 0 and z["stage3_max_reuse_distance"] == 0
    assert z["reduce_bucket_size"] == z["allgather_bucket_size"] == elements
    assert z["stage3_prefetch_bucket_size"] == elements
    # the overlap axis is the variant: it wins over the preset
    on = deepspeed_config(
        ZeroVariant("zero1", 1, 1, 2, "fp32", "none", 50, None, overlap_comm="true"),
        preset="serialized",
    )["zero_optimization"]
    assert on["overlap_comm"] is True and on["reduce_bucket_size"] == bucket_elements(50, "fp32")
    assert "stage3_prefetch_bucket_size" not in on
    assert set(PRESETS) == {"serialized"}


def test_default_bucket_mb_per_framework():
    assert default_bucket_mb("ddp", "fp32") == 25
    assert default_bucket_mb("zero2", "fp32") == 1907  # 5e8 fp32 elements = 1907.3 MiB
    assert default_bucket_mb("zero2", "bf16") == 954  # 953.7 MiB
    block = {"zero_optimization": {"reduce_bucket_size": 1_000_000}}
    assert default_bucket_mb("zero3", "fp32", block) == 4  # 3.8 MiB
    assert default_bucket_mb("zero3", "fp32", None, "serialized") == 25
    bad = {"zero_optimization": {"reduce_bucket_size": "abc"}}
    assert default_bucket_mb("zero3", "fp32", bad) == 1907  # ds_check refuses the block


def test_block_conflicts_name_both_sides():
    block = {
        "zero_optimization": {"stage": 2, "overlap_comm": True, "reduce_bucket_size": 5},
        "train_micro_batch_size_per_gpu": 4,
        "bf16": {"enabled": True},
        "optimizer": {"type": "Adam"},
    }
    lines = block_conflicts(block, overlap_axis=False, bucket_axis=False)
    text = "\n".join(lines)
    assert "deepspeed.zero_optimization.stage: set by the variant (grid.strategy)" in text
    assert "deepspeed.train_micro_batch_size_per_gpu: set by the variant (micro_batch_size)" in text
    assert "deepspeed.bf16: set by the variant (precision)" in text
    assert "deepspeed.optimizer: controlled by linksweep" in text
    assert "overlap_comm" not in text and "reduce_bucket_size" not in text  # axes at default
    lines = block_conflicts(block, overlap_axis=True, bucket_axis=True)
    text = "\n".join(lines)
    assert "deepspeed.zero_optimization.overlap_comm: also set by grid.overlap_comm" in text
    assert "deepspeed.zero_optimization.reduce_bucket_size: also set by grid.bucket_mb" in text
    assert block_conflicts({"zero_optimization": {"reduce_bucket_size": 5}}, False, False) == []
    assert block_conflicts(None, True, True) == []


def test_deep_merge():
    a = {"x": {"y": 1, "z": 2}, "w": [1]}
    out = deep_merge(a, {"x": {"y": 3}, "w": [2], "v": 0})
    assert out == {"x": {"y": 3, "z": 2}, "w": [2], "v": 0}
    assert a == {"x": {"y": 1, "z": 2}, "w": [1]}


def test_returns_fresh_dicts():
    a = deepspeed_config(ZeroVariant("zero3", 1, 1, 2, "fp32", "nvme", 25, "/x"))
    a["zero_optimization"]["offload_param"]["nvme_path"] = "/y"
    b = deepspeed_config(ZeroVariant("zero3", 1, 1, 2, "fp32", "nvme", 25, "/x"))
    assert b["zero_optimization"]["offload_param"]["nvme_path"] == "/x"


@pytest.mark.parametrize("strategy", ["zero1", "zero2"])
def test_nvme_needs_zero3(strategy):
    with pytest.raises(ValueError, match=f"strategy='{strategy}'.*offload='nvme'"):
        deepspeed_config(ZeroVariant(strategy, 1, 1, 2, "fp32", "nvme", 25, "/nvme"))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"strategy": "ddp"}, "strategy='ddp'"),
        ({"precision": "fp16"}, "precision='fp16'"),
        ({"offload": "disk"}, "offload='disk'"),
        ({"offload": "nvme", "nvme_path": None}, "nvme_path"),
        ({"grad_accum": 0}, "grad_accum"),
        ({"micro_batch_size": -1}, "micro_batch_size"),
        ({"world_size": 0}, "world_size"),
        ({"bucket_mb": 0}, "bucket_mb"),
        ({"overlap_comm": "maybe"}, "overlap_comm='maybe'"),
        ({"preset": "fast"}, "deepspeed_preset='fast'"),
    ],
)
def test_invalid_combinations(kwargs, match):
    args = {
        "strategy": "zero3",
        "grad_accum": 1,
        "micro_batch_size": 1,
        "world_size": 2,
        "precision": "fp32",
        "offload": "none",
        "bucket_mb": 25,
        "nvme_path": None,
    }
    args.update(kwargs)
    preset = args.pop("preset", None)
    with pytest.raises(ValueError, match=match):
        deepspeed_config(ZeroVariant(**args), preset=preset)


def test_bucket_elements():
    assert bucket_elements(1, "fp32") == 262_144  # 1 MiB = 2**20 bytes, as DDP's bucket_cap_mb
    assert bucket_elements(1, "bf16") == 524_288
    assert bucket_elements(500, "fp32") == 131_072_000
