"""The link model in the database, without Ray: a v2 database upgrades to v3 with its rows,
``refresh_link_model`` fills ``link_model`` / ``link_model_check`` for one variant group from
stored runs, and ``linksweep project`` reads a sweep and projects it (exit 2 on bad input)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from orchestrator.cli import main
from orchestrator.store import SCHEMA_VERSION, Q, Store, read_query
from orchestrator.sweep.execute import refresh_link_model
from orchestrator.sweep.planner import Variant
from tests.integration.schema_v2 import as_v2

COMPUTE_S, EXPOSURE = 0.4, 0.9
COMM_S = {"r50": 4.0, "r100": 2.0, "r300": 0.667, "r1g": 0.2}
PEAK = {"r50": 0.00625, "r100": 0.0125, "r300": 0.0375, "r1g": 0.125}  # GB/s


def _fill(store: Store, sweep_id: str = "s1") -> None:
    """A sweep with zero3 ga8 spread on 4 links x 2 repeats (one failed) and its link_bench."""
    runs, bench, seq = [], [], 0
    for link, x in COMM_S.items():
        for rep in (1, 2):
            seq += 1
            jitter = 1.0 + 0.01 * (rep - 1.5)
            failed = link == "r300" and rep == 2
            runs.append({
                "run_id": f"{sweep_id}-{seq}", "sweep_id": sweep_id, "seq": seq,
                **Variant("zero3", 8, link, "spread", bucket_mb=25).axes, "repeat": rep,
                "status": "failed" if failed else "ok", "throttled": False,
                "median_step_time_s": None if failed else (COMPUTE_S + EXPOSURE * x) * jitter,
                "predicted_comm_s_per_step": None if failed else x,
            })  # fmt: skip
        bench.append({"sweep_id": sweep_id, "link": link, "placement": "spread",
                      "op": "all_reduce", "msg_bytes": 1 << 22, "iteration": 0,
                      "time_s": 1.0, "algbw_gbps": PEAK[link], "busbw_gbps": PEAK[link],
                      "status": "ok"})  # fmt: skip
        # A small message inside the shaper's burst beats the rate: not the link's busbw.
        bench.append(bench[-1] | {"msg_bytes": 1 << 16, "busbw_gbps": 10 * PEAK[link]})
    with store.transaction():
        store.insert("sweeps", [{"sweep_id": sweep_id, "name": "lm", "spec": {"seed": 0}}])
        store.insert("runs", runs)
        store.insert("link_bench", bench)


def test_v2_database_upgrades_to_the_current_version_keeping_rows(tmp_path):
    db = str(tmp_path / "v2.duckdb")
    with Store(db) as s:
        _fill(s)
    as_v2(db)  # what linksweep v2 wrote: no link model tables, no v3 columns, version 2
    with Store(db) as s:
        assert s.query("SELECT count(*) FROM runs")[1] == [(8,)]
        assert s.query("SELECT count(*) FROM link_model")[1] == [(0,)]
        assert s.query("SELECT count(*) FROM link_model_check")[1] == [(0,)]
        # v5: the fleet check's tables, and the nodes a sweep kept off (NULL for older sweeps)
        assert s.query("SELECT count(*) FROM fleet_suspects")[1] == [(0,)]
        assert s.query("SELECT count(*) FROM sweeps WHERE excluded_nodes IS NULL")[1][0][0] > 0
    assert read_query(db, "SELECT value FROM meta")[1] == [(str(SCHEMA_VERSION),)]


def test_refresh_link_model_fills_one_group(tmp_path):
    db = str(tmp_path / "r.duckdb")
    spec = SimpleNamespace(seed=0)
    with Store(db) as s:
        _fill(s)
        v = Variant("zero3", 8, "r50", "spread", bucket_mb=25)  # as _fill stored them
        refresh_link_model(s, spec, "s1", v)
        refresh_link_model(s, spec, "s1", v)  # idempotent: replaces, never duplicates
        (m,) = s.rows(Q.REPORT_LINK_MODEL, sweep_id="s1")
        check = s.rows(Q.REPORT_LINK_MODEL_CHECK, sweep_id="s1")
        (table_row,) = s.rows(Q.LINK_MODEL_EXPOSURE_TABLE, sweep_id="s1")
    assert (m["n_links"], m["n_runs"], m["n_excluded"], m["quality"]) == (4, 8, 1, "runs_excluded")
    assert m["exposure_ci_low"] <= EXPOSURE <= m["exposure_ci_high"]
    assert m["exposure"] == pytest.approx(EXPOSURE, rel=0.02)
    assert m["compute_s"] == pytest.approx(COMPUTE_S, rel=0.05)
    assert [c["link"] for c in check] == ["r1g", "r300", "r100", "r50"]
    assert all(abs(c["rel_error"]) < 0.05 for c in check)
    assert table_row["exposure"] == m["exposure"] and table_row["fit"] == "runs_excluded"


def test_project_command(tmp_path, capsys):
    db = str(tmp_path / "r.duckdb")
    with Store(db) as s:
        _fill(s)
    code = main(["project", "--db", db, "--bandwidth-gbps", "0.125,12.5", "--format", "json"])
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["strategy"], r["busbw_gbps"], r["scaled_from"]) for r in rows] == [
        ("zero3", 0.125, "r1g"), ("zero3", 12.5, "r1g")]  # fmt: skip
    fast = rows[1]
    assert fast["comm_s"] == pytest.approx(0.2 / 100)
    assert fast["step_s"] == pytest.approx(COMPUTE_S + EXPOSURE * 0.002, rel=0.05)
    assert fast["step_ci_low"] <= fast["step_s"] <= fast["step_ci_high"]
    assert fast["vs_link"] == "r1g" and fast["slowdown"] < 1
    assert main(["project", "--db", db, "--bandwidth-gbps", "1", "--format", "csv"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("strategy,offload,ga,") and len(out) == 2


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--bandwidth-gbps", "1,fast"], "--bandwidth-gbps"),
        (["--bandwidth-gbps", "0"], "--bandwidth-gbps"),
        (["--bandwidth-gbps", "1", "--sweep", "nope"], "--sweep nope"),
        (["--bandwidth-gbps", "1", "--db", "/nonexistent/x.duckdb"], "--db"),
    ],
)
def test_project_bad_input_exits_2(tmp_path, capsys, args, names):
    db = str(tmp_path / "r.duckdb")
    with Store(db) as s:
        _fill(s)
    assert main(["project", "--db", db, *args]) == 2
    assert names in capsys.readouterr().err


def test_project_requires_bandwidth(capsys):
    with pytest.raises(SystemExit) as e:
        main(["project"])
    assert e.value.code == 2 and "--bandwidth-gbps" in capsys.readouterr().err
