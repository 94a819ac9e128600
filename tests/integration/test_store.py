"""The store: schema creation, versioning, refusal of foreign/newer files, read-only queries."""

from __future__ import annotations

import subprocess
import sys

import duckdb
import pytest

from orchestrator.cli import main
from orchestrator.store import SCHEMA_VERSION, Store, StoreError, check_writable, read_query
from orchestrator.store import db as store_db
from tests.integration.schema_v2 import as_v2


def test_fresh_schema_has_tables_views_and_version(tmp_path):
    db = str(tmp_path / "r.duckdb")
    with Store(db) as s:
        _, rows = s.query("SELECT table_name FROM information_schema.tables")
    names = {r[0] for r in rows}
    assert {"sweeps", "runs", "steps", "comms", "run_summary", "variant_summary"} <= names
    assert read_query(db, "SELECT value FROM meta")[1] == [(str(SCHEMA_VERSION),)]


def test_insert_and_query_roundtrip_json(tmp_path):
    db = str(tmp_path / "r.duckdb")
    with Store(db) as s, s.transaction():
        s.insert("sweeps", [{"sweep_id": "a", "name": "n", "spec": {"k": [1, 2]}}])
    assert read_query(db, "SELECT spec->>'$.k[1]' FROM sweeps")[1] == [("2",)]


def test_failed_transaction_leaves_nothing(tmp_path):
    db = str(tmp_path / "r.duckdb")
    with Store(db) as s:
        with pytest.raises(RuntimeError), s.transaction():
            s.insert("runs", [{"run_id": "x", "status": "ok"}])
            raise RuntimeError("boom")
        assert s.query("SELECT count(*) FROM runs")[1] == [(0,)]


def test_newer_schema_refused_untouched(tmp_path):
    db = str(tmp_path / "r.duckdb")
    Store(db).close()
    con = duckdb.connect(db)
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(StoreError, match="newer"):
        check_writable(db)
    with pytest.raises(StoreError, match="schema version 99"):
        Store(db)
    assert read_query(db, "SELECT value FROM meta")[1] == [("99",)]


def test_foreign_database_refused(tmp_path):
    db = str(tmp_path / "other.duckdb")
    con = duckdb.connect(db)
    con.execute("CREATE TABLE precious (x INT)")
    con.execute("INSERT INTO precious VALUES (42)")
    con.close()
    with pytest.raises(StoreError, match="not a linksweep"):
        Store(db)
    con = duckdb.connect(db, read_only=True)
    assert con.execute("SELECT * FROM precious").fetchall() == [(42,)]
    con.close()


def test_older_schema_is_upgraded_keeping_rows(tmp_path, monkeypatch):
    db = str(tmp_path / "r.duckdb")
    with Store(db) as s, s.transaction():
        s.insert("runs", [{"run_id": "kept", "status": "ok"}])
    # db.py imported the names from schema.py: patch them where it reads them.
    monkeypatch.setattr(store_db, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setitem(
        store_db.MIGRATIONS, SCHEMA_VERSION + 1, ["ALTER TABLE runs ADD COLUMN new_col INTEGER"]
    )
    with Store(db) as s:
        _, rows = s.query("SELECT run_id, new_col FROM runs")
    assert rows == [("kept", None)]
    assert read_query(db, "SELECT value FROM meta")[1] == [(str(SCHEMA_VERSION + 1),)]


HOLD_LOCK = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
print("locked", flush=True)
sys.stdin.readline()
"""


def test_query_while_locked_gives_clear_message(tmp_path, capsys, monkeypatch):
    from orchestrator.store import db as store_db

    monkeypatch.setattr(store_db, "READ_WAIT_S", 1.0)  # the message, not the 10 s wait for it
    db = str(tmp_path / "r.duckdb")
    Store(db).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, db],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"  # the writer holds the file now
        assert main(["query", "SELECT 1", "--db", db]) == 2
        err = capsys.readouterr().err
        assert "locked by another process" in err and "Traceback" not in err
    finally:
        holder.communicate("\n", timeout=30)
    assert main(["query", "SELECT count(*) AS n FROM runs", "--db", db, "--format", "json"]) == 0
    assert '"n": 0' in capsys.readouterr().out


def test_query_formats_and_errors(tmp_path, capsys):
    db = str(tmp_path / "r.duckdb")
    Store(db).close()
    assert main(["query", "SELECT 1 AS a, 'x' AS b", "--db", db, "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["a,b", "1,x"]
    assert main(["query", "SELEC nonsense", "--db", db]) == 2
    assert "query failed" in capsys.readouterr().err
    assert main(["query", "DELETE FROM runs", "--db", db]) == 2  # read-only
    assert main(["query", "SELECT 1", "--db", str(tmp_path / "missing.duckdb")]) == 2


def test_v2_database_upgrades_to_v3_with_overlap_said_for_old_runs(tmp_path):
    """Runs stored before the overlap axis: ZeRO ran with overlap_comm pinned false, DDP
    overlapped as always; the upgrade says so, keeps every row, and the views read them."""
    db = str(tmp_path / "old.duckdb")
    Store(db).close()
    as_v2(db)
    con = duckdb.connect(db)
    key = "'s', '{}', 'none', 2, 25, 'fast', 'pack'"
    con.execute(
        "INSERT INTO runs (run_id, sweep_id, strategy, offload, grad_accum, bucket_mb, link, "
        "placement, status) VALUES ('r1', 's', 'ddp', 'none', 2, 25, 'fast', 'pack', 'ok'), "
        "('r2', 's', 'zero3', 'none', 2, 25, 'fast', 'pack', 'ok')"
    )
    for strategy in ("ddp", "zero3"):
        con.execute(
            "INSERT INTO variant_stats (sweep_id, strategy, offload, grad_accum, bucket_mb, link, "
            f"placement, n_runs) VALUES ({key.format(strategy)}, 1)"
        )
    con.execute(
        "INSERT INTO sensitivity_stats (sweep_id, strategy, offload, grad_accum, bucket_mb, "
        "placement, link, baseline_link, slowdown) "
        "VALUES ('s', 'zero3', 'none', 2, 25, 'pack', 'slow', 'fast', 2.0)"
    )
    con.close()
    with duckdb.connect(db, read_only=True) as ro, pytest.raises(duckdb.BinderException):
        ro.execute("SELECT overlap_comm FROM runs")  # really v2: no such column yet

    with Store(db) as s:
        _, runs = s.query("SELECT run_id, overlap_comm, ds_config, mfu FROM runs ORDER BY run_id")
        _, variants = s.query(
            "SELECT strategy, overlap_comm FROM variant_summary ORDER BY strategy"
        )
        _, sens = s.query("SELECT strategy, overlap_comm, slowdown FROM link_sensitivity")
        _, summary = s.query("SELECT run_id, overlap_comm FROM run_summary ORDER BY run_id")
    assert runs == [("r1", "default", None, None), ("r2", "false", None, None)]
    assert variants == [("ddp", "default"), ("zero3", "false")]
    assert sens == [("zero3", "false", 2.0)]
    assert summary == [("r1", "default"), ("r2", "false")]
    assert read_query(db, "SELECT value FROM meta")[1] == [(str(SCHEMA_VERSION),)]
