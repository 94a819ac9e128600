"""The generated DeepSpeed configs against DeepSpeed's own config models (deepspeed 0.19.8):
a ZeRO run gets DeepSpeed's defaults for everything its variant does not set, the overlap axis
maps onto DeepSpeed's rule, and bad ``deepspeed:`` blocks are refused with DeepSpeed's words.

Pure (no Ray, no process group): ``DeepSpeedConfig`` parses a dict on its own. Importing
deepspeed costs a few seconds, once.
"""

from __future__ import annotations

import pytest

deepspeed_config_mod = pytest.importorskip("deepspeed.runtime.config")

from deepspeed.runtime.config import DeepSpeedConfig  # noqa: E402
from deepspeed.runtime.zero.config import DeepSpeedZeroConfig  # noqa: E402

from orchestrator import cli  # noqa: E402
from orchestrator.sweep.ds_check import check_deepspeed, parse_errors  # noqa: E402
from orchestrator.sweep.ds_config import (  # noqa: E402
    DDP_DEFAULT_BUCKET_MB,
    DS_DEFAULT_BUCKET_ELEMENTS,
    ZeroVariant,
    deepspeed_config,
)
from orchestrator.sweep.spec import parse_spec  # noqa: E402
from workloads.ds_effective import effective_config  # noqa: E402

# What a variant sets, as DeepSpeedConfig attributes, and the harness keys (ds_config.py).
VARIANT_ATTRS = {
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "zero_config",
    "zero_optimization_stage",
    "zero_enabled",
    "bfloat16_config",
    "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer",
    "steps_per_print",
    "_param_dict",
}
VARIANT_ZERO_KEYS = {"stage", "offload_optimizer", "offload_param"}


def _plain(value, depth=0):
    """A comparable form of a parsed config attribute (pydantic models, config objects)."""
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if hasattr(value, "__dict__") and depth < 3:
        return {k: _plain(v, depth + 1) for k, v in vars(value).items()}
    return value


def _parsed(config: dict) -> DeepSpeedConfig:
    return DeepSpeedConfig(config)  # no process group: world size 1


VARIANTS = [
    (strategy, precision, offload)
    for strategy in ("zero1", "zero2", "zero3")
    for precision in ("fp32", "bf16")
    for offload in ("none", "cpu", "nvme")
    if offload != "nvme" or strategy == "zero3"
]


@pytest.mark.parametrize("strategy,precision,offload", VARIANTS)
def test_generated_config_is_deepspeeds_defaults_except_the_variant(strategy, precision, offload):
    ga, mb = 4, 2
    ours = _parsed(
        deepspeed_config(ZeroVariant(strategy, ga, mb, 1, precision, offload, None, "/nvme/r1"))
    )  # world size 1 so DeepSpeed's batch identity holds on a driver without a process group
    reference = _parsed({"train_micro_batch_size_per_gpu": mb, "gradient_accumulation_steps": ga})

    ours_attrs = {k: _plain(v) for k, v in vars(ours).items() if k not in VARIANT_ATTRS}
    ref_attrs = {k: _plain(v) for k, v in vars(reference).items() if k not in VARIANT_ATTRS}
    assert ours_attrs == ref_attrs

    stage = int(strategy[-1])
    zero = ours.zero_config.model_dump()
    default_zero = DeepSpeedZeroConfig(stage=stage).model_dump()
    differ = {k for k in default_zero if zero[k] != default_zero[k]}
    assert differ <= VARIANT_ZERO_KEYS
    assert (zero["offload_optimizer"] is not None) == (offload != "none")
    # DeepSpeed's rule, left alone: overlap for stage 3 only
    assert ours.zero_config.overlap_comm is (stage == 3)
    assert ours.bfloat16_config.enabled is (precision == "bf16")


@pytest.mark.parametrize("strategy", ["zero1", "zero2", "zero3"])
@pytest.mark.parametrize("axis", ["default", "true", "false"])
def test_overlap_axis_maps_onto_deepspeed(strategy, axis):
    cfg = deepspeed_config(
        ZeroVariant(strategy, 1, 1, 1, "fp32", "none", None, None, overlap_comm=axis)
    )
    parsed = _parsed(cfg).zero_config.overlap_comm
    expected = {"true": True, "false": False, "default": strategy == "zero3"}[axis]
    assert parsed is expected


def test_default_constants_are_the_frameworks_own():
    from torch.nn.parallel import distributed

    from workloads.strategies import DDP_DEFAULT_BUCKET_MIB

    zero = DeepSpeedZeroConfig()
    assert zero.reduce_bucket_size == zero.allgather_bucket_size == DS_DEFAULT_BUCKET_ELEMENTS
    assert distributed._DEFAULT_BUCKET_CAP_MB == DDP_DEFAULT_BUCKET_MB == DDP_DEFAULT_BUCKET_MIB


