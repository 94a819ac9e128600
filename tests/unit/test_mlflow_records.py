"""What MLflow should hold for a sweep (orchestrator/tracking/records.py), and the sync that logs
only what it lacks (mlflow_log.sync_sweep) against an in-memory tracker: no mlflow needed."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from orchestrator.tracking import mlflow_log, records
from workloads import catalog

T0 = dt.datetime(2026, 12, 1, 10, 0, tzinfo=dt.timezone.utc)


def _run(seq: int, link: str, strategy: str = "ddp", status: str = "ok", **extra) -> dict:
    row = {
        "run_id": f"run-{seq}",
        "sweep_id": "S1",
        "seq": seq,
        "repeat": 1,
        "attempt": 1,
        "strategy": strategy,
        "grad_accum": 1,
        "link": link,
        "placement": "pack",
        "model": "gpt2-tiny",
        "world_size": 2,
        "status": status,
        "started_at": T0 + dt.timedelta(seconds=10 * seq),
        "finished_at": T0 + dt.timedelta(seconds=10 * seq + 5),
        "median_step_time_s": 0.5 + seq,
        "tokens_per_s": 1000.0,
        "mfu": None,
        "comm_bytes_per_step": 4e6,
    }
    return catalog.filled(row) | extra


def _rows(status: str = "ok", runs=None, **extra) -> records.SweepRows:
    sweep = {
        "sweep_id": "S1",
        "name": "quickstart",
        "status": status,
        "started_at": T0,
        "finished_at": None if status == "running" else T0 + dt.timedelta(minutes=1),
        "n_runs_planned": 2,
        "git_sha": "abc123",
        "git_dirty": False,
        "versions": json.dumps({"torch": "2.13.0", "ray": "2.60.0", "nccl": None}),
        "spec": json.dumps({"name": "quickstart", "steps": 6, "grid": {"strategy": ["ddp"]}}),
    }
    runs = [_run(1, "default"), _run(2, "slow")] if runs is None else runs
    return records.SweepRows(sweep=sweep, runs=runs, **extra)


def test_a_runs_params_are_every_axis_of_the_catalog_and_only_those():
    (child,) = records.run_records(_rows(runs=[_run(1, "default")]))
    assert list(child.params) == list(catalog.variant_key())
    assert child.params["strategy"] == "ddp" and child.params["link"] == "default"
    assert child.params["grad_accum"] == "1"
    # an axis the row lacks (an older database) reads as the catalog fills it
    bare = {k: v for k, v in _run(1, "default").items() if k != "grad_sync"}
    assert records.axis_params(bare)["grad_sync"] == catalog.default("grad_sync", "ddp")


def test_a_runs_metrics_leave_out_nulls_and_tags_carry_ids_status_and_versions():
    (child,) = records.run_records(_rows(runs=[_run(1, "default")]))
    assert child.metrics == {
        "median_step_time_s": 1.5,
        "tokens_per_s": 1000.0,
        "comm_bytes_per_step": 4e6,
    }
    assert child.tags[records.RUN_ID] == "run-1" and child.tags[records.SWEEP_ID] == "S1"
    assert child.tags[records.STATUS] == "ok" and child.tags[records.KIND] == "run"
    assert child.tags["linksweep.version.torch"] == "2.13.0"
    assert "linksweep.version.nccl" not in child.tags  # not recorded: no tag
    assert child.tags[records.GIT_COMMIT] == "abc123"
    assert child.status == "FINISHED"
    assert child.end_ms - child.start_ms == 5000


def test_slowdown_and_exposure_join_the_runs_of_their_variant_when_known():
    key = catalog.variant_key()
    slow = _run(2, "slow")
    sensitivity = [{**{k: slow[k] for k in key}, "slowdown": 1.8, "ci_low": 1.5, "ci_high": 2.1}]
    group = {k: slow[k] for k in key if k != "link"}
    model = [{**group, "n_links": 2, "exposure": 0.4, "exposure_ci_low": 0.3, "compute_s": 0.2}]
    base, other = records.run_records(_rows(sensitivity=sensitivity, link_model=model))
    assert other.metrics["slowdown"] == 1.8 and other.metrics["slowdown_ci_high"] == 2.1
    assert "slowdown" not in base.metrics  # the baseline link has none
    assert base.metrics["exposure"] == other.metrics["exposure"] == 0.4
    assert "exposure_ci_high" not in base.metrics  # NULL in the row: left out
    one_link = [{**model[0], "n_links": 1}]
    base, _ = records.run_records(_rows(link_model=one_link))
    assert "exposure" not in base.metrics  # a fit over one link is no fit


def test_a_failed_run_is_failed_in_mlflow_with_its_error():
    (child,) = records.run_records(
        _rows(runs=[_run(1, "default", status="failed", error="boom\nstack")])
    )
    assert child.status == "FAILED" and child.tags[records.STATUS] == "failed"
    assert child.tags["linksweep.error"].startswith("boom")


def test_the_sweeps_record_takes_the_specs_scalars_and_counts_runs():
    parent = records.sweep_record(
        _rows(runs=[_run(1, "default"), _run(2, "slow", "ddp", "failed")])
    )
    assert parent.params == {"name": "quickstart", "steps": "6"}  # the grid is no parameter
    assert parent.metrics == {"runs_planned": 2.0, "runs_stored": 2.0, "runs_failed": 1.0}
    assert parent.tags[records.KIND] == "sweep" and parent.status == "FINISHED"
    running = records.sweep_record(_rows(status="running"))
    assert running.status == "RUNNING" and running.end_ms is None
    assert records.sweep_record(_rows(status="interrupted")).status == "KILLED"


def test_step_times_are_a_history_by_step():
    steps = [
        {"run_id": "run-1", "step": 1, "step_time_s": 0.6},
        {"run_id": "run-1", "step": 0, "step_time_s": 0.5},
    ]
    base, other = records.run_records(_rows(step_times=steps))
    assert base.history == {records.STEP_HISTORY: [(0, 0.5), (1, 0.6)]}
    assert other.history == {}


def _held(record: records.Record, run_id: str) -> records.Held:
    latest = dict(record.metrics)
    for key, points in record.history.items():
        latest[key] = points[-1][1]
    return records.Held(run_id, record.params, latest, record.tags, record.status, record.end_ms)


def test_changes_of_a_run_mlflow_holds_as_wanted_are_none():
    rows = _rows()
    parent, children = records.wanted(rows)
    held = [_held(parent, "p"), *(_held(c, f"c{i}") for i, c in enumerate(children))]
    p, cs = records.plan(rows, held)
    assert p.empty and all(c.empty for c in cs)


def test_changes_keep_only_what_is_new_or_changed():
    rows = _rows()
    parent, (child, _) = records.wanted(rows)
    held = _held(child, "c0")
    new = records.Record(
        child.key, child.name, child.params, {**child.metrics, "slowdown": 1.2},
        {**child.tags, records.STATUS: "ok"}, child.status, child.start_ms, child.end_ms,
    )  # fmt: skip
    update = records.changes(new, held)
    assert update.metrics == {"slowdown": 1.2} and update.params == {} and update.tags == {}
    assert not update.terminate
    changed = records.changes(
        records.Record(child.key, child.name, child.params, {**child.metrics, "tokens_per_s": 9.0},
                       child.tags, child.status, child.start_ms, child.end_ms),
        held,
    )  # fmt: skip
    assert changed.metrics == {"tokens_per_s": 9.0}
    fresh = records.changes(child, None)
    assert fresh.run_id is None and fresh.params == child.params and fresh.terminate


def test_a_resumed_sweep_reopens_and_ends_its_parent_again():
    rows = _rows(status="interrupted")
    parent = records.sweep_record(rows)
    held = _held(parent, "p")
    again = records.changes(records.sweep_record(_rows(status="running")), held)
    assert again.terminate and again.record.status == "RUNNING"
    done = records.changes(records.sweep_record(_rows(status="ok")), held)
    assert done.terminate and done.record.status == "FINISHED"


def test_plan_finds_mlflow_runs_by_their_linksweep_ids():
    rows = _rows()
    parent, children = records.wanted(rows)
    held = [_held(children[1], "c1")]  # only the second run was logged
    p, (c0, c1) = records.plan(rows, held)
    assert p.run_id is None and c0.run_id is None and c1.run_id == "c1" and c1.empty


def test_the_report_is_due_once_per_state_of_an_ended_sweep():
    rows = _rows()
    parent = records.sweep_record(rows)
    assert records.report_due(_rows(status="running"), []) is None
    state = records.report_due(rows, [_held(parent, "p")])
    assert state is not None
    logged = records.Held("p", tags={**parent.tags, records.REPORT_OF: state})
    assert records.report_due(rows, [logged]) is None
    resumed = _rows(runs=[_run(1, "default"), _run(2, "slow"), _run(3, "slow")])
    assert records.report_due(resumed, [logged]) not in (None, state)


# --- the sync, against an in-memory tracker -----------------------------------------------------


class FakeTracker:
    """MLflow's behaviour as the sync relies on it: runs found by tag, a parameter kept once
    (another value refused), metrics latest-wins."""

    def __init__(self):
        self.runs: dict[str, dict] = {}
        self.calls = 0

    def held(self, sweep_id):
        return [
            records.Held(rid, dict(r["params"]), dict(r["metrics"]), dict(r["tags"]),
                         r["status"], r["end_ms"])
            for rid, r in self.runs.items()
            if r["tags"].get(records.SWEEP_ID) == sweep_id
        ]  # fmt: skip

    def apply(self, update, parent_id=None):
        self.calls += 1
        run_id = update.run_id
        if run_id is None:
            run_id = f"m{len(self.runs)}"
            tags = {records.PARENT: parent_id} if parent_id else {}
            self.runs[run_id] = dict(params={}, metrics={}, tags=tags, status="RUNNING",
                                     end_ms=None, history=[])  # fmt: skip
        r = self.runs[run_id]
        for k, v in update.params.items():
            assert r["params"].get(k, v) == v, "MLflow refuses a second value of a param"
            r["params"][k] = v
        r["metrics"].update(update.metrics)
        r["tags"].update(update.tags)
        for key, points in update.history.items():
            r["history"] += points
            r["metrics"][key] = points[-1][1]
        if update.terminate:
            r["status"], r["end_ms"] = update.record.status, update.record.end_ms
        return run_id


class FakeSource:
    def __init__(self, rows: records.SweepRows):
        self.data = rows

    def rows(self, query, **params):
        from orchestrator.store import Q

        d = self.data
        return {
            Q.SWEEP.name: [d.sweep],
            Q.REPORT_RUNS.name: list(d.runs),
            Q.REPORT_SENSITIVITY.name: list(d.sensitivity),
            Q.REPORT_LINK_MODEL.name: list(d.link_model),
            Q.REPORT_STEP_TIMES.name: list(d.step_times),
        }[query.name]


def _sync(tracker: FakeTracker, source: FakeSource) -> mlflow_log.Synced:
    return mlflow_log.sync_sweep(tracker, mlflow_log.read_sweep(source, "S1"), "db", report=False)


def test_syncing_twice_logs_nothing_twice_and_a_resume_adds_only_its_runs():
    tracker = FakeTracker()
    first = FakeSource(_rows(status="interrupted", runs=[_run(1, "default")]))
    done = _sync(tracker, first)
    assert (done.created, done.updated, done.unchanged) == (2, 0, 0)
    again = _sync(tracker, first)
    assert (again.created, again.updated, again.unchanged) == (0, 0, 2)
    calls = tracker.calls
    key = catalog.variant_key()
    slow = _run(2, "slow")
    resumed = FakeSource(
        _rows(
            runs=[_run(1, "default"), slow],
            sensitivity=[{**{k: slow[k] for k in key}, "slowdown": 1.5}],
        )
    )
    done = _sync(tracker, resumed)
    assert (done.created, done.updated, done.unchanged) == (1, 1, 1)  # run 2; the parent ended
    assert tracker.calls == calls + 2
    assert len(tracker.runs) == 3
    (parent,) = [r for r in tracker.runs.values() if r["tags"][records.KIND] == "sweep"]
    assert parent["status"] == "FINISHED"
    children = [r for r in tracker.runs.values() if r["tags"][records.KIND] == "run"]
    assert {r["tags"][records.PARENT] for r in children} == {"m0"}
    assert sorted(r["tags"][records.RUN_ID] for r in children) == ["run-1", "run-2"]
    (second,) = [r for r in children if r["tags"][records.RUN_ID] == "run-2"]
    assert second["metrics"]["slowdown"] == 1.5
    assert (
        mlflow_log.sync_sweep(
            tracker, mlflow_log.read_sweep(resumed, "S1"), "db", report=False
        ).unchanged
        == 3
    )


@pytest.mark.parametrize("status", ["ok", "failed"])
def test_the_observer_never_fails_the_sweep(status, capsys, monkeypatch):
    class Down:
        def __init__(self, uri):
            raise RuntimeError("tracking store down\nmore")

    monkeypatch.setattr(mlflow_log.mlflow_client, "Tracker", Down)
    observer = mlflow_log.MlflowObserver("sqlite:///x.db", "r.duckdb")
    observer.sweep_started(None, "S1", 2)
    observer.run_finished(None, {"status": status})
    observer.sweep_finished("S1", status)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("linksweep: warning: mlflow: sweep S1 not fully logged")
    assert "(RuntimeError: tracking store down)" in lines[0]
    assert "linksweep export --mlflow sqlite:///x.db --db r.duckdb --sweep S1" in lines[0]
