"""``trace: {steps: N}`` through ``linksweep run`` on the session cluster: two DDP ranks on gloo
trace 2 steps after their timed ones (and two FSDP2 ranks, for the collectives' names). Each rank's trace is a Chrome trace file beside the
database, its ``ProfilerStep`` spans and gloo's collectives in it; the overlap figures from it
(the CPU rule of ``orchestrator/analysis/trace_overlap``) are stored per rank, for the whole
trace and per step; the traced steps stay out of ``steps`` and the step-time figures; their time
against the timed steps' is the profiler's overhead. Each interval is named by the collective called, with the bytes the
collective recorder saw (``orchestrator/analysis/trace_collectives``)."""

from __future__ import annotations

import gzip
import json
import os

import pytest

from orchestrator.store import read_query


@pytest.fixture(scope="module")
def traced(run_sweep, tmp_path_factory):
    spec = {
        "name": "trace-it",
        "seq_len": 32,
        "micro_batch_size": 2,
        "steps": 2,
        "warmup_steps": 1,
        "repeats": 1,
        "world_size": 2,
        "trace": {"steps": 2},
        "grid": {"strategy": ["ddp", "fsdp"], "grad_accum": [2]},
    }
    return run_sweep(tmp_path_factory.mktemp("trace"), spec)


DDP = "run_id IN (SELECT run_id FROM runs WHERE strategy = 'ddp')"


def rows(db, sql: str) -> list[dict]:
    cols, values = read_query(str(db), sql)
    return [dict(zip(cols, v, strict=True)) for v in values]


def test_each_ranks_trace_is_kept_beside_the_database(traced):
    rc, db = traced
    assert rc == 0
    files = rows(db, f"SELECT rank, path, bytes, steps FROM traces WHERE {DDP} ORDER BY rank")
    assert [f["rank"] for f in files] == [0, 1]
    for f in files:
        assert f["path"].startswith(str(db)[: -len(".duckdb")] + ".traces" + os.sep), f
        with open(f["path"], "rb") as fh:
            packed = fh.read()
        assert len(packed) == f["bytes"] and f["steps"] == 2
        names = {e.get("name", "") for e in json.loads(gzip.decompress(packed))["traceEvents"]}
        assert {"ProfilerStep#0", "ProfilerStep#1"} <= names
        assert any(n.startswith("gloo:") for n in names), sorted(names)[:20]


def test_overlap_is_stored_per_rank_for_the_trace_and_each_step(traced):
    _, db = traced
    got = rows(db, f"SELECT * FROM trace_overlap WHERE {DDP} ORDER BY rank, step NULLS FIRST")
    assert {(r["rank"], r["step"]) for r in got} == {(k, s) for k in (0, 1) for s in (None, 0, 1)}
    for r in got:
        assert r["rule"] == "cpu"
        assert r["comm_s"] > 0 and r["compute_s"] > 0, r  # gloo's events and the model's ops
        assert 0 <= r["overlapped_s"] <= min(r["comm_s"], r["compute_s"]) + 1e-12
        assert r["exposed_s"] == pytest.approx(r["comm_s"] - r["overlapped_s"])
    whole = {r["rank"]: r for r in got if r["step"] is None}
    for rank, w in whole.items():
        steps = [r for r in got if r["rank"] == rank and r["step"] is not None]
        assert sum(s["comm_s"] for s in steps) <= w["comm_s"] + 1e-9


def test_traced_steps_stay_out_of_the_figures_and_say_what_the_profiler_cost(traced):
    _, db = traced
    (run,) = rows(db, "SELECT run_id, trace_steps, traced_step_time_s, median_step_time_s, "
                      f"trace_overhead FROM runs WHERE {DDP}")  # fmt: skip
    assert run["trace_steps"] == 2 and run["traced_step_time_s"] > 0
    assert run["trace_overhead"] == pytest.approx(
        run["traced_step_time_s"] / run["median_step_time_s"]
    )
    counts = rows(db, f"SELECT rank, count(*) AS n FROM steps WHERE {DDP} GROUP BY rank ORDER BY 1")
    assert [c["n"] for c in counts] == [3, 3]  # 1 warmup + 2 timed: no traced step
    phases = {r["phase"] for r in rows(db, "SELECT DISTINCT phase FROM run_phases")}
    assert "traced_steps" in phases


def test_trace_exposure_has_the_measured_figure_and_no_fit_from_one_link(traced):
    _, db = traced
    (row,) = rows(db, "SELECT * FROM trace_exposure WHERE strategy = 'ddp'")
    assert (row["strategy"], row["link"], row["n_runs"]) == ("ddp", "default", 1)
    assert 0 <= row["measured_low_s"] <= row["measured_exposed_s"] <= row["measured_high_s"]
    assert row["measured_comm_s"] > 0
    assert row["fitted_exposed_s"] is None  # one link: nothing to fit an exposure from


def test_the_report_draws_the_traced_step_and_tables_the_exposure(traced, tmp_path):
    import matplotlib.image as mpimg

    from orchestrator.cli import main

    _, db = traced
    out = tmp_path / "report"
    assert main(["report", "--db", str(db), "--out", str(out)]) == 0
    html = (out / "report.html").read_text()
    assert "Measured overlap (traced steps)" in html and "<code>trace_exposure</code>" in html
    assert "<code>trace_collective_exposure</code>" in html and "reduce_scatter" in html
    img = mpimg.imread(out / "trace_timeline.png")
    assert img.shape[0] > 100 and img.shape[1] > 100


