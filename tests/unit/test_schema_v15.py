"""Schema v15: every rank's trace on rank 0's clock. A v14 database (the v15 columns dropped, as
v14 wrote it) upgrades in place: its traced ranks have no clock (NULL offset, uncertainty, base
and rebased copy: a trace from before v15 measured none), its runs no merged trace and no
straggler verdict, and the new tables and views exist, empty. A database from before traces
existed (v10) gets the traces table with the clock columns."""

from __future__ import annotations

import duckdb

from orchestrator.store import SCHEMA_VERSION, Store
from tests.unit.schema_downgrade import as_version

CLOCK = ("base_time_ns", "clock_offset_ns", "clock_uncertainty_ns", "rebased_path")


def test_v14_database_gains_empty_clock_columns_and_the_wait_tables(tmp_path):
    db = str(tmp_path / "v14.duckdb")
    with Store(db) as s, s.transaction():
        s.insert("sweeps", [{"sweep_id": "s", "name": "v14"}])
        s.insert("runs", [{"run_id": "r", "sweep_id": "s", "seq": 1, "strategy": "ddp"}])
        s.insert(
            "traces", [{"run_id": "r", "rank": r, "path": f"r-rank{r}", "steps": 2} for r in (0, 1)]
        )
    as_version(db, 14)
    with duckdb.connect(db) as con:
        cols = {
            c
            for (c,) in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE table_name = 'traces'"
            ).fetchall()
        }
        assert not cols & set(CLOCK)  # as v14 wrote it
    with Store(db) as s:
        got = s.query(f"SELECT rank, path, {', '.join(CLOCK)} FROM traces ORDER BY rank")[1]
        assert got == [
            (0, "r-rank0", None, None, None, None),
            (1, "r-rank1", None, None, None, None),
        ]
        run = s.query("SELECT merged_trace_path, straggler_rank, straggler_why FROM runs")[1]
        assert run == [(None, None, None)]
        for table in ("trace_wait", "trace_wait_instances", "trace_lateness"):
            assert s.query(f"SELECT count(*) FROM {table}")[1] == [(0,)]
        for view in ("trace_wait_summary", "trace_collective_wait"):
            assert s.query(f"SELECT count(*) FROM {view}")[1] == [(0,)]
        assert s.query("SELECT value FROM meta WHERE key = 'schema_version'")[1] == [
            (str(SCHEMA_VERSION),)
        ]


def test_a_database_from_before_traces_gets_the_traces_table_with_its_clock(tmp_path):
    db = str(tmp_path / "v10.duckdb")
    with Store(db):
        pass
    as_version(db, 10)
    with duckdb.connect(db) as con:
        con.execute("DROP TABLE traces")  # v10 had none (v11 created it)
    with Store(db) as s:
        cols = [c for c, *_ in s.query("DESCRIBE traces")[1]]
        assert cols[-4:] == list(CLOCK)
