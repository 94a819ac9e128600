"""linksweep's results in a real MLflow tracking store (docs/mlflow.md): a check outside the suite
(``scripts/checks.sh mlflow``, which installs the ``mlflow`` extra first; ``.ci/run`` runs it
after the suite). MLflow's own SQLite store, read back with MLflow's search API.

One module-scoped scenario, on one machine (embedded Ray, no ``--address``), each step a real
``linksweep`` process:

1. ``run --mlflow`` of ``sweeps/quickstart.yaml`` cut to two runs (DDP, grad_accum 1, one
   repeat, two links, three timed steps), its driver killed (SIGKILL) after its second run is
   spooled and before the database has it (``LINKSWEEP_KILL_IN_COMMIT``): MLflow then holds the
   sweep (RUNNING) and the first run, logged as it finished;
2. ``run --resume --mlflow``: the spooled run committed, the sweep ended;
3. ``export --mlflow`` twice into the same store, and once into a fresh one.

The tests then read both stores back: one sweep run with its runs nested under it, nothing
twice, parameters = the catalog's axes, metrics and tags as the database has them, the report as
the sweep's artifacts, and the two stores alike. Then the unusable-URI errors before anything
runs. About 2 minutes on 2 cores, most of it Ray starting twice.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import mlflow  # the extra: scripts/checks/mlflow.sh installs it (missing: this check fails)
import pytest

from orchestrator.store import bring_up_to_date, read_query
from orchestrator.tracking import records
from workloads import catalog

REPO = Path(__file__).resolve().parents[2]
SWEEP = REPO / "sweeps" / "quickstart.yaml"
SMALL = [
    "--set", "grid.strategy=[ddp]", "--set", "grid.grad_accum=[1]", "--set", "repeats=1",
    "--set", "steps=3", "--set", "warmup_steps=1", "--set", "linkbench_max_mb=1",
]  # fmt: skip
"""Two runs: DDP at grad_accum 1 on each of the file's two links, three timed steps each; the
link microbenchmark stays (the link model's prediction needs it), at 1 MB."""


def linksweep(args: list[str], cwd: Path, env: dict | None = None, timeout_s: float = 400):
    """``linksweep ARGS`` as a process of its own; (exit code, stdout + stderr)."""
    full_env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    full_env |= {"PYTHONPATH": str(REPO), "RAY_DISABLE_USAGE_STATS": "1"} | (env or {})
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def q(db: Path, sql: str) -> list[dict]:
    bring_up_to_date(str(db))
    cols, rows = read_query(str(db), sql)
    return [dict(zip(cols, r, strict=True)) for r in rows]


def mlflow_runs(uri: str) -> list:
    client = mlflow.MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("linksweep")
    return [] if exp is None else list(client.search_runs([exp.experiment_id], max_results=1000))


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mlflow")
    db, uri = tmp / "r.duckdb", f"sqlite:///{tmp}/mlflow.db"
    timings = {}
    t0 = time.monotonic()
    rc, out = linksweep(
        ["run", str(SWEEP), "--db", str(db), "--mlflow", uri, *SMALL],
        tmp,
        env={"LINKSWEEP_KILL_IN_COMMIT": "2"},
    )
    timings["run killed"] = time.monotonic() - t0
    assert rc == -9, f"the driver should have killed itself in run 2's commit: {rc}\n{out[-3000:]}"
    assert "warning: mlflow" not in out, out[-3000:]
    before = mlflow_runs(uri)
    t0 = time.monotonic()
    rc, resumed = linksweep(
        ["run", str(SWEEP), "--db", str(db), "--mlflow", uri, "--resume", *SMALL], tmp
    )
    timings["resume"] = time.monotonic() - t0
    assert rc == 0, resumed[-3000:]
    assert "warning: mlflow" not in resumed, resumed[-3000:]  # every sync went through
    after_run = mlflow_runs(uri)
    exports = []
    t0 = time.monotonic()
    for _ in range(2):
        rc, out = linksweep(["export", "--mlflow", uri, "--db", str(db)], tmp)
        assert rc == 0, out[-3000:]
        exports.append(out)
    fresh = f"sqlite:///{tmp}/fresh.db"
    rc, out = linksweep(["export", "--mlflow", fresh, "--db", str(db), "--sweep", "latest"], tmp)
    assert rc == 0, out[-3000:]
    exports.append(out)
    timings["3 exports"] = time.monotonic() - t0
    print(f"\nmlflow check timings (s): {', '.join(f'{k} {v:.0f}' for k, v in timings.items())}")
    return dict(tmp=tmp, db=db, uri=uri, fresh=fresh, before=before, after_run=after_run,
                resumed=resumed, exports=exports)  # fmt: skip


def _split(runs) -> tuple:
    parents = [r for r in runs if r.data.tags.get(records.KIND) == "sweep"]
    children = [r for r in runs if r.data.tags.get(records.KIND) == "run"]
    return parents, children


def test_runs_are_logged_as_they_finish_and_the_resume_reuses_the_sweeps_run(scenario):
    parents, children = _split(scenario["before"])
    assert len(parents) == 1 and parents[0].info.status == "RUNNING"  # its driver was killed
    assert [c.data.tags[records.RUN_ID] for c in children] == [
        r["run_id"] for r in q(scenario["db"], "SELECT run_id FROM runs WHERE seq = 1")
    ]  # the first run, logged when it finished; the second was only spooled
    assert "resuming sweep" in scenario["resumed"]
    sweep_id = parents[0].data.tags[records.SWEEP_ID]
    assert (
        f"linksweep: mlflow: sweep {sweep_id} logged to {scenario['uri']} (experiment linksweep, "
        f"MLflow run {parents[0].info.run_id})" in scenario["resumed"]
    )
    parents_after, children_after = _split(scenario["after_run"])
    assert [p.info.run_id for p in parents_after] == [parents[0].info.run_id]
    assert parents_after[0].info.status == "FINISHED"
    assert len(children_after) == 2


def test_one_sweep_run_with_every_run_nested_once(scenario):
    parents, children = _split(mlflow_runs(scenario["uri"]))
    (sweep,) = q(scenario["db"], "SELECT * FROM sweeps")
    assert len(parents) == 1
    parent = parents[0]
    assert parent.data.tags[records.SWEEP_ID] == sweep["sweep_id"]
    assert parent.data.tags[records.STATUS] == "ok"
    assert parent.data.params["model"] == "gpt2-tiny" and parent.data.params["steps"] == "3"
    assert parent.data.metrics == {"runs_planned": 2.0, "runs_stored": 2.0, "runs_failed": 0.0}
    db_runs = q(scenario["db"], "SELECT * FROM runs ORDER BY seq")
    assert sorted(c.data.tags[records.RUN_ID] for c in children) == sorted(
        r["run_id"] for r in db_runs
    )
    assert {c.data.tags[records.PARENT] for c in children} == {parent.info.run_id}
    assert {c.info.status for c in children} == {"FINISHED"}


def test_params_are_the_catalogs_axes_and_metrics_and_tags_the_databases(scenario):
    _, children = _split(mlflow_runs(scenario["uri"]))
    db_runs = {r["run_id"]: r for r in q(scenario["db"], "SELECT * FROM runs")}
    slowdowns = q(scenario["db"], "SELECT link, slowdown FROM link_sensitivity")
    assert slowdowns, "two links: the sweep has a slowdown"
    client = mlflow.MlflowClient(tracking_uri=scenario["uri"])
    for c in children:
        row = db_runs[c.data.tags[records.RUN_ID]]
        assert c.data.params == {k: str(row[k]) for k in catalog.variant_key()}
        for column in ("median_step_time_s", "tokens_per_s", "comm_bytes_per_step"):
            assert c.data.metrics[column] == pytest.approx(row[column], rel=1e-12)
        assert "mfu" not in c.data.metrics  # NULL on CPU: left out
        history = client.get_metric_history(c.info.run_id, records.STEP_HISTORY)
        assert sorted(m.step for m in history) == sorted(
            r["step"] for r in q(scenario["db"], f"SELECT step FROM step_times "
                                 f"WHERE run_id = '{row['run_id']}'")
        )  # fmt: skip
        assert len(history) == row["n_steps"] == 3  # logged once, not once per export
        tags = c.data.tags
        assert tags[records.STATUS] == "ok" and tags["linksweep.version.torch"]
        assert tags[records.SWEEP_ID] == row["sweep_id"]
    by_link = {c.data.params["link"]: c for c in children}
    for s in slowdowns:
        assert by_link[s["link"]].data.metrics["slowdown"] == pytest.approx(s["slowdown"])
    for exposure in q(scenario["db"], "SELECT exposure FROM link_model WHERE n_links >= 2"):
        if exposure["exposure"] is not None:
            for c in children:
                assert c.data.metrics["exposure"] == pytest.approx(exposure["exposure"])


def test_exporting_again_logs_nothing(scenario):
    first, second, _ = scenario["exports"]
    assert "0 MLflow run(s) created, 0 updated, 3 unchanged" in first, first
    assert "0 MLflow run(s) created, 0 updated, 3 unchanged" in second, second
    assert "report logged" not in first + second  # the resumed driver logged it as it ended
    runs = mlflow_runs(scenario["uri"])
    assert len(runs) == 3


def test_the_report_is_the_sweeps_artifacts(scenario):
    client = mlflow.MlflowClient(tracking_uri=scenario["uri"])
    (parent,), _ = _split(mlflow_runs(scenario["uri"]))
    names = {Path(f.path).name for f in client.list_artifacts(parent.info.run_id, "report")}
    assert {"report.html", "sweep.json"} <= names
    assert any(n.endswith(".png") for n in names), names
    local = client.download_artifacts(
        parent.info.run_id, "report/report.html", str(scenario["tmp"])
    )
    assert parent.data.tags[records.SWEEP_ID] in Path(local).read_text()
    assert parent.data.tags[records.REPORT_OF].startswith("ok ")


def test_an_export_into_a_fresh_store_logs_the_same(scenario):
    assert (
        "3 MLflow run(s) created, 0 updated, 0 unchanged; report logged" in scenario["exports"][2]
    )
    one, two = (_split(mlflow_runs(u)) for u in (scenario["uri"], scenario["fresh"]))
    assert one[0][0].data.params == two[0][0].data.params
    key = lambda c: c.data.tags[records.RUN_ID]  # noqa: E731
    for a, b in zip(sorted(one[1], key=key), sorted(two[1], key=key), strict=True):
        assert a.data.params == b.data.params and a.data.metrics == b.data.metrics


def test_the_tracking_uri_is_not_in_the_stored_sweep(scenario):
    (sweep,) = q(scenario["db"], "SELECT spec::VARCHAR AS spec FROM sweeps")
    assert "mlflow" not in sweep["spec"] and "sqlite" not in sweep["spec"]


def test_an_unreachable_server_is_refused_before_anything_runs(tmp_path):
    db = tmp_path / "r.duckdb"
    t0 = time.monotonic()
    rc, out = linksweep(
        ["run", str(SWEEP), "--db", str(db), "--mlflow", "http://127.0.0.1:9"], tmp_path
    )
    assert rc == 2, out
    assert "--mlflow http://127.0.0.1:9: cannot reach the MLflow tracking server" in out
    assert "Ray" not in out and not db.exists()
    assert time.monotonic() - t0 < 60
    db.touch()  # export checks the URI once the database is there, before reading it
    rc, out = linksweep(["export", "--mlflow", "http://127.0.0.1:9", "--db", str(db)], tmp_path)
    assert rc == 2 and "cannot reach the MLflow tracking server" in out, out
    rc, out = linksweep(
        ["export", "--mlflow", f"sqlite:///{tmp_path}/no/such/mlflow.db", "--db", str(db)],
        tmp_path,
    )
    assert rc == 2 and "does not exist (MLflow creates the file, not folders)" in out, out
    assert db.stat().st_size == 0  # nothing written