def test_effective_config_shows_defaults_and_the_users_bucket():
    user = {"zero_optimization": {"reduce_bucket_size": 123456}}
    parsed = _parsed(
        deepspeed_config(ZeroVariant("zero3", 1, 1, 1, "bf16", "none", None, None), user=user)
    )
    eff = effective_config(parsed)
    z = eff["zero_optimization"]
    assert z["reduce_bucket_size"] == 123456
    assert z["overlap_comm"] is True  # stage 3's default, resolved by DeepSpeed
    assert z["stage3_param_persistence_threshold"] == 100000  # by DeepSpeed's JSON key
    assert eff["bf16"]["enabled"] is True and eff["train_micro_batch_size_per_gpu"] == 1


def _spec(block=None, **grid):
    data = {"name": "x", "grid": {"strategy": ["ddp", "zero3"], **grid}}
    if block is not None:
        data["deepspeed"] = block
    return parse_spec(data)


@pytest.mark.parametrize(
    "block,grid,key,says",
    [
        ({"zero_optimizaton": {"stage": 3}}, {}, "deepspeed.zero_optimizaton", "not a DeepSpeed"),
        (
            {"zero_optimization": {"reduce_bucket_size": "big"}},
            {},
            "deepspeed.zero_optimization.reduce_bucket_size",
            "valid integer",
        ),
        (
            {"zero_optimization": {"overlap_com": True}},
            {},
            "deepspeed.zero_optimization.overlap_com",
            "Extra inputs are not permitted",
        ),
        (
            {"zero_optimization": {"stage": 2}},
            {},
            "deepspeed.zero_optimization.stage",
            "grid.strategy",
        ),
        ({"gradient_accumulation_steps": 4}, {}, "deepspeed.gradient_accumulation_steps", "grad"),
        (
            {"zero_optimization": {"overlap_comm": False}},
            {"overlap_comm": ["default", "true"]},
            "deepspeed.zero_optimization.overlap_comm",
            "grid.overlap_comm",
        ),
    ],
)
def test_bad_blocks_are_refused_naming_the_key(block, grid, key, says):
    problems = check_deepspeed(_spec(block, **grid))
    assert problems and any(p.startswith(key) and says in p for p in problems), problems


def test_good_block_passes_and_ddp_only_sweeps_are_not_checked():
    assert check_deepspeed(_spec({"zero_optimization": {"reduce_bucket_size": 1000}})) == []
    assert check_deepspeed(parse_spec({"name": "x"})) == []
    assert parse_errors({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 1.0}) == []


def test_cli_refuses_a_bad_block_before_anything_and_writes_nothing(tmp_path, capsys):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(
        "name: bad\ngrid: {strategy: [zero2]}\n"
        "deepspeed:\n  zero_optimization: {reduce_bucket_size: lots}\n  bogus_key: 1\n"
    )
    db = tmp_path / "r.duckdb"
    assert cli.main(["run", str(sweep), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "deepspeed.zero_optimization.reduce_bucket_size" in err and "valid integer" in err
    assert "deepspeed.bogus_key: not a DeepSpeed config key" in err
    assert "Traceback" not in err
    assert not db.exists()


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("bucket_mb", [1, 25, 50])
def test_one_bucket_mb_is_one_byte_count_in_ddp_and_zero(bucket_mb, precision):
    """A grid's ``bucket_mb`` caps DDP's bucket and ZeRO's reduce/all-gather buckets at the
    same bytes: DDP's own arithmetic (``bucket_cap_mb`` in MiB) against the elements linksweep
    writes for DeepSpeed times the bytes of each element of the bucket's dtype."""
    from torch.nn.parallel.distributed import _BucketCapacityConfig

    from orchestrator.sweep.ds_config import BYTES_PER_ELEMENT

    ddp_bytes = _BucketCapacityConfig.create(bucket_mb, None, False).bucket_bytes_cap
    zero = deepspeed_config(ZeroVariant("zero2", 1, 1, 2, precision, "none", bucket_mb, None))
    zero_bytes = zero["zero_optimization"]["reduce_bucket_size"] * BYTES_PER_ELEMENT[precision]
    assert zero_bytes == ddp_bytes
    assert zero["zero_optimization"]["allgather_bucket_size"] * BYTES_PER_ELEMENT[precision] == (
        ddp_bytes
    )


def test_deepspeed_is_told_the_cpu_accelerator_it_would_pick_so_it_says_nothing():
    """Without CUDA, DeepSpeed picks CPU itself but prints a [WARNING] line on stdout in the middle
    of a sweep's output; the driver names that choice first. A choice made is kept, and where
    torch sees CUDA nothing is set (DeepSpeed picks cuda, as before)."""
    from orchestrator.sweep.ds_check import accelerator_env

    assert accelerator_env({}, cuda_available=False) == {"DS_ACCELERATOR": "cpu"}
    assert accelerator_env({}, cuda_available=True) == {}
    assert accelerator_env({"DS_ACCELERATOR": "cuda"}, cuda_available=False) == {}
