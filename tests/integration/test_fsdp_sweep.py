"""FSDP2 and HSDP through ``linksweep run`` on the session Ray cluster (CPU, gloo), stored in
DuckDB: every run ok, and the bytes the collective recorder measured per optimizer step equal
``orchestrator/analysis/fsdp_theory.py``'s expectation, op by op."""

from __future__ import annotations

import pytest

from orchestrator.analysis.fsdp_theory import expected_fsdp, gpt2_sharded_by_name
from orchestrator.store import read_query

BASE = {
    "seq_len": 32,
    "micro_batch_size": 2,
    "steps": 3,
    "warmup_steps": 1,
    "repeats": 1,
}


def q(db, sql):
    return read_query(str(db), sql)[1]


def measured_by_op(db, run_id: str) -> dict[str, int]:
    """Rank 0's bytes per step by op (one profiled step: ``planner.PROFILE_STEPS``)."""
    rows = q(
        db,
        f"SELECT op, sum(msg_bytes * count) FROM comms WHERE run_id = '{run_id}' AND rank = 0 "
        "GROUP BY op ORDER BY op",
    )
    return {op: int(b) for op, b in rows}


@pytest.fixture(scope="module")
def fsdp_sweep(run_sweep, tmp_path_factory):
    """fsdp on 2 ranks, both reshard settings, grad_accum 2, sync on the last micro-batch only
    (FSDP2's default, ``each``, differs in reduce-scatters alone: counted by the unit theory)."""
    spec = {
        "name": "fsdp-it",
        **BASE,
        "world_size": 2,
        "grid": {
            "strategy": ["fsdp"],
            "grad_accum": [2],
            "reshard_after_forward": [True, False],
            "grad_sync": ["last"],
        },
    }
    return run_sweep(tmp_path_factory.mktemp("fsdp"), spec)


@pytest.fixture(scope="module")
def hsdp_sweep(run_sweep, tmp_path_factory):
    """hsdp on 4 ranks, shard groups of 2 (two replicas), the cosmos fix's flavour."""
    spec = {
        "name": "hsdp-it",
        **BASE,
        "world_size": 4,
        "hsdp_shard_size": 2,
        "grid": {"strategy": ["hsdp"], "grad_accum": [2], "grad_sync": ["replicate_last"]},
    }
    return run_sweep(tmp_path_factory.mktemp("hsdp"), spec)


def _check_runs(db, world_size: int, shard_size: int | None) -> list:
    rows = q(
        db,
        "SELECT run_id, strategy, grad_sync, reshard_after_forward, grad_accum, status, error, "
        "comm_bytes_per_step, expected_comm_bytes_per_step, hsdp_shard_size FROM runs ORDER BY seq",
    )
    model = gpt2_sharded_by_name("gpt2-tiny")
    for run_id, strategy, sync, reshard, ga, status, error, measured, expected, shard in rows:
        assert status == "ok", error
        assert shard == shard_size
        theory = expected_fsdp(
            strategy, sync, reshard == "true", ga, world_size, model, shard_size=shard_size
        )
        assert measured_by_op(db, run_id) == theory.per_step, (strategy, sync, reshard)
        assert measured == expected == sum(theory.per_step.values())
    return rows


def test_fsdp_runs_ok_and_measured_bytes_equal_theory(fsdp_sweep):
    rc, db = fsdp_sweep
    rows = _check_runs(db, 2, None)
    assert rc == 0
    assert {(r[2], r[3]) for r in rows} == {("last", "true"), ("last", "false")}
    sizes = q(db, "SELECT DISTINCT group_size FROM comms")
    assert sizes == [(2,)]


def test_hsdp_runs_ok_on_its_sub_groups_and_measured_bytes_equal_theory(hsdp_sweep):
    rc, db = hsdp_sweep
    rows = _check_runs(db, 4, 2)
    assert rc == 0 and len(rows) == 1
    by_op = dict(q(db, "SELECT op, max(group_size) FROM comms GROUP BY op"))
    assert by_op == {"all_gather": 2, "reduce_scatter": 2, "all_reduce": 2}
