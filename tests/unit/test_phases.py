"""Run phases without Ray: the rank's stopwatch, the rows they become, the report's table."""

from __future__ import annotations

import datetime as dt

import pytest

from orchestrator.raycluster.result import RunResult
from orchestrator.report.phases import phase_table, phases_html, sweep_wall_s
from orchestrator.sweep.planner import plan_runs
from orchestrator.sweep.rows import RunFacts, build_rows, commit_phase_row, phase_rows
from orchestrator.sweep.spec import parse_spec
from workloads.contract import (
    PHASES,
    PhaseTiming,
    RankRecord,
    StepRecord,
    TelemetryRecord,
    TrainingRecord,
)
from workloads.phases import PhaseClock

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def test_clock_adds_up_a_phase_timed_twice_and_refuses_unknown_names():
    clock = PhaseClock()
    clock.add("warmup", 1.5)
    clock.add("warmup", 0.25)
    with clock.phase("pg_init"):
        pass
    recs = clock.records()
    assert recs[0] == PhaseTiming("warmup", 1.75)
    assert recs[1].phase == "pg_init" and 0 <= recs[1].seconds < 1
    with pytest.raises(ValueError, match="unknown phase 'lunch'"):
        clock.add("lunch", 1.0)


def test_clock_times_a_phase_that_raises():
    clock = PhaseClock()
    with pytest.raises(RuntimeError), clock.phase("strategy_init"):
        raise RuntimeError("deepspeed said no")
    assert [r.phase for r in clock.records()] == ["strategy_init"]


def _training(**phases: float) -> TrainingRecord:
    return TrainingRecord(
        steps=(StepRecord(0, False, 0.1, 2, 64, 3.0),),
        n_params=10,
        data_source="builtin",
        tokenizer="byte",
        first_step_wall_s=105.0,
        peak_mem_bytes=1,
        comms=(),
        profile_steps=0,
        telemetry=TelemetryRecord("absent: CPU run"),
        nvme_swap_files=0,
        phases=tuple(PhaseTiming(p, s) for p, s in phases.items()),
    )


def _rank(rank: int, created: float, **rank_phases: float) -> RankRecord:
    return RankRecord(
        rank=rank,
        local_rank=rank,
        backend="gloo",
        device="cpu",
        created_wall_s=created,
        training=_training(warmup=0.5 + rank, timed_steps=2.0, rank_teardown=0.1),
        phases=tuple(PhaseTiming(p, s) for p, s in rank_phases.items()),
    )


def _result() -> RunResult:
    return RunResult(
        rank_records=[
            _rank(0, 101.0, imports=3.0, pg_init=0.2, rank_teardown=0.05),
            _rank(1, 102.5, imports=3.5, pg_init=0.1, rank_teardown=0.02),
        ],
        actors_created_wall_s=100.0,
        driver_phases={"teardown": 0.3, "placement": 0.01},
    )


def test_phase_rows_driver_first_then_each_rank_in_phase_order():
    rows = phase_rows("r1", _result())
    driver = [(r["phase"], r["seconds"]) for r in rows if r["rank"] is None]
    assert driver == [("placement", 0.01), ("teardown", 0.3)]
    rank1 = {r["phase"]: r["seconds"] for r in rows if r["rank"] == 1}
    assert rank1["process_start"] == pytest.approx(2.5)  # created 102.5 - requested 100.0
    assert rank1["rank_teardown"] == pytest.approx(0.12)  # pg destroy + strategy teardown
    assert rank1["warmup"] == 1.5 and rank1["imports"] == 3.5
    order = [PHASES.index(r["phase"]) for r in rows if r["rank"] == 0]
    assert order == sorted(order)
    assert {r["run_id"] for r in rows} == {"r1"}
    assert commit_phase_row("r1", 0.2) == {
        "run_id": "r1",
        "rank": None,
        "phase": "commit",
        "seconds": 0.2,
    }


def test_a_failed_run_keeps_the_driver_phases():
    spec = parse_spec({"name": "p", "world_size": 2, "links": {"default": {}}})
    failed = RunResult(
        error="placement group could not be placed", driver_phases={"placement": 120.0}
    )
    out = build_rows(RunFacts(spec, "s", plan_runs(spec)[0], "r9", NOW, NOW), failed)
    assert out.run["status"] == "failed"
    assert out.phases == [{"run_id": "r9", "rank": None, "phase": "placement", "seconds": 120.0}]


def test_build_rows_carries_every_rank_phase():
    spec = parse_spec({"name": "p", "world_size": 2, "steps": 1, "warmup_steps": 0,
                       "links": {"default": {}}})  # fmt: skip
    out = build_rows(RunFacts(spec, "s", plan_runs(spec)[0], "r1", NOW, NOW), _result())
    assert out.phases == phase_rows("r1", _result())
    assert {r["rank"] for r in out.phases} == {None, 0, 1}


def test_report_table_orders_phases_and_shares_sum_to_one():
    phases = [
        {"phase": "timed_steps", "n_runs": 2, "median_s": 1.0, "total_s": 2.0},
        {"phase": "commit", "n_runs": 2, "median_s": 0.1, "total_s": 0.2},
        {"phase": "imports", "n_runs": 2, "median_s": 3.0, "total_s": 6.0},
    ]
    rows = phase_table(phases)
    assert [r["phase"] for r in rows] == ["imports", "timed_steps", "commit"]
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    assert rows[0]["share"] == pytest.approx(6.0 / 8.2)


def test_report_section_says_the_sweep_efficiency():
    from orchestrator.report.reading import ReportData

    sweep = {"started_at": NOW, "finished_at": NOW + dt.timedelta(seconds=20)}
    assert sweep_wall_s(sweep) == 20.0
    data = ReportData(
        sweep=sweep, spec={}, versions={}, baseline_link=None, link_order=[], runs=[],
        variants=[], sensitivity=[], step_times=[], bandwidth=[], bench_failures=[], nodes=[],
        gpus=[], gpu_links=[],
        phases=[{"phase": "timed_steps", "n_runs": 2, "median_s": 1.0, "total_s": 2.0},
                {"phase": "imports", "n_runs": 2, "median_s": 4.0, "total_s": 8.0}],
    )  # fmt: skip
    html = phases_html(data)
    assert "Timed steps were 10% of the sweep" in html
    assert html.index("imports") < html.index("timed_steps")
    empty = ReportData(**{**data.__dict__, "phases": []})
    assert "No run phases stored" in phases_html(empty)
