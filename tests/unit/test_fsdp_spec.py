"""FSDP2 strategies and the sync-frequency axes in the sweep file and the plan: what expands
where, what each run is given, and every refusal (naming the field and what is allowed) before
anything runs."""

from __future__ import annotations

import pytest

from orchestrator.cli import main
from orchestrator.sweep.planner import Variant, expand_grid, hsdp_shard_size, run_config
from orchestrator.sweep.spec import SpecError, parse_spec


def spec_of(grid: dict, **top):
    return parse_spec({"name": "t", "grid": grid, **top})


def errors_of(grid: dict, **top) -> str:
    with pytest.raises(SpecError) as exc:
        spec_of(grid, **top)
    return str(exc.value)


def test_fsdp_and_hsdp_are_strategies_with_their_defaults():
    spec = spec_of({"strategy": ["ddp", "zero2", "fsdp", "hsdp"]}, world_size=4)
    got = {v.strategy: (v.grad_sync, v.reshard_after_forward) for v in expand_grid(spec)}
    assert got == {
        "ddp": ("last", "n/a"),
        "zero2": ("n/a", "n/a"),
        "fsdp": ("each", "true"),
        "hsdp": ("each", "true"),
    }


def test_reshard_axis_expands_the_fsdp2_variants_alone():
    spec = spec_of({"strategy": ["ddp", "zero3", "fsdp"], "reshard_after_forward": [True, False]})
    variants = expand_grid(spec)
    assert [(v.strategy, v.reshard_after_forward) for v in variants] == [
        ("ddp", "n/a"),
        ("zero3", "n/a"),
        ("fsdp", "true"),
        ("fsdp", "false"),
    ]
    cfgs = {v.reshard_after_forward: run_config(spec, v, "r") for v in variants[2:]}
    assert cfgs["true"].reshard_after_forward is True
    assert cfgs["false"].reshard_after_forward is False
    assert all(c.ds_config is None and c.bucket_mb is None for c in cfgs.values())


def test_grad_sync_expands_the_strategies_offering_each_flavour():
    spec = spec_of(
        {
            "strategy": ["ddp", "zero1", "fsdp", "hsdp"],
            "grad_sync": ["each", "last", "replicate_last"],
        },
        world_size=4,
    )
    got = sorted((v.strategy, v.grad_sync) for v in expand_grid(spec))
    assert got == [
        ("ddp", "each"),
        ("ddp", "last"),
        ("fsdp", "each"),
        ("fsdp", "last"),
        ("hsdp", "each"),
        ("hsdp", "last"),
        ("hsdp", "replicate_last"),
        ("zero1", "n/a"),
    ]
    by = {(v.strategy, v.grad_sync): v for v in expand_grid(spec)}
    assert run_config(spec, by[("ddp", "each")], "r").grad_sync == "each"
    assert run_config(spec, by[("zero1", "n/a")], "r").grad_sync is None
    assert "sync=replicate_last" in by[("hsdp", "replicate_last")].label


def test_variant_built_by_hand_carries_n_a_and_defaults():
    assert Variant("zero3", 1, "a", "pack").grad_sync == "n/a"
    assert Variant("ddp", 1, "a", "pack").grad_sync == "last"
    assert Variant("fsdp", 1, "a", "pack").grad_sync == "each"
    assert Variant("ddp", 1, "a", "pack").reshard_after_forward == "n/a"
    v = Variant("fsdp", 1, "a", "pack", reshard_after_forward=False)
    assert v.reshard_after_forward == "false"


def test_hsdp_shard_size_resolved_before_the_run():
    spec = spec_of({"strategy": ["hsdp", "fsdp"], "placement": ["pack"]}, world_size=4)
    sizes = {(v.strategy, v.placement): hsdp_shard_size(spec, v) for v in expand_grid(spec)}
    assert sizes == {
        ("hsdp", "pack"): 4,  # one node holds every rank: one shard group
        ("fsdp", "pack"): None,
    }
    given = spec_of({"strategy": ["hsdp"]}, world_size=4, hsdp_shard_size=2)
    (v,) = expand_grid(given)
    assert run_config(given, v, "r").hsdp_shard_size == 2


def test_hsdp_spread_with_a_shard_size_keeps_it():
    spec = spec_of(
        {"strategy": ["hsdp", "fsdp"], "placement": ["pack", "spread"]},
        world_size=4,
        hsdp_shard_size=2,
    )
    sizes = {(v.strategy, v.placement): hsdp_shard_size(spec, v) for v in expand_grid(spec)}
    assert sizes == {
        ("hsdp", "pack"): 2,
        ("hsdp", "spread"): 2,  # shard groups across nodes, as the user asked
        ("fsdp", "pack"): None,
        ("fsdp", "spread"): None,
    }


