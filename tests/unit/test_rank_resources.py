"""A rank's bundle: a GPU with its CPUs (half of each with ranks_per_gpu 2), one CPU, or an equal
share of the largest node's CPUs (scale on CPU)."""

from __future__ import annotations

import pytest

from orchestrator.sweep.planner import (
    NodeCapacity,
    check_capacity,
    cpus_per_gpu,
    launcher_for,
    rank_resources,
    run_env,
)
from orchestrator.sweep.spec import SpecError, parse_spec

TWO_CORES = [NodeCapacity("a", cpus=2, gpus=0)]


@pytest.mark.parametrize(
    "nodes,world_size,bundle",
    [
        # GPUs: never fractional, with the CPUs per GPU of the GPU nodes
        ([NodeCapacity("a", cpus=16, gpus=8)], 64, {"GPU": 1.0, "CPU": 2.0}),
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
    with pytest.raises(
        SpecError, match="'spread' puts world_size=8 ranks each of them on its own node"
    ):
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
        ("fork", {"GPU": 1.0, "CPU": 2.0}, "fork"),  # forked ranks get their bundle's GPUs
        ("fork", {"GPU": 0.5, "CPU": 1.0}, "fork"),  # two ranks sharing one GPU
        ("actors", {"GPU": 1.0}, "actors"),
    ],
)
def test_launcher_choice(launcher, bundle, want):
    spec = parse_spec({"name": "x", "launcher": launcher, "links": {"default": {}}})
    assert launcher_for(spec, bundle) == want


def test_unknown_launcher_names_the_field_and_the_allowed_values():
    with pytest.raises(SpecError) as exc:
        parse_spec({"name": "x", "launcher": "threads", "links": {"default": {}}})
    assert "launcher" in str(exc.value) and "'fork'" in str(exc.value)


@pytest.mark.parametrize(
    "nodes,k",
    [
        ([NodeCapacity("a", cpus=16, gpus=8)], 2),
        ([NodeCapacity("a", cpus=16, gpus=8), NodeCapacity("b", cpus=96, gpus=8)], 2),  # min
        ([NodeCapacity("a", cpus=2, gpus=0), NodeCapacity("b", cpus=32, gpus=4)], 8),  # GPU nodes
        ([NodeCapacity("a", cpus=20, gpus=3)], 6),  # floor
        ([NodeCapacity("a", cpus=4, gpus=8)], 1),  # at least one
        (TWO_CORES, 1),
    ],
)
def test_cpus_per_gpu(nodes, k):
    assert cpus_per_gpu(nodes) == k


def test_gpu_ranks_get_the_cpus_per_gpu_as_threads():
    # a {GPU: 1} bundle had no CPU, so every GPU rank (and CPU offload) ran one thread
    spec = parse_spec({"name": "x", "world_size": 2, "links": {"default": {}}})
    nodes = [NodeCapacity("a", cpus=64, gpus=8)]
    bundle = rank_resources(nodes, spec.world_size)
    assert bundle == {"GPU": 1.0, "CPU": 8.0}
    assert run_env(spec, "default", "r", int(bundle.get("CPU", 1)))["OMP_NUM_THREADS"] == "8"


@pytest.mark.parametrize(
    "cpus,bundle",
    [(8, {"GPU": 0.5, "CPU": 4.0}), (3, {"GPU": 0.5, "CPU": 1.5}), (1, {"GPU": 0.5, "CPU": 0.5})],
)
def test_two_ranks_per_gpu_take_half_a_gpu_and_half_its_cpus(cpus, bundle):
    assert rank_resources([NodeCapacity("a", cpus=cpus, gpus=1)], 2, ranks_per_gpu=2) == bundle


def test_two_ranks_per_gpu_fit_on_one_gpu():
    spec = parse_spec({"name": "x", "ranks_per_gpu": 2, "world_size": 2})
    check_capacity(spec, [NodeCapacity("a", cpus=1, gpus=1)])  # 2 x {GPU: 0.5, CPU: 0.5}


def test_two_ranks_per_gpu_on_a_cpu_only_cluster_is_a_clear_error():
    spec = parse_spec({"name": "x", "ranks_per_gpu": 2, "world_size": 2})
    with pytest.raises(SpecError, match=r"ranks_per_gpu: 2 .*needs a GPU.*allowed on a CPU-only"):
        check_capacity(spec, TWO_CORES)


def test_a_gpu_bundles_cpus_count_for_capacity():
    spec = parse_spec({"name": "x", "world_size": 8})
    # 8 GPUs but 4 CPUs: 4 bundles of {GPU: 1, CPU: 1} fit, not 8
    with pytest.raises(SpecError, match=r"largest node has 4 GPU\(s\) for rank bundles"):
        check_capacity(spec, [NodeCapacity("a", cpus=4, gpus=8)])
    check_capacity(spec, [NodeCapacity("a", cpus=8, gpus=8)])


@pytest.mark.parametrize("bundle", [{"GPU": 1.0, "CPU": 8.0}, {"GPU": 0.5, "CPU": 0.5}])
def test_auto_keeps_actors_on_gpu_bundles_with_cpus(bundle):
    spec = parse_spec({"name": "x", "links": {"default": {}}})
    assert launcher_for(spec, bundle) == "actors"
