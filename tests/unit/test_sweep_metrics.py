"""Live sweep metrics without Ray: the values from the progress callbacks
(``orchestrator/metrics/progress.py``), the observer with a stand-in gauge, the ``--metrics``
check, the fleet loop's progress and the Grafana dashboard's metric names. The real thing (Ray's
metrics agent scraped by Prometheus during a sweep) is tests/checks/test_prometheus.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator import cli
from orchestrator.analysis import stats
from orchestrator.metrics import progress as p
from orchestrator.metrics import sweep_metrics
from orchestrator.sweep.planner import Variant

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "clusters" / "grafana" / "linksweep-sweep.json"


def variant(link: str, strategy: str = "ddp", ga: int = 1) -> Variant:
    return Variant(strategy, ga, link, "pack")


def run_row(v: Variant, step_s: float | None, status: str = "ok") -> dict:
    """A ``runs`` row as ``rows.build_rows`` makes it, with what the figures read."""
    return {**v.axes, "status": status, "median_step_time_s": step_s, "error": None}


def values(samples) -> dict:
    return {(s.name, s.labels): s.value for s in samples}


def one(samples, name: str) -> float:
    (value,) = [s.value for s in samples if s.name == name]
    return value


# --- the declarations -------------------------------------------------------------------------


def test_every_metric_is_named_as_prometheus_wants_with_its_unit_last():
    for name, m in p.METRICS.items():
        assert name == m.name and re.fullmatch(r"linksweep_(sweep|fleet)_[a-z_]+", name)
        assert (m.unit == "") == (not name.endswith(("_seconds", "_ratio"))), name
        if m.unit:
            assert name.endswith("_" + m.unit)
        assert m.labels[0] in ("sweep_id", "fleet_id") and m.help
        assert p.exported_name(name) == "ray_" + name


def test_a_sample_must_carry_exactly_its_metrics_labels():
    p.sample("linksweep_sweep_runs_done", 1, sweep_id="s")
    with pytest.raises(ValueError, match="declared"):
        p.sample("linksweep_sweep_runs_done", 1, sweep_id="s", variant="x")
    with pytest.raises(ValueError, match="declared"):
        p.sample("linksweep_sweep_step_time_seconds", 1, sweep_id="s")


# --- the time left ----------------------------------------------------------------------------


def test_time_left_is_mean_times_left_less_the_current_runs_age():
    assert p.time_left_s(None, 5, 3.0) is None  # no run finished: unknown
    assert p.time_left_s(10.0, 4, None) == 40.0
    assert p.time_left_s(10.0, 4, 3.0) == 37.0
    assert p.time_left_s(10.0, 4, 25.0) == 30.0  # a run past the mean counts as nearly done
    assert p.time_left_s(10.0, 0, 3.0) == 0.0


# --- a sweep's values -------------------------------------------------------------------------


def test_counts_step_times_and_time_left_follow_the_runs():
    s = p.SweepProgress("sw", n_runs=4, baseline_link="fast")
    assert one(s.started(), "linksweep_sweep_runs_left") == 4
    fast, slow = variant("fast"), variant("slow")
    out = s.run_started(1, 1, fast, now=100.0)
    assert "linksweep_sweep_time_left_seconds" not in {x.name for x in out}  # nothing ran yet
    info = [x for x in out if x.name == "linksweep_sweep_current_run_info"]
    assert info[0].value == 1 and info[0].tags["variant"] == fast.label
    out = s.run_finished(fast, run_row(fast, 0.5), now=110.0)
    assert one(out, "linksweep_sweep_runs_done") == 1
    assert one(out, "linksweep_sweep_runs_left") == 3
    assert one(out, "linksweep_sweep_step_time_seconds") == 0.5
    assert one(out, "linksweep_sweep_time_left_seconds") == 30.0  # 10 s x 3 left
    out = s.run_started(2, 1, slow, now=111.0)
    assert ("linksweep_sweep_current_run_info", info[0].labels) in values(out)
    assert values(out)[("linksweep_sweep_current_run_info", info[0].labels)] == 0  # no longer
    assert one(s.heartbeat(1.7e9, now=115.0), "linksweep_sweep_time_left_seconds") == 26.0
    out = s.run_finished(slow, run_row(slow, None, status="failed"), now=131.0)
    assert one(out, "linksweep_sweep_runs_done") == 2
    assert one(out, "linksweep_sweep_runs_failed") == 1
    assert "linksweep_sweep_step_time_seconds" not in {x.name for x in out}  # failed: no figure
    assert one(out, "linksweep_sweep_time_left_seconds") == 30.0  # mean 15 s x 2 left
    end = s.finished()
    assert one(end, "linksweep_sweep_running") == 0
    assert one(end, "linksweep_sweep_time_left_seconds") == 0


def test_the_slowdown_appears_once_the_baseline_ran_and_is_the_stored_figure():
    s = p.SweepProgress("sw", n_runs=6, baseline_link="fast", seed=3)
    fast, slow = variant("fast"), variant("slow")
    rows = []
    out = s.run_finished(slow, rows.append(run_row(slow, 2.0)) or rows[-1], now=1.0)
    assert "linksweep_sweep_slowdown_ratio" not in {x.name for x in out}  # no baseline yet
    for v, step in ((fast, 1.0), (slow, 3.0), (fast, 1.2)):
        rows.append(run_row(v, step))
        out = s.run_finished(v, rows[-1], now=1.0)
    (ratio,) = [x for x in out if x.name == "linksweep_sweep_slowdown_ratio"]
    assert ratio.tags["variant"] == slow.label and ratio.tags["baseline_link"] == "fast"
    _, sens = stats.variant_and_sensitivity_rows("sw", [p.as_stats_run(r) for r in rows], "fast", 3)
    assert ratio.value == pytest.approx(sens[0]["slowdown"]) == pytest.approx(2.5 / 1.1)


def test_a_rehearsal_run_gets_a_step_time_but_never_a_slowdown():
    s = p.SweepProgress("sw", n_runs=2, baseline_link="fast")
    fast, slow = variant("fast"), variant("slow")
    for v in (fast, slow):
        row = run_row(v, 1.0) | {"ranks_per_gpu": 2, "link_class": "shared-gpu"}
        out = s.run_finished(v, row, now=0.0)
    assert "linksweep_sweep_slowdown_ratio" not in {x.name for x in out}
    assert one(out, "linksweep_sweep_step_time_seconds") == 1.0


# --- the observer -----------------------------------------------------------------------------


class Gauges:
    """Stand-in for ``session.gauge``: each gauge's last value per label set."""

    def __init__(self, fail: bool = False) -> None:
        self.made: dict[str, tuple] = {}
        self.now: dict[tuple, float] = {}
        self.fail = fail

    def __call__(self, name, description, labels):
        self.made[name] = labels
        board = self

        class Gauge:
            def set(self, value, tags):
                if board.fail:
                    raise RuntimeError("no metrics agent")
                assert tuple(tags) == labels
                board.now[(name, tuple(tags.items()))] = value

        return Gauge()

    def value(self, name: str, **tags) -> float:
        hits = [
            v for (n, t), v in self.now.items() if n == name and tags.items() <= dict(t).items()
        ]
        assert len(hits) == 1, (name, tags, hits)
        return hits[0]


