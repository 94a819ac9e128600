"""Shared fixtures: one Ray cluster per test session, small sweep files.

Two layers: ``tests/unit`` (no Ray and no emulated cluster; about half a minute in all: pure
logic mostly, plus a few short child processes, e.g. a CPU scheduling policy or a fake GPU
node's ``python -c``, and small DuckDB files in ``tmp_path`` for the schema and store code) and
``tests/integration`` (the session Ray cluster, sweeps, torchrun, ``ray job submit``, the
emulated cluster). Only integration tests may use ``ray_cluster`` and ``run_sweep``
(tests/unit/test_architecture.py checks that).

The session cluster is a real ``ray.cluster_utils.Cluster`` with two nodes of 2 logical CPUs and
0 GPUs each on this machine, so the same cluster serves single-node runs (pack) and multi-node
placement (spread). ``num_gpus=0`` on every node, said here rather than left to
``Cluster.add_node``'s default (0 in Ray 2.60, ``ray/cluster_utils.py``): both logical nodes are
this one machine, and a node that autodetected would advertise the same physical GPUs twice.
Tests that need another cluster (``ray job submit``, the emulated cluster, ``linksweep
selftest``) run it in subprocesses so this process keeps exactly one Ray connection.

A third folder, ``tests/checks``, holds the checks against real external programs; the suite
skips it (:data:`CHECKS_ENV`).

Tests marked ``gpu`` need CUDA: without it (``torch.cuda.is_available()``, not nvidia-smi's
presence: a driver without a CUDA torch cannot run them) each is skipped with the reason
(:func:`gpu_skip_reason`, unit-tested in tests/unit/test_selftest_gpu_marker.py).
"""

from __future__ import annotations

import os
import textwrap

import pytest

from tests import lanes

os.environ.setdefault("RAY_DISABLE_USAGE_STATS", "1")

CHECKS_ENV = "LINKSWEEP_CHECKS"
"""Set by ``scripts/checks.sh``: only then are ``tests/checks`` collected. They test linksweep
against real programs (Slurm, Prometheus, MLflow) or with DeepSpeed ops (ZeRO's CPU and NVMe
offload, the CPU selftest) that the quickstart's setup does not install, so the README's test
command leaves them out and ``.ci/run`` runs them after it."""
collect_ignore = [] if os.environ.get(CHECKS_ENV) == "1" else ["checks"]


def gpu_skip_reason(cuda_available: bool, torch_build: str, why: str = "") -> str | None:
    """Why a ``gpu`` test must skip here, or None when it can run. Pure: the facts come from
    :func:`_cuda_facts`. ``torch_build``: torch's version and CUDA build (``2.13.0+cpu, CUDA
    build none``), so a CPU-only wheel on a GPU node reads as what it is."""
    if cuda_available:
        return None
    reason = f"needs CUDA: torch.cuda.is_available() is False (torch {torch_build})"
    return f"{reason}: {why}" if why else reason


def _cuda_facts() -> tuple[bool, str, str]:
    """(CUDA available, torch build, why not): asked once, only when a ``gpu`` test was
    collected (importing torch costs seconds)."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - no torch at all: no CUDA either
        return False, "not importable", f"{type(exc).__name__}: {exc}"
    build = f"{torch.__version__}, CUDA build {torch.version.cuda or 'none'}"
    try:
        return bool(torch.cuda.is_available()), build, ""
    except Exception as exc:  # noqa: BLE001 - a broken driver says so here
        return False, build, f"{type(exc).__name__}: {exc}"


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (its plugin predates this file)
def pytest_collection_modifyitems(config, items):
    """Every test gets its lane; gpu tests skip where this machine has no CUDA."""
    assign_lanes(items)
    skip_gpu_tests_without_cuda(items)


def assign_lanes(items) -> None:
    """Mark each test with its xdist group (tests/lanes.py) and put the quiet group first."""
    groups = [
        lanes.lane_of(
            item.nodeid.split("::")[0],
            getattr(item, "fixturenames", ()),
            (mark.name for mark in item.iter_markers()),
        )
        for item in items
    ]
    for item, group in zip(items, groups, strict=True):
        item.add_marker(pytest.mark.xdist_group(group))
    items[:] = [items[i] for i in lanes.quiet_first(groups)]


def skip_gpu_tests_without_cuda(items) -> None:
    """Every collected ``gpu`` test skips with the reason when this machine has no CUDA."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    reason = gpu_skip_reason(*_cuda_facts())
    if reason is not None:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))


