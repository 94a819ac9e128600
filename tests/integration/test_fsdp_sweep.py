"""FSDP2 and HSDP through ``linksweep run`` on the session Ray cluster (CPU, gloo), stored in
DuckDB: every run ok, and the bytes the collective recorder measured per optimizer step equal
``orchestrator/analysis/fsdp_theory.py``'s expectation, op by op. The accumulation check: each
run's verdict on what its non-final micro-batches sent, ``ok`` for DDP's and FSDP2's flavours,
and ``fail`` for an fsdp run with NVIDIA/cosmos-framework#161 planted (its sync switch replaced
by a DDP-only ``no_sync`` wrapper, a null context for an FSDP2 module)."""

from __future__ import annotations

import json

import pytest

from orchestrator.analysis.fsdp_theory import expected_fsdp, gpt2_sharded_by_name
from orchestrator.store import read_query
from workloads.fsdp import SYNC_BUG_ENV

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
        "links": {"default": {}, "bug": {SYNC_BUG_ENV: "1"}},
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
    """hsdp on 4 ranks, shard groups of 2 (two replicas), the cosmos fix's flavour: packed on
    one node, and spread two to a node over the session cluster's two nodes
    (``ranks_per_node``: each node a shard group, the replicas across them). Fresh rank actors,
    as on GPUs: each joins its node's bundle (``placement_group_bundle_index`` rank // 2); the
    emulated-cluster test runs forked ranks with the shard size left to its default."""
    spec = {
        "name": "hsdp-it",
        **BASE,
        "world_size": 4,
        "hsdp_shard_size": 2,
        "ranks_per_node": 2,
        "launcher": "actors",
        "grid": {
            "strategy": ["hsdp"],
            "grad_accum": [2],
            "grad_sync": ["replicate_last"],
            "placement": ["pack", "spread"],
        },
    }
    return run_sweep(tmp_path_factory.mktemp("hsdp"), spec)


@pytest.fixture(scope="module")
def ddp_sweep(run_sweep, tmp_path_factory):
    """DDP at grad_accum 2, all-reducing every micro-batch or only the last (no_sync)."""
    spec = {
        "name": "ddp-sync-it",
        **BASE,
        "world_size": 2,
        "grid": {"strategy": ["ddp"], "grad_accum": [2], "grad_sync": ["each", "last"]},
    }
    return run_sweep(tmp_path_factory.mktemp("ddp-sync"), spec)


