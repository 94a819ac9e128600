"""Real sweeps on the session's real Ray cluster (two logical nodes), gloo DDP, real DuckDB."""

from __future__ import annotations

import json
import math

import pytest

from orchestrator.cli import main
from orchestrator.store import read_query
from tests.conftest import HUNG_RUN_TIMEOUT_S


def q(db, sql):
    return read_query(str(db), sql)[1]


@pytest.fixture(scope="module")
def ddp_sweep(run_sweep, tmp_path_factory):
    """ga 1 and 2 x pack and spread: 4 runs, stored in one database."""
    spec = {
        "name": "ddp-it",
        "model": "gpt2-tiny",
        "dataset": "builtin",
        "seq_len": 32,
        "micro_batch_size": 2,
        "steps": 4,
        "warmup_steps": 1,
        "repeats": 1,
        "world_size": 2,
        "links": {"default": {}},
        "grid": {
            "strategy": ["ddp"],
            "grad_accum": [1, 2],
            "placement": ["pack", "spread"],
        },
    }
    return run_sweep(tmp_path_factory.mktemp("ddp"), spec)


def test_sweep_exit_code_and_rows(ddp_sweep):
    rc, db = ddp_sweep
    assert rc == 0
    runs = q(db, "SELECT status, backend, world_size, n_params, error FROM runs ORDER BY seq")
    assert len(runs) == 4
    assert all(r[0] == "ok" and r[1] == "gloo" and r[2] == 2 and r[4] is None for r in runs)
    assert all(r[3] == 3382080 for r in runs)  # gpt2-tiny with gpt2's vocab and positions


def test_steps_match_spec(ddp_sweep):
    _, db = ddp_sweep
    rows = q(
        db,
        """SELECT r.grad_accum, s.rank, count(*), sum(CASE WHEN s.warmup THEN 1 ELSE 0 END),
                  min(s.samples), max(s.samples), min(s.tokens), max(s.tokens),
                  bool_and(isfinite(s.loss)), bool_and(s.step_time_s > 0)
           FROM steps s JOIN runs r USING (run_id) GROUP BY r.run_id, r.grad_accum, s.rank""",
    )
    assert len(rows) == 4 * 2  # runs x ranks
    for ga, _rank, n, n_warm, smin, smax, tmin, tmax, finite, positive in rows:
        assert n == 1 + 4 and n_warm == 1
        assert smin == smax == 2 * ga  # micro_batch_size x grad_accum per rank
        assert tmin == tmax == 2 * ga * 32
        assert finite and positive


def test_run_summary_excludes_warmup(ddp_sweep):
    _, db = ddp_sweep
    rows = q(db, "SELECT n_steps, median_step_time_s, samples_per_s, tokens_per_s FROM run_summary")
    assert len(rows) == 4
    for n_steps, med, sps, tps in rows:
        assert n_steps == 4
        assert med > 0 and math.isclose(tps, sps * 32)


def test_stored_run_figures_agree_with_sql_over_the_steps(ddp_sweep):
    """Figures have one home (orchestrator/analysis/stats.py, stored in ``runs``); the same numbers
    recomputed in SQL from the stored steps must agree: a guard against a second formula."""
    _, db = ddp_sweep
    rows = q(
        db,
        """SELECT r.run_id, r.n_steps, r.median_step_time_s, count(t.step),
                  median(t.step_time_s),
                  r.p10_step_time_s, quantile_cont(t.step_time_s, 0.1),
                  r.p90_step_time_s, quantile_cont(t.step_time_s, 0.9),
                  r.samples_per_s, sum(t.samples) / sum(t.step_time_s)
           FROM runs r LEFT JOIN step_times t USING (run_id)
           WHERE r.status = 'ok'
           GROUP BY ALL""",
    )
    assert len(rows) == 4
    for run_id, n_steps, stored, n_sql, median_sql, *others in rows:
        assert n_steps == n_sql == 4, run_id
        assert abs(stored - median_sql) <= 1e-12, (run_id, stored, median_sql)
        p10, p10_sql, p90, p90_sql, sps, sps_sql = others
        assert abs(p10 - p10_sql) <= 1e-12 and abs(p90 - p90_sql) <= 1e-12, run_id
        assert math.isclose(sps, sps_sql, rel_tol=1e-12), run_id


def test_placement_recorded_in_nodes(ddp_sweep):
    _, db = ddp_sweep
    for placement, nodes in q(db, "SELECT placement, nodes FROM runs"):
        node_ids = {n["node_id"] for n in json.loads(nodes)}
        assert len(node_ids) == (1 if placement == "pack" else 2), placement


