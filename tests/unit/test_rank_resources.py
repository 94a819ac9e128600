"""A rank's bundle: GPU, one CPU, or an equal share of the largest node's CPUs (scale on CPU)."""

from __future__ import annotations

import pytest

from orchestrator.planner import (
    NodeCapacity,
    check_capacity,
    launcher_for,
    rank_resources,
    run_env,
)
from orchestrator.spec import SpecError, parse_spec

TWO_CORES = [NodeCapacity("a", cpus=2, gpus=0)]


@pytest.mark.parametrize(
    "nodes,world_size,bundle",
    [
        ([NodeCapacity("a", cpus=16, gpus=8)], 64, {"GPU": 1.0}),  # GPUs: never fractional
        (TWO_CORES, 2, {"CPU": 1.0}),
        (TWO_CORES, 8, {"CPU": 0.25}),
        (TWO_CORES, 3, {"CPU": 0.66}),  # rounded down: 3 x 0.66 fits in 2
        ([NodeCapacity("a", cpus=2, gpus=0), NodeCapacity("b", cpus=4, gpus=0)], 8, {"CPU": 0.5}),
        (TWO_CORES, 1000, {"CPU": 1.0}),  # below 0.01 CPU: no share; capacity check refuses
    ],
)
def test_bundle(nodes, world_size, bundle):
    assert rank_resources(nodes, world_size) == bundle


def test_world_size_8_packs_on_two_cores_and_each_rank_gets_one_thread():
    spec = parse_spec({"name": "x", "world_size": 8, "links": {"default": {}}})
    check_capacity(spec, TWO_CORES)  # no error: 8 x 0.25 CPU on one node
    bundle = rank_resources(TWO_CORES, spec.world_size)
    env = run_env(spec, "default", "r", int(bundle.get("CPU", 1)))
    assert env["OMP_NUM_THREADS"] == "1"


def test_fractional_bundles_do_not_make_spread_possible():
    spec = parse_spec(
        {"name": "x", "world_size": 8, "links": {"default": {}}, "grid": {"placement": ["spread"]}}
    )
    with pytest.raises(SpecError, match="'spread' puts each of world_size=8"):
        check_capacity(spec, [NodeCapacity("a", cpus=2, gpus=0), NodeCapacity("b", cpus=2, gpus=0)])


def test_too_many_ranks_for_a_hundredth_of_a_cpu_each_is_refused():
    spec = parse_spec({"name": "x", "world_size": 1000, "links": {"default": {}}})
    with pytest.raises(SpecError, match="'pack' puts world_size=1000"):
        check_capacity(spec, TWO_CORES)


@pytest.mark.parametrize(
    "launcher,bundle,want",
    [
        ("auto", {"CPU": 1.0}, "fork"),
        ("auto", {"GPU": 1.0}, "actors"),  # the fallback stays the default on GPUs
        ("actors", {"CPU": 0.25}, "actors"),
        ("fork", {"CPU": 1.0}, "fork"),
    ],
)
def test_launcher_choice(launcher, bundle, want):
    spec = parse_spec({"name": "x", "launcher": launcher, "links": {"default": {}}})
    assert launcher_for(spec, bundle) == want


def test_fork_launcher_on_gpus_is_refused_with_the_allowed_values():
    spec = parse_spec({"name": "x", "launcher": "fork", "links": {"default": {}}})
    with pytest.raises(SpecError, match="launcher: 'fork' is CPU-only.*'actors' or 'auto'"):
        launcher_for(spec, {"GPU": 1.0})


def test_unknown_launcher_names_the_field_and_the_allowed_values():
    with pytest.raises(SpecError) as exc:
        parse_spec({"name": "x", "launcher": "threads", "links": {"default": {}}})
    assert "launcher" in str(exc.value) and "'fork'" in str(exc.value)
