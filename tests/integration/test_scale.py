"""Scale on CPU: a world_size-8 run on a 2-CPU node (fractional CPU bundles) trains and stores
the right rows, and every run stores where its seconds went (run_phases)."""

from __future__ import annotations

import pytest

from orchestrator.store import read_query
from workloads.contract import PHASES

RANK_PHASES = {
    "process_start", "imports", "pg_init", "model_data_build", "strategy_init", "warmup",
    "timed_steps", "profiled_pass", "rank_teardown",
}  # fmt: skip
DRIVER_PHASES = {"placement", "teardown", "commit"}


@pytest.fixture(scope="module")
def eight_ranks(run_sweep, tmp_path_factory):
    spec = {
        "name": "eight",
        "model": "gpt2-tiny",
        "dataset": "builtin",
        "seq_len": 32,
        "micro_batch_size": 2,
        "steps": 3,
        "warmup_steps": 1,
        "repeats": 1,
        "world_size": 8,
        "links": {"default": {}},
        "grid": {"strategy": ["ddp"], "grad_accum": [2], "placement": ["pack"]},
    }
    code, db = run_sweep(tmp_path_factory.mktemp("eight"), spec)
    return code, str(db)


def q(db: str, sql: str) -> list[tuple]:
    return read_query(db, sql)[1]


def test_world_size_8_on_two_cpus_trains_and_stores_every_rank(eight_ranks):
    code, db = eight_ranks
    assert code == 0, q(db, "SELECT error FROM runs")
    assert q(db, "SELECT world_size, status, n_steps FROM runs") == [(8, "ok", 3)]
    # 8 ranks x (1 warmup + 3 timed) steps, samples = micro_batch 2 x grad_accum 2 per rank
    assert q(
        db,
        "SELECT count(*), count(DISTINCT rank), sum(warmup::INT), min(samples), max(samples), "
        "min(tokens) FROM steps",
    ) == [(32, 8, 8, 4, 4, 128)]
    ranks = q(db, "SELECT rank, local_rank, node_id FROM ranks ORDER BY rank")
    assert [r[:2] for r in ranks] == [(i, i) for i in range(8)]
    assert len({r[2] for r in ranks}) == 1  # packed on one node
    # the profiled pass: every rank all-reduced the gradients, busbw with n = 8
    (n_ranks, ratio) = q(
        db, "SELECT count(DISTINCT rank), max(busbw_gbps / algbw_gbps) FROM comms"
    )[0]
    assert n_ranks == 8 and ratio == pytest.approx(2 * 7 / 8)
    # the run figure: per step the slowest of the 8 ranks
    (med,) = q(db, "SELECT median_step_time_s FROM runs")[0]
    (sql_med,) = q(db, "SELECT median(step_time_s) FROM step_times")[0]
    assert med == pytest.approx(sql_med)


def test_run_phases_stored_per_rank_and_for_the_driver(eight_ranks):
    _, db = eight_ranks
    rows = q(db, "SELECT rank, phase, seconds FROM run_phases")
    driver = {p for r, p, _ in rows if r is None}
    assert driver == DRIVER_PHASES
    for rank in range(8):
        assert {p for r, p, _ in rows if r == rank} == RANK_PHASES, rank
    assert {p for _, p, _ in rows} <= set(PHASES)
    assert all(s >= 0 for _, _, s in rows)
    # timed_steps is the wall around the timed loop: at least the rank's timed step times
    timed = dict(q(db, "SELECT rank, seconds FROM run_phases WHERE phase = 'timed_steps'"))
    steps = dict(q(db, "SELECT rank, sum(step_time_s) FROM steps WHERE NOT warmup GROUP BY 1"))
    for rank, t in steps.items():
        assert t <= timed[rank] < t + 5.0
    # a rank's phases happen one after the other inside the run's wall, with the driver's
    # placement before and teardown after them; together they account for most of it
    (wall,) = q(db, "SELECT epoch(finished_at) - epoch(started_at) FROM runs")[0]
    driver_s = sum(s for r, p, s in rows if r is None and p != "commit")
    per_rank = [sum(s for r, _, s in rows if r == rank) + driver_s for rank in range(8)]
    assert max(per_rank) <= wall + 0.5  # clocks: the driver's and the rank's wall time
    assert max(per_rank) > 0.5 * wall