@pytest.mark.parametrize("placement", [["spread"], ["pack", "spread"]])
def test_hsdp_spread_without_a_shard_size_is_refused(placement):
    """Spread puts one rank on each node, so the default shard group (the ranks of one node)
    would be one rank: nothing sharded. Refused, naming the field and what is allowed."""
    msg = errors_of({"strategy": ["hsdp"], "placement": placement}, world_size=4)
    assert "hsdp_shard_size: required for strategy hsdp with grid.placement 'spread'" in msg
    assert "allowed: hsdp_shard_size set (with world_size 4: [1, 2, 4])" in msg
    assert "grid.placement 'pack' alone" in msg


def test_fsdp_spread_needs_no_shard_size():
    spec = spec_of({"strategy": ["fsdp"], "placement": ["spread"]}, world_size=2)
    assert [v.placement for v in expand_grid(spec)] == ["spread"]


def test_planner_never_plans_an_hsdp_group_of_one_rank_by_default():
    """A variant built by hand, spread, with no size anywhere: the planner raises, it does not
    resolve the default to one rank."""
    spec = spec_of({"strategy": ["hsdp"]}, world_size=4)
    with pytest.raises(ValueError, match="hsdp_shard_size: required for hsdp placed 'spread'"):
        hsdp_shard_size(spec, Variant("hsdp", 1, "default", "spread"))


def test_world_size_must_divide_by_the_shard_size():
    msg = errors_of({"strategy": ["hsdp"]}, world_size=4, hsdp_shard_size=3)
    assert "hsdp_shard_size" in msg and "world_size=4" in msg and "[1, 2, 4]" in msg


def test_hsdp_shard_size_needs_hsdp():
    msg = errors_of({"strategy": ["fsdp"]}, hsdp_shard_size=2)
    assert "hsdp_shard_size: applies to hsdp only" in msg


def test_reshard_after_forward_needs_an_fsdp2_strategy():
    msg = errors_of({"strategy": ["ddp", "zero3"], "reshard_after_forward": [False]})
    assert "grid.reshard_after_forward" in msg and "FSDP2 only (fsdp, hsdp)" in msg


def test_grad_sync_for_zero_alone_is_refused():
    msg = errors_of({"strategy": ["zero1", "zero3"], "grad_sync": ["last"]})
    assert "grid.grad_sync" in msg and "DeepSpeed" in msg


def test_replicate_last_needs_hsdp():
    msg = errors_of({"strategy": ["ddp", "fsdp"], "grad_sync": ["replicate_last"]})
    assert "grid.grad_sync" in msg and "'replicate_last'" in msg
    assert "'fsdp': ['each', 'last']" in msg and "'ddp': ['each', 'last']" in msg


def test_bad_grad_sync_value_names_the_allowed_ones():
    msg = errors_of({"strategy": ["fsdp"], "grad_sync": ["sometimes"]})
    assert "grid.grad_sync.0" in msg and "'each'" in msg and "'replicate_last'" in msg


@pytest.mark.parametrize(
    ("grid", "top", "field", "allowed"),
    [
        (
            {"offload": ["none", "nvme"], "strategy": ["zero3", "fsdp"]},
            {},
            "grid.offload",
            "none, cpu",
        ),
        ({"bucket_mb": [50]}, {}, "grid.bucket_mb", "default"),
        ({"overlap_comm": ["false"]}, {}, "grid.overlap_comm", "default"),
        ({}, {"ranks_per_gpu": 2}, "ranks_per_gpu", "1"),
    ],
)
@pytest.mark.parametrize("strategy", ["fsdp", "hsdp"])
def test_fsdp2_refusals_name_the_field_and_why(grid, top, field, allowed, strategy):
    grid = {"strategy": [strategy], **grid}
    if "zero3" in grid["strategy"]:
        grid["strategy"] = ["zero3", strategy]
    msg = errors_of(grid, **top)
    assert f"{field}:" in msg and "refused for the FSDP2 strategies" in msg
    assert f"allowed with fsdp/hsdp: {allowed}" in msg


def test_offload_cpu_applies_to_fsdp():
    spec = spec_of({"strategy": ["ddp", "fsdp"], "offload": ["none", "cpu"]})
    assert sorted((v.strategy, v.offload) for v in expand_grid(spec)) == [
        ("ddp", "none"),
        ("fsdp", "cpu"),
        ("fsdp", "none"),
    ]


def test_cli_refuses_before_anything_runs(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nworld_size: 4\nhsdp_shard_size: 3\ngrid: {strategy: [hsdp]}\n")
    db = tmp_path / "r.duckdb"
    assert main(["run", str(bad), "--db", str(db)]) == 2
    assert "hsdp_shard_size" in capsys.readouterr().err
    assert not db.exists()


def test_cli_refuses_hsdp_spread_without_a_shard_size(tmp_path, capsys):
    bad = tmp_path / "spread.yaml"
    bad.write_text("name: x\nworld_size: 2\ngrid: {strategy: [hsdp], placement: [spread]}\n")
    db = tmp_path / "r.duckdb"
    assert main(["run", str(bad), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "hsdp_shard_size: required" in err and "[1, 2]" in err and "'pack'" in err
    assert not db.exists()
