"""Shared fixtures: one Ray cluster per test session, small sweep files.

Two layers: ``tests/unit`` (pure: no Ray, no subprocess, no database file; seconds) and
``tests/integration`` (the session Ray cluster, DuckDB files, torchrun, ``ray job submit``, the
emulated cluster). Only integration tests may use ``ray_cluster`` and ``run_sweep``
(tests/unit/test_architecture.py checks that).

The session cluster is a real ``ray.cluster_utils.Cluster`` with two nodes of 2 logical CPUs each
on this machine, so the same cluster serves single-node runs (pack) and multi-node placement
(spread). Tests that need another cluster (``ray job submit``, the emulated cluster) run it in
subprocesses so this process keeps exactly one Ray connection.
"""

from __future__ import annotations

import os
import textwrap

import pytest

os.environ.setdefault("RAY_DISABLE_USAGE_STATS", "1")


@pytest.fixture(scope="session")
def ray_cluster():
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "include_dashboard": False},
    )
    cluster.add_node(num_cpus=2)
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