def test_provenance(ddp_sweep):
    _, db = ddp_sweep
    (row,) = q(db, "SELECT status, versions, spec, n_runs_planned, finished_at FROM sweeps")
    status, versions, spec, planned, finished = row
    assert status == "ok" and planned == 4 and finished is not None
    assert json.loads(versions)["torch"].startswith("2.")
    assert json.loads(spec)["grid"]["placement"] == ["pack", "spread"]
    (src,) = q(db, "SELECT DISTINCT data_source FROM runs")
    assert src[0].startswith("builtin")


def test_failed_run_is_stored_and_sweep_goes_on(ray_cluster, write_sweep, tmp_path):
    path = write_sweep(
        links={"broken": {"LINKSWEEP_INJECT_FAULT": "1:1"}, "default": {}},
        grid={"strategy": ["ddp"], "grad_accum": [1], "link": ["broken", "default"]},
    )
    db = tmp_path / "r.duckdb"
    assert main(["run", path, "--db", str(db)]) == 1
    rows = q(db, "SELECT link, status, error FROM runs ORDER BY seq")
    assert [(r[0], r[1]) for r in rows] == [("broken", "failed"), ("default", "ok")]
    assert "rank 1: RuntimeError: injected fault on rank 1 at step 1" in rows[0][2]
    (sweep_status,) = q(db, "SELECT status FROM sweeps")[0]
    assert sweep_status == "failed"
    # the failed run is counted, excluded from figures, never deleted
    (n_runs, n_excl, med) = q(
        db,
        "SELECT n_runs, n_excluded, median_step_time_s FROM variant_summary WHERE link = 'broken'",
    )[0]
    assert (n_runs, n_excl, med) == (1, 1, None)


def test_hung_run_times_out(hung_sweep):
    """The session's hung sweep (tests/conftest.py): the sweep exits 1, the hung run is failed
    with the timeout in its error, and the sweep went on to its next run."""
    code, db = hung_sweep
    assert code == 1
    rows = q(db, "SELECT link, status, error FROM runs ORDER BY seq")
    assert [(link, status) for link, status, _ in rows] == [("hung", "failed"), ("fine", "ok")]
    assert f"timed out after {HUNG_RUN_TIMEOUT_S} s" in rows[0][2]


def test_impossible_placement_rejected_before_anything(ray_cluster, write_sweep, tmp_path, capsys):
    path = write_sweep(world_size=3, grid={"placement": ["spread"]})
    db = tmp_path / "r.duckdb"
    assert main(["run", path, "--db", str(db)]) == 2
    assert "'spread'" in capsys.readouterr().err
    assert not db.exists()


def test_cpu_run_records_topology_transport_and_absent_telemetry(ddp_sweep):
    _, db = ddp_sweep
    (n_nodes,) = q(db, "SELECT count(*) FROM nodes")[0]
    assert n_nodes == 2  # one probe per node of the session's 2-node cluster
    assert q(db, "SELECT count(*) FROM gpus")[0] == (0,)
    assert q(db, "SELECT count(*) FROM gpu_links")[0] == (0,)
    assert all(r[0].startswith("absent: ") for r in q(db, "SELECT nvml FROM nodes"))
    rows = q(
        db, "SELECT placement, effective_transport, link_check, link_class, telemetry FROM runs"
    )
    for placement, transport, check, link_class, telemetry in rows:
        assert transport == "gloo/tcp" and check == "unknown"
        assert link_class == ("NET" if placement == "spread" else "unknown")
        assert telemetry.startswith("absent: ")  # recorded as absent, never faked
    assert q(db, "SELECT count(*) FROM telemetry")[0] == (0,)
    assert q(db, "SELECT count(*) FROM transports")[0] == (0,)


@pytest.mark.slow
def test_cli_embedded_ray(write_sweep, tmp_path):
    """`linksweep run` with no address and no RAY_ADDRESS starts its own embedded Ray."""
    import os
    import subprocess
    import sys

    path = write_sweep(steps=2)
    db = tmp_path / "r.duckdb"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator", "run", path, "--db", str(db)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "embedded single-node cluster" in out.stderr
    assert "variant_summary" in out.stdout  # the summary table
    assert q(db, "SELECT r.status, s.ray_address FROM runs r JOIN sweeps s USING (sweep_id)") == [
        ("ok", "embedded")
    ]