@pytest.fixture
def fresh_gauges(monkeypatch):
    monkeypatch.setattr(sweep_metrics, "_GAUGES", {})


def test_the_observer_sets_each_callbacks_values_on_gauges(fresh_gauges):
    gauges, clock = Gauges(), iter(range(0, 1000, 10))
    obs = sweep_metrics.RayMetrics(gauges, clock=lambda: next(clock), wall=lambda: 1.7e9)
    spec = SimpleNamespace(baseline="fast", seed=0)
    obs.sweep_started(spec, "sw", 2)
    assert gauges.value("linksweep_sweep_running", sweep_id="sw") == 1
    assert gauges.value("linksweep_sweep_heartbeat_timestamp_seconds") == 1.7e9
    for seq, link in enumerate(("fast", "slow"), start=1):
        planned = SimpleNamespace(seq=seq, repeat=1, variant=variant(link))
        obs.run_started(planned, f"r{seq}")
        obs.tick({})
        obs.run_finished(planned, run_row(planned.variant, 0.5 * seq))
    obs.sweep_finished("sw", "ok")
    assert obs.beating is not None and not obs.beating.is_alive()
    assert gauges.value("linksweep_sweep_runs_done") == 2
    assert gauges.value("linksweep_sweep_runs_left") == 0
    assert gauges.value("linksweep_sweep_running") == 0
    assert gauges.value("linksweep_sweep_slowdown_ratio", link="slow") == 2.0
    assert gauges.value("linksweep_sweep_step_time_seconds", link="fast") == 0.5
    assert set(gauges.made) <= set(p.METRICS)


def test_a_gauge_that_fails_is_said_once_and_never_stops_the_sweep(fresh_gauges, capsys):
    obs = sweep_metrics.RayMetrics(Gauges(fail=True))
    obs.sweep_started(SimpleNamespace(baseline="fast", seed=0), "sw", 1)
    planned = SimpleNamespace(seq=1, repeat=1, variant=variant("fast"))
    obs.run_started(planned, "r1")
    obs.run_finished(planned, run_row(planned.variant, 0.5))
    obs.sweep_finished("sw", "ok")
    assert capsys.readouterr().err.count("--metrics: RuntimeError: no metrics agent") == 1


# --- the option and its check -----------------------------------------------------------------


