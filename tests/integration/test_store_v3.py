"""Schema v3 (run_phases): a v2 database is upgraded in place, its rows kept."""

from __future__ import annotations

import duckdb

from orchestrator.store import SCHEMA_VERSION, Q, Reader, Store, read_query


def _as_v2(db: str) -> None:
    """Make a fresh database look exactly like v2 wrote it: no run_phases, version 2."""
    con = duckdb.connect(db)
    con.execute("DROP TABLE run_phases")
    con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.close()


def test_v2_database_gets_run_phases_and_keeps_its_runs(tmp_path):
    assert SCHEMA_VERSION >= 3
    db = str(tmp_path / "old.duckdb")
    with Store(db) as s, s.transaction():
        s.insert("runs", [{"run_id": "kept", "sweep_id": "s", "status": "ok"}])
    _as_v2(db)
    assert read_query(db, "SELECT value FROM meta")[1] == [("2",)]
    with Store(db) as s:
        with s.transaction():
            s.insert("run_phases", [{"run_id": "kept", "rank": None, "phase": "commit",
                                     "seconds": 0.5}])  # fmt: skip
        assert s.query("SELECT run_id, status FROM runs")[1] == [("kept", "ok")]
    assert read_query(db, "SELECT value FROM meta")[1] == [(str(SCHEMA_VERSION),)]
    with Reader(db) as r:
        assert r.rows(Q.REPORT_PHASES, sweep_id="s") == [
            {"phase": "commit", "n_runs": 1, "median_s": 0.5, "total_s": 0.5}
        ]


def test_reader_upgrades_a_v2_database_once(tmp_path):
    db = str(tmp_path / "old.duckdb")
    Store(db).close()
    _as_v2(db)
    with Reader(db) as r:
        assert r.rows(Q.REPORT_PHASES, sweep_id="s") == []
    assert read_query(db, "SELECT value FROM meta")[1] == [(str(SCHEMA_VERSION),)]
