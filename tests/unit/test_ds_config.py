"""Unit tests for orchestrator.ds_config: exact dicts for representative variants.

Each of these configs was also run for real (DeepSpeed 0.19.8, torch 2.13 CPU, gloo, tiny gpt2,
world sizes 1 and 2): zero1/2/3 x offload none/cpu x fp32/bf16, and zero3 + nvme.
"""

from __future__ import annotations

import pytest

from orchestrator.ds_config import bucket_elements, deepspeed_config

COMMON = {
    "zero_allow_untested_optimizer": True,
    "steps_per_print": 10**9,
    "wall_clock_breakdown": False,
}

ZERO_COMMON = {
    "overlap_comm": False,
    "contiguous_gradients": True,
    "reduce_scatter": True,
    "allgather_partitions": True,
}


def test_zero1_fp32_no_offload():
    cfg = deepspeed_config(
        strategy="zero1",
        grad_accum=4,
        micro_batch_size=2,
        world_size=8,
        precision="fp32",
        offload="none",
        bucket_mb=25,
        nvme_path=None,
    )
    assert cfg == {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 4,
        "train_batch_size": 64,
        "zero_optimization": {
            "stage": 1,
            # 25 MB of fp32 = 6.25 M elements
            "reduce_bucket_size": 6_250_000,
            "allgather_bucket_size": 6_250_000,
            **ZERO_COMMON,
        },
        **COMMON,
    }


def test_zero2_bf16_cpu_offload():
    cfg = deepspeed_config("zero2", 1, 4, 2, "bf16", "cpu", 25, None)
    assert cfg == {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "train_batch_size": 8,
        "zero_optimization": {
            "stage": 2,
            # 25 MB of bf16 = 12.5 M elements
            "reduce_bucket_size": 12_500_000,
            "allgather_bucket_size": 12_500_000,
            **ZERO_COMMON,
            "offload_optimizer": {"device": "cpu"},
        },
        **COMMON,
        "zero_force_ds_cpu_optimizer": False,
        "bf16": {"enabled": True},
    }


def test_zero3_nvme_with_comms_logger():
    cfg = deepspeed_config("zero3", 2, 1, 4, "fp32", "nvme", 10, "/local_nvme", comms_logger=True)
    assert cfg == {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 2,
        "train_batch_size": 8,
        "zero_optimization": {
            "stage": 3,
            "reduce_bucket_size": 2_500_000,
            "allgather_bucket_size": 2_500_000,
            **ZERO_COMMON,
            "stage3_prefetch_bucket_size": 2_500_000,
            "stage3_param_persistence_threshold": 0,
            "stage3_max_reuse_distance": 0,
            "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme"},
            "offload_param": {"device": "nvme", "nvme_path": "/local_nvme"},
        },
        **COMMON,
        "zero_force_ds_cpu_optimizer": False,
        "aio": {
            "block_size": 1048576,
            "queue_depth": 8,
            "intra_op_parallelism": 1,
            "single_submit": False,
            "overlap_events": True,
            "use_gds": False,
        },
        "comms_logger": {"enabled": True, "prof_all": True, "verbose": False, "debug": False},
    }


def test_zero3_cpu_offload_moves_optimizer_only():
    cfg = deepspeed_config("zero3", 1, 1, 2, "bf16", "cpu", 25, None)
    zero = cfg["zero_optimization"]
    assert zero["offload_optimizer"] == {"device": "cpu"}
    assert "offload_param" not in zero
    assert "aio" not in cfg


def test_no_logger_and_no_precision_block_by_default():
    cfg = deepspeed_config("zero2", 1, 1, 1, "fp32", "none", 25, None)
    assert "comms_logger" not in cfg
    assert "bf16" not in cfg and "fp16" not in cfg
    assert "zero_force_ds_cpu_optimizer" not in cfg


def test_returns_fresh_dicts():
    a = deepspeed_config("zero3", 1, 1, 2, "fp32", "nvme", 25, "/x")
    a["aio"]["queue_depth"] = 99
    b = deepspeed_config("zero3", 1, 1, 2, "fp32", "nvme", 25, "/x")
    assert b["aio"]["queue_depth"] == 8


@pytest.mark.parametrize("strategy", ["zero1", "zero2"])
def test_nvme_needs_zero3(strategy):
    with pytest.raises(ValueError, match=f"strategy='{strategy}'.*offload='nvme'"):
        deepspeed_config(strategy, 1, 1, 2, "fp32", "nvme", 25, "/nvme")


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
    with pytest.raises(ValueError, match=match):
        deepspeed_config(**args)


def test_bucket_elements():
    assert bucket_elements(1, "fp32") == 250_000
    assert bucket_elements(1, "bf16") == 500_000
    assert bucket_elements(500, "fp32") == 125_000_000