def test_metrics_on_the_embedded_cluster_is_refused_before_anything_runs(
    monkeypatch, tmp_path, capsys
):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    db = tmp_path / "r.duckdb"
    rc = cli.main(["run", str(REPO / "sweeps" / "quickstart.yaml"), "--db", str(db), "--metrics"])
    err = capsys.readouterr().err
    assert rc == 2 and "--metrics: the embedded cluster" in err and "--address" in err
    assert not db.exists()
    rc = cli.main(["fleet", "--db", str(db), "--metrics"])
    assert rc == 2 and "--metrics: the embedded cluster" in capsys.readouterr().err


def test_metrics_with_an_address_or_ray_address_passes_the_check(monkeypatch):
    parser = cli.build_parser()
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    args = parser.parse_args(["run", "s.yaml", "--metrics", "--address", "10.0.0.1:6379"])
    assert args.metrics and sweep_metrics.problems(args) == []
    args = parser.parse_args(["fleet", "--metrics"])
    assert sweep_metrics.problems(args) == [sweep_metrics.EMBEDDED_REFUSED]
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert sweep_metrics.problems(args) == []
    assert sweep_metrics.problems(parser.parse_args(["fleet"])) == []  # not asked
    assert sweep_metrics.observers(parser.parse_args(["fleet"])) == []


def test_the_observer_is_made_where_the_node_exports_and_says_where(monkeypatch, capsys):
    import types

    from tests.unit.stand_in import stand_in

    fake = types.ModuleType("orchestrator.raycluster.session")
    fake.gauge = Gauges()
    fake.metrics_endpoint = lambda: ("10.0.0.1", 8080)
    stand_in(monkeypatch, fake)
    args = cli.build_parser().parse_args(["run", "s.yaml", "--metrics", "--address", "a:1"])
    (obs,) = sweep_metrics.observers(args, address="a:1", db="x", command="run")
    assert isinstance(obs, sweep_metrics.RayMetrics) and obs.make_gauge is fake.gauge
    assert "ray_linksweep_* at http://10.0.0.1:8080/metrics" in capsys.readouterr().err
    fake.metrics_endpoint = lambda: None  # a node without a metrics agent
    assert sweep_metrics.observers(args, address="a:1", db="x", command="run") == []
    assert "no metrics export port" in capsys.readouterr().err


# --- the fleet check's progress ---------------------------------------------------------------


def test_the_fleet_loop_tells_each_round_and_plans_as_many_as_it_stores(monkeypatch, tmp_path):
    from orchestrator.fleet import loop
    from orchestrator.fleet.pairs import parse_pairs
    from orchestrator.store.live import LiveStore
    from orchestrator.store.snapshot import load_fleet
    from tests.unit.stand_in import stand_in
    from tests.unit.test_fleet_loop import fake_ray_side, four

    told: list[tuple] = []
    stand_in(monkeypatch, fake_ray_side(four(("h0", "h0", "h1", "h1")))[0])
    db = str(tmp_path / "f.duckdb")
    opts = loop.FleetOptions(links={"a": {}, "b": {}}, pairs=parse_pairs("all"))
    tell = lambda *a: told.append(a)  # noqa: E731
    fleet_id = loop.run_fleet(LiveStore(db), opts, "addr", lambda s: None, tell)
    stored = load_fleet(db, fleet_id)["rounds"]
    assert told[0][:2] == ("fleet_started", fleet_id)
    assert told[-1] == ("fleet_finished", fleet_id, "ok")
    rounds = [a[2] for a in told if a[0] == "fleet_round_finished"]
    assert told[0][2] == len(rounds) == len(stored) == 1 + 2 * (1 + 2 + 3) + 2
    state = p.FleetProgress(fleet_id, told[0][2], now=0.0)
    for r in rounds:
        out = state.round_finished(r["wall_s"], now=1.0, planned=r["kind"] != "recheck")
    assert one(out, "linksweep_fleet_rounds_left") == 0
    assert one(out, "linksweep_fleet_rounds_done") == len(stored)


def test_a_recheck_makes_the_fleet_check_one_round_longer():
    state = p.FleetProgress("f", 3, now=0.0)
    state.round_finished(2.0, now=2.0)
    out = state.round_finished(4.0, now=6.0, planned=False)
    assert one(out, "linksweep_fleet_rounds_left") == 2  # 3 planned + 1 recheck - 2 done
    assert one(out, "linksweep_fleet_time_left_seconds") == 6.0  # mean 3 s x 2 left


# --- the Grafana dashboard --------------------------------------------------------------------


def test_the_grafana_dashboard_loads_and_names_only_metrics_that_exist():
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    named = {n for e in exprs for n in re.findall(r"\bray_[a-z_]+", e)}
    exported = {p.exported_name(n) for n in p.METRICS}
    assert named and named <= exported, named - exported
    # every sweep metric is on it (a fleet one may be left to the fleet panels)
    assert {n for n in exported if "_sweep_" in n} <= named
