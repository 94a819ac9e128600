"""``ranks_per_node``: spread with several ranks on each node (HSDP's replicate dimension across
nodes, its shard groups inside them). The spec's refusals, hsdp's default shard group, the
placement group a run asks for (one bundle per node's ranks, rank r in bundle r // k), the
capacity check, the stored column and the v9 -> v10 migration."""

from __future__ import annotations

import pytest

from orchestrator.store import Store
from orchestrator.sweep.planner import (
    NodeCapacity,
    check_capacity,
    expand_grid,
    hsdp_shard_size,
    plan_sweep,
)
from orchestrator.sweep.rows import ranks_per_node
from orchestrator.sweep.spec import SpecError, parse_spec
from tests.unit.schema_downgrade import as_version


def spec_of(grid: dict, **top):
    return parse_spec({"name": "t", "links": {"default": {}}, "grid": grid, **top})


def refusal(grid: dict, **top) -> str:
    with pytest.raises(SpecError) as exc:
        spec_of(grid, **top)
    return str(exc.value)


def test_hsdp_spread_two_ranks_a_node_shards_inside_each_node():
    spec = spec_of(
        {"strategy": ["hsdp", "ddp"], "placement": ["spread", "pack"]},
        world_size=4,
        ranks_per_node=2,
    )
    sizes = {(v.strategy, v.placement): hsdp_shard_size(spec, v) for v in expand_grid(spec)}
    assert sizes == {
        ("hsdp", "spread"): 2,  # the ranks of one node: replicate crosses the network
        ("hsdp", "pack"): 4,
        ("ddp", "spread"): None,
        ("ddp", "pack"): None,
    }


def test_an_explicit_shard_size_wins_over_the_nodes_ranks():
    spec = spec_of(
        {"strategy": ["hsdp"], "placement": ["spread"]},
        world_size=8,
        ranks_per_node=4,
        hsdp_shard_size=2,
    )
    assert [hsdp_shard_size(spec, v) for v in expand_grid(spec)] == [2]


@pytest.mark.parametrize(
    ("world_size", "k", "allowed"),
    [(4, 3, "[2]"), (4, 4, "[2]"), (6, 5, "[2, 3]"), (5, 2, "none (world_size is prime)")],
)
def test_ranks_per_node_must_split_the_ranks_over_two_nodes_or_more(world_size, k, allowed):
    msg = refusal({"placement": ["spread"]}, world_size=world_size, ranks_per_node=k)
    assert f"ranks_per_node: {k} with world_size {world_size}" in msg
    assert f"allowed with world_size {world_size}: {allowed}" in msg


def test_ranks_per_node_needs_spread():
    msg = refusal({"placement": ["pack"]}, world_size=4, ranks_per_node=2)
    assert "ranks_per_node: applies to grid.placement 'spread'" in msg
    assert "add spread, or remove ranks_per_node" in msg


def test_ranks_per_node_of_one_is_refused_by_its_bound():
    msg = refusal({"placement": ["spread"]}, world_size=4, ranks_per_node=1)
    assert "ranks_per_node" in msg


def test_a_spread_run_asks_one_bundle_per_node_holding_its_ranks():
    spec = spec_of(
        {"strategy": ["hsdp"], "placement": ["spread", "pack"]}, world_size=4, ranks_per_node=2
    )
    plan = plan_sweep(spec, {"CPU": 1.0})
    by_placement = {r.launch.placement: r.launch for r in plan.runs}
    spread, pack = by_placement["spread"], by_placement["pack"]
    assert spread.ranks_per_bundle == 2
    assert spread.bundles == [{"CPU": 2.0}, {"CPU": 2.0}]
    assert [r // spread.ranks_per_bundle for r in range(4)] == [0, 0, 1, 1]
    assert pack.ranks_per_bundle == 1 and pack.bundles == [{"CPU": 1.0}] * 4
    assert ranks_per_node(spec, "spread") == 2 and ranks_per_node(spec, "pack") == 4


def test_a_gpu_bundle_holds_each_ranks_gpu_and_cpus():
    spec = spec_of({"placement": ["spread"]}, world_size=8, ranks_per_node=4)
    (run, *_) = plan_sweep(spec, {"GPU": 1.0, "CPU": 2.0}).runs
    assert run.launch.bundles == [{"GPU": 4.0, "CPU": 8.0}] * 2


def test_capacity_counts_nodes_that_hold_ranks_per_node_ranks():
    spec = spec_of({"placement": ["spread"]}, world_size=4, ranks_per_node=2)
    check_capacity(spec, [NodeCapacity("a", cpus=2, gpus=0), NodeCapacity("b", cpus=2, gpus=0)])
    two_and_one = [NodeCapacity("a", cpus=16, gpus=2), NodeCapacity("b", cpus=16, gpus=1)]
    with pytest.raises(SpecError) as exc:
        check_capacity(spec, two_and_one)
    msg = str(exc.value)
    assert "'spread' puts world_size=4 ranks 2 to a node (ranks_per_node), on 2 nodes" in msg
    assert "the cluster has 1 node(s) with 2 GPU(s)" in msg


def test_spread_without_ranks_per_node_is_one_rank_a_node_as_before():
    spec = spec_of({"placement": ["spread"]}, world_size=2)
    (run, *_) = plan_sweep(spec, {"CPU": 1.0}).runs
    assert run.launch.ranks_per_bundle == 1 and run.launch.bundles == [{"CPU": 1.0}] * 2
    assert ranks_per_node(spec, "spread") == 1


def test_v9_database_upgrades_with_each_runs_ranks_per_node(tmp_path):
    db = str(tmp_path / "v9.duckdb")
    with Store(db) as s, s.transaction():
        s.insert("sweeps", [{"sweep_id": "s", "name": "v9"}])
        s.insert(
            "runs",
            [
                {"run_id": "p", "seq": 1, "strategy": "ddp", "world_size": 4, "placement": "pack"},
                {
                    "run_id": "q",
                    "seq": 2,
                    "strategy": "ddp",
                    "world_size": 4,
                    "placement": "spread",
                },
            ],
        )
    as_version(db, 9)
    with Store(db) as s:
        got = s.query("SELECT run_id, ranks_per_node FROM runs ORDER BY run_id")
    assert got[1] == [("p", 4), ("q", 1)]