def test_each_interval_is_named_by_the_collective_called_with_the_recorders_bytes(traced):
    """DDP's buckets are all_reduces; FSDP2 calls all_gather and reduce_scatter, and gloo runs
    the reduce_scatter as an all_reduce. Every interval is paired with its call and carries the
    collective recorder's bytes, which add up per step to what the profiled pass measured."""
    _, db = traced
    got = rows(
        db,
        """SELECT r.strategy, r.comm_bytes_per_step, t.* FROM trace_collectives t
                      JOIN runs r USING (run_id) ORDER BY strategy, rank, step, issued_op""",
    )
    assert {(r["rank"], r["step"]) for r in got} == {(k, s) for k in (0, 1) for s in (0, 1)}
    names = {s: {(r["issued_op"], r["ran_as"]) for r in got if r["strategy"] == s} for s in
             ("ddp", "fsdp")}  # fmt: skip
    assert names == {
        "ddp": {("all_reduce", "all_reduce")},
        "fsdp": {("all_gather", "all_gather"), ("reduce_scatter", "all_reduce")},
    }
    for r in got:
        assert r["group_size"] == 2 and r["n"] >= 1 and r["msg_bytes"] > 0, r
        assert 0 <= r["exposed_s"] <= r["busy_s"] + 1e-12, r
    per_step: dict[tuple, int] = {}
    for r in got:
        key = (r["strategy"], r["rank"], r["step"])
        per_step[key] = per_step.get(key, 0) + r["msg_bytes"]
    measured = {r["strategy"]: r["comm_bytes_per_step"] for r in got}
    assert all(b == pytest.approx(measured[k[0]]) for k, b in per_step.items()), (
        per_step,
        measured,
    )


def test_each_rank_measured_its_clock_against_rank_0s_within_its_uncertainty(traced):
    """One host, one clock: the true offset is 0, so each rank's measured offset lies within its
    uncertainty (a bound by causality), and that bound is a few loopback round trips."""
    _, db = traced
    got = rows(
        db,
        """SELECT r.strategy, t.rank, t.base_time_ns, t.clock_offset_ns, t.clock_uncertainty_ns
           FROM traces t JOIN runs r USING (run_id) ORDER BY strategy, rank""",
    )
    assert [(r["strategy"], r["rank"]) for r in got] == [
        ("ddp", 0), ("ddp", 1), ("fsdp", 0), ("fsdp", 1),
    ]  # fmt: skip
    for r in got:
        assert r["base_time_ns"] > 1_700_000_000 * 10**9, r  # a Unix time in ns
        if r["rank"] == 0:
            assert (r["clock_offset_ns"], r["clock_uncertainty_ns"]) == (0, 0)
        else:
            assert abs(r["clock_offset_ns"]) <= r["clock_uncertainty_ns"] < 100_000_000, r


def test_the_merged_trace_has_every_rank_as_a_process_on_one_clock(traced):
    _, db = traced
    [run] = rows(db, f"SELECT run_id, merged_trace_path FROM runs WHERE {DDP}")
    with gzip.open(run["merged_trace_path"]) as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1"}
    for rank in (0, 1):
        ts = [e["ts"] for e in events if e["pid"] == rank and e["ph"] != "M"]
        assert ts == sorted(ts)
        steps = [e for e in events if e["pid"] == rank and e.get("name") == "ProfilerStep#0"]
        assert len(steps) == 1
    # on one clock the two ranks' first traced steps begin within a step of each other
    start = {
        e["pid"]: e["ts"] for e in events if e.get("name") == "ProfilerStep#0" and e["ph"] == "X"
    }
    step_us = max(e["dur"] for e in events if e.get("name") == "ProfilerStep#0")
    assert abs(start[0] - start[1]) < step_us


def test_the_rebased_traces_sit_in_the_runs_folder_each_naming_its_rank(traced):
    _, db = traced
    got = rows(db, f"SELECT run_id, rank, rebased_path FROM traces WHERE {DDP} ORDER BY rank")
    folders = {os.path.dirname(r["rebased_path"]) for r in got}
    assert len(folders) == 1 and sorted(os.listdir(folders.pop())) == [
        "rank0.json.gz",
        "rank1.json.gz",
    ]
    for r in got:
        with gzip.open(r["rebased_path"]) as f:
            doc = json.load(f)
        assert doc["distributedInfo"]["rank"] == r["rank"]


def test_exposed_time_splits_into_waited_and_transfer_per_rank_and_step(traced):
    _, db = traced
    got = rows(db, "SELECT * FROM trace_wait WHERE step IS NOT NULL")
    assert {(r["rank"], r["step"]) for r in got} >= {(k, s) for k in (0, 1) for s in (0, 1)}
    for r in got:
        assert r["waited_s"] >= 0 and r["transfer_s"] >= 0, r
        assert r["waited_s"] + r["transfer_s"] == pytest.approx(r["exposed_s"], abs=1e-9), r
    summary = rows(db, "SELECT strategy, exposed_s, waited_s, transfer_s FROM trace_wait_summary")
    assert sorted(s["strategy"] for s in summary) == ["ddp", "fsdp"]
    lateness = rows(db, "SELECT run_id, rank, score FROM trace_lateness")
    assert len(lateness) == 4 and all(r["score"] >= 0 for r in lateness)
