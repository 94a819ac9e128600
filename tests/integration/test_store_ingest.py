"""Bulk ingest: Store.insert's columnar path stores exactly what the row-at-a-time path stores,
for every column type of every table; values it cannot convert exactly go row by row."""

from __future__ import annotations

import datetime as dt

import pytest

from orchestrator.store import TABLES, Store
from orchestrator.store import columnar as col

CEST = dt.timezone(dt.timedelta(hours=2))


def _value(duck_type: str, i: int):
    """A non-NULL value of each type, varied by i (i=1 gives the edge cases)."""
    return {
        "VARCHAR": f"text {i} é",
        "JSON": {"k": [i, 2.5, None], "b": {"z": True}} if i else [1, "two"],
        "BOOLEAN": bool(i % 2),
        "INTEGER": -(2**31) + 1 if i == 1 else i,
        "BIGINT": 2**40 + i,
        "DOUBLE": i if i == 1 else 0.1 * i,  # an int into a DOUBLE column too
        "TIMESTAMP WITH TIME ZONE": dt.datetime(2026, 11, 22, 7, 30, 0, 123456, tzinfo=CEST)
        if i == 1
        else dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
    }[duck_type]


def _types(store: Store, table: str) -> dict[str, str]:
    return store._column_types(table)


def _sample_rows(types: dict[str, str]) -> list[dict]:
    rows = [{c: _value(t, i) for c, t in types.items()} for i in range(3)]
    first = next(iter(types))  # the primary key, where a table has one
    rows.append({**dict.fromkeys(types), first: "all NULL"})  # every other column NULL
    return rows


def _stored(store: Store, table: str) -> list[tuple]:
    return store.query(f"SELECT * FROM {table} ORDER BY ALL")[1]


@pytest.mark.parametrize("table", sorted(TABLES))
def test_columnar_round_trip_matches_row_path_for_every_type(tmp_path, table, monkeypatch):
    with Store(str(tmp_path / "fast.duckdb")) as fast, Store(str(tmp_path / "slow.duckdb")) as slow:
        types = _types(fast, table)
        assert set(types.values()) <= set(col.ARROW_TYPES), types  # every type has a fast path
        rows = _sample_rows(types)
        with monkeypatch.context() as m:  # the columnar path must not fall back here
            m.setattr(Store, "_insert_rows", lambda *a: pytest.fail("fell back to rows"))
            with fast.transaction():
                fast.insert(table, rows)
        with slow.transaction():
            slow._insert_rows(table, rows)
        got, want = _stored(fast, table), _stored(slow, table)
    assert got == want
    assert len(got) == len(rows) + (table == "meta")  # meta holds the schema version too


def test_values_come_back_exactly(tmp_path):
    t = dt.datetime(2026, 11, 22, 7, 30, 0, 123456, tzinfo=CEST)
    with Store(str(tmp_path / "r.duckdb")) as s:
        with s.transaction():
            s.insert(
                "runs",
                [
                    {
                        "run_id": "a",
                        "started_at": t,
                        "throttled": False,
                        "hot": None,
                        "n_params": 2**40,
                        "median_step_time_s": 3,
                        "link_env": {"B": "1", "A": "x"},
                        "nodes": [{"rank": 0}],
                    }
                ],
            )
        _, rows = s.query(
            "SELECT started_at = $1::TIMESTAMPTZ, throttled, hot, n_params, median_step_time_s, "
            "typeof(median_step_time_s), link_env::VARCHAR, nodes->>'$[0].rank' FROM runs",
            [t],
        )
    assert rows == [(True, False, None, 2**40, 3.0, "DOUBLE", '{"A": "x", "B": "1"}', "0")]


@pytest.mark.parametrize(
    "column,value",
    [
        ("started_at", dt.datetime(2026, 1, 2, 3, 4, 5)),  # naive datetime: DuckDB's own cast
        ("seq", "7"),  # text into INTEGER: DuckDB's own cast
        ("median_step_time_s", "0.5"),
        ("run_id", 42),  # a number into VARCHAR
        ("throttled", 1),
    ],
)
def test_values_arrow_would_coerce_go_row_by_row_unchanged(tmp_path, column, value):
    rows = [{"run_id": "a", column: value}] if column != "run_id" else [{column: value}]
    with Store(str(tmp_path / "a.duckdb")) as a, Store(str(tmp_path / "b.duckdb")) as b:
        with pytest.raises(col.NotColumnar):
            col.arrow_table("runs", rows, a._column_types("runs"))
        with a.transaction():
            a.insert("runs", rows)
        with b.transaction():
            b._insert_rows("runs", rows)
        assert _stored(a, "runs") == _stored(b, "runs")


def test_unknown_column_and_uneven_rows_are_refused(tmp_path):
    with Store(str(tmp_path / "r.duckdb")) as s:
        with pytest.raises(ValueError, match="no column"):
            s.insert("steps", [{"run_id": "a", "nope": 1}])
        with pytest.raises(ValueError, match="same keys"):
            s.insert("steps", [{"run_id": "a"}, {"rank": 1}])
        with pytest.raises(ValueError, match="no table"):
            s.insert("nope", [{"a": 1}])
        assert s.query("SELECT count(*) FROM steps")[1] == [(0,)]


def test_a_64_rank_run_of_1000_steps_is_stored_whole(tmp_path):
    steps = [
        {
            "run_id": "big",
            "rank": r,
            "step": i,
            "warmup": i < 3,
            "step_time_s": 0.1 + i * 1e-6,
            "samples": 2,
            "tokens": 256,
            "loss": None if i == 5 else 3.0 - i * 1e-4,
        }
        for r in range(64)
        for i in range(1000)
    ]
    with Store(str(tmp_path / "r.duckdb")) as s:
        with s.transaction():
            s.insert("steps", steps)
        _, rows = s.query(
            "SELECT count(*), count(DISTINCT rank), sum(warmup::INT), count(loss), "
            "sum(step_time_s) FROM steps"
        )
    assert rows[0][:4] == (64_000, 64, 64 * 3, 64 * 999)
    assert rows[0][4] == pytest.approx(sum(r["step_time_s"] for r in steps))