def _check_runs(db, world_size: int, shard_size: int | None) -> list:
    rows = q(
        db,
        "SELECT run_id, strategy, grad_sync, reshard_after_forward, grad_accum, status, error, "
        "comm_bytes_per_step, expected_comm_bytes_per_step, hsdp_shard_size FROM runs "
        "WHERE link = 'default' ORDER BY seq",
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
        assert _check_of(db, run_id) == ("ok", theory.non_final, theory.non_final)
    return rows


def _check_of(db, run_id: str) -> tuple:
    """(verdict, measured non-final bytes, promised), as stored."""
    import json

    (row,) = q(
        db,
        "SELECT accum_check, non_final_bytes, promised_non_final_bytes FROM runs "
        f"WHERE run_id = '{run_id}'",
    )
    return row[0], json.loads(row[1]), json.loads(row[2])


def test_fsdp_runs_ok_and_measured_bytes_equal_theory(fsdp_sweep):
    rc, db = fsdp_sweep
    rows = _check_runs(db, 2, None)
    assert rc == 0
    assert {(r[2], r[3]) for r in rows} == {("last", "true"), ("last", "false")}
    sizes = q(db, "SELECT DISTINCT group_size FROM comms")
    assert sizes == [(2,)]


def test_the_planted_accumulation_bug_fails_the_check(fsdp_sweep):
    _, db = fsdp_sweep
    bugged = q(db, "SELECT run_id, status, accum_check FROM runs WHERE link = 'bug'")
    assert len(bugged) == 2
    for run_id, status, verdict in bugged:
        assert status == "ok"  # the run trains; only the check sees the bytes
        _, measured, promised = _check_of(db, run_id)
        assert "reduce_scatter" in measured and "reduce_scatter" not in promised
        assert verdict.startswith("fail: reduce_scatter sent "), verdict


def test_ddp_each_and_last_keep_their_promise(ddp_sweep):
    rc, db = ddp_sweep
    rows = q(
        db,
        "SELECT run_id, grad_sync, status, error, comm_bytes_per_step, "
        "expected_comm_bytes_per_step FROM runs ORDER BY grad_sync",
    )
    assert rc == 0 and [r[1] for r in rows] == ["each", "last"]
    (each_id, _, *_), (last_id, _, *_) = rows
    for _, _, status, error, measured, expected in rows:
        assert status == "ok", error
        assert measured == expected
    assert rows[0][4] == 2 * rows[1][4]  # each: two all-reduces of every gradient per step
    verdict, measured, promised = _check_of(db, each_id)
    assert verdict == "ok" and measured == promised == {"all_reduce": rows[1][4]}
    verdict, measured, promised = _check_of(db, last_id)
    assert verdict == "ok" and promised == {} and "all_reduce" not in measured


def test_hsdp_runs_ok_on_its_sub_groups_and_measured_bytes_equal_theory(hsdp_sweep):
    rc, db = hsdp_sweep
    rows = _check_runs(db, 4, 2)
    assert rc == 0 and len(rows) == 2
    by_op = dict(q(db, "SELECT op, max(group_size) FROM comms GROUP BY op"))
    assert by_op == {"all_gather": 2, "reduce_scatter": 2, "all_reduce": 2}
    placed = q(db, "SELECT placement, nodes, launcher, ranks_per_node FROM runs ORDER BY seq")
    where = {
        placement: [n["node_id"] for n in sorted(json.loads(nodes), key=lambda n: n["rank"])]
        for placement, nodes, _, _ in placed
    }
    assert len(set(where["pack"])) == 1, where
    assert where["spread"][0] == where["spread"][1] != where["spread"][2] == where["spread"][3]
    assert {(p, launcher, k) for p, _, launcher, k in placed} == {
        ("pack", "actors", 4),
        ("spread", "actors", 2),
    }


@pytest.fixture(scope="module")
def fsdp_bf16_offload_sweep(run_sweep, tmp_path_factory):
    """FSDP2 as people train it on a GPU, through the whole path (spec, planner, rank, rows):
    bf16 (``MixedPrecisionPolicy``: bf16 parameters, fp32 reduction), parameters offloaded to
    the CPU (``CPUOffloadPolicy``, unpinned without CUDA), grad_accum 2, FSDP2's default sync."""
    spec = {
        "name": "fsdp-bf16-offload-it",
        **BASE,
        "precision": "bf16",
        "world_size": 2,
        "grid": {"strategy": ["fsdp"], "grad_accum": [2], "offload": ["cpu"]},
    }
    return run_sweep(tmp_path_factory.mktemp("fsdp-bf16"), spec)


def test_fsdp_in_bf16_with_cpu_offload_gathers_bf16_and_reduces_fp32(fsdp_bf16_offload_sweep):
    rc, db = fsdp_bf16_offload_sweep
    ((run_id, status, error, precision, offload, sync, measured, expected, verdict),) = q(
        db,
        "SELECT run_id, status, error, precision, offload, grad_sync, comm_bytes_per_step, "
        "expected_comm_bytes_per_step, accum_check FROM runs",
    )
    assert rc == 0 and status == "ok", error
    assert (precision, offload, sync, verdict) == ("bf16", "cpu", "each", "ok")
    assert measured == expected
    dtypes = q(
        db,
        f"SELECT op, dtype, sum(msg_bytes * count) FROM comms WHERE run_id = '{run_id}' "
        "AND rank = 0 GROUP BY op, dtype ORDER BY op",
    )
    assert [(op, dtype) for op, dtype, _ in dtypes] == [
        ("all_gather", "bf16"),
        ("reduce_scatter", "fp32"),
    ]
    # the same parameters: half the bytes gathered in bf16 as the fp32 gradients reduced, per pass
    fp32 = expected_fsdp("fsdp", "each", True, 2, 2, gpt2_sharded_by_name("gpt2-tiny"))
    assert sum(b for _, _, b in dtypes) == measured
    assert dtypes[1][2] == fp32.per_step["reduce_scatter"]
    assert dtypes[0][2] * 2 == fp32.per_step["all_gather"]