def pytest_configure(config):
    """The lanes' lock folder, made by the controller before the workers start."""
    lanes.make_lock_dir()


def pytest_unconfigure(config):
    lanes.remove_lock_dir()


def _lane(item) -> str:
    return next(item.iter_markers("xdist_group")).args[0]


def pytest_runtest_setup(item):
    """A background test's worker lowers its CPU priority first (tests/lanes.py)."""
    lanes.enter_lane(_lane(item))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """Setup to teardown inside the lanes' lock (tests/lanes.py): the background lane pauses
    while an ``alone`` test runs. Outermost (``tryfirst``): the wait for the lock is not part of
    the test's ``timeout`` (pyproject), which pytest-timeout counts in its own wrapper inside
    this one; a background test can wait minutes for a run of alone tests."""
    alone = item.get_closest_marker(lanes.ALONE) is not None
    next_alone = nextitem is not None and nextitem.get_closest_marker(lanes.ALONE) is not None
    with lanes.running(_lane(item), alone, next_alone):
        yield


@pytest.fixture(scope="session")
def ray_cluster():
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "num_gpus": 0, "include_dashboard": False},
    )
    cluster.add_node(num_cpus=2, num_gpus=0)  # never autodetected: see above
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture(scope="session")
def run_sweep(ray_cluster):
    """Run a sweep given as a dict with `linksweep run` (in-process, on the session cluster).

    Returns (exit code, database path); the file and database go to ``directory``.
    """
    import yaml

    from orchestrator.cli import main

    def _run(directory, spec: dict):
        path = directory / "sweep.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        db = directory / "r.duckdb"
        return main(["run", str(path), "--db", str(db)]), db

    return _run


HUNG_RUN_TIMEOUT_S = 12
"""The shared hung run's ``run_timeout_s``: a forked rank reaches its hang at step 1 in 1-3 s
on 2 busy cores (forked from a launcher with everything imported), and its stack must show it
there (``_maybe_fault``); the wait is the fixture's whole cost."""


@pytest.fixture(scope="session")
def hung_sweep(run_sweep, tmp_path_factory):
    """One sweep whose first run hangs (rank 0 blocks at step 1) and whose second is fine, forked
    ranks: (exit code, database). Three tests read it (a hung run times out and is killed, its
    error says so, every rank's stack is stored), so the suite waits out the timeout once, not
    three times."""
    spec = {
        "name": "hung",
        "model": "gpt2-tiny",
        "dataset": "builtin",
        "seq_len": 32,
        "micro_batch_size": 2,
        "steps": 3,
        "warmup_steps": 1,
        "repeats": 1,
        "world_size": 2,
        "launcher": "fork",
        "run_timeout_s": HUNG_RUN_TIMEOUT_S,  # counted from the ranks' start
        "links": {"hung": {"LINKSWEEP_INJECT_FAULT": "0:1:hang"}, "fine": {}},
        "grid": {"strategy": ["ddp"], "grad_accum": [1], "placement": ["pack"]},
    }
    return run_sweep(tmp_path_factory.mktemp("hung-sweep"), spec)


@pytest.fixture
def write_sweep(tmp_path):
    """Write a small sweep file; keyword arguments override top-level keys."""

    def _write(body: str | None = None, **overrides) -> str:
        import yaml

        base = yaml.safe_load(
            textwrap.dedent(
                """
                name: t
                model: gpt2-tiny
                dataset: builtin
                precision: fp32
                seq_len: 32
                micro_batch_size: 2
                steps: 3
                warmup_steps: 1
                repeats: 1
                world_size: 2
                links: {default: {}}
                grid: {strategy: [ddp], grad_accum: [1], placement: [pack]}
                """
            )
        )
        if body is not None:
            base = yaml.safe_load(textwrap.dedent(body))
        base.update(overrides)
        path = tmp_path / f"sweep-{len(list(tmp_path.glob('sweep-*.yaml')))}.yaml"
        path.write_text(yaml.safe_dump(base, sort_keys=False))
        return str(path)

    return _write
