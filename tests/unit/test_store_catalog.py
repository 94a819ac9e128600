"""The store follows the catalog (``workloads/catalog.py``): the key columns of every table and
view keyed by variant, and of every query, come from the catalog's axes; an axis added after
the hand-written steps (v12) gets its column through a migration derived from its entry, so a
database made before it opens (``Store``) and its old rows read the axis's default where it
applies and its placeholder where it does not; an axis renamed from an older column reads that
column through its mapping. The first derived axes are v13's ``grad_compression`` (renamed from
``ddp_grad_dtype``: fp32 reads as none) and ``powersgd_rank``: a v12 database opens reading them.
And ``linksweep run``'s end-of-run tables show every axis that varies among their rows and none
that does not.

The axes added here live only while a test runs (the ``changed_catalog`` fixture puts it back);
the store's module constants were derived at import, so a test that opens a database under the
changed catalog hands ``db.py`` the schema and migrations built again from it."""

from __future__ import annotations

import re

import duckdb
import pytest

from orchestrator.store import Q, Store, db, migrations, queries, schema
from orchestrator.sweep.planner import Variant
from tests.unit.schema_downgrade import as_version
from workloads import catalog

NEXT = catalog.schema_version() + 1


@pytest.fixture
def changed_catalog():
    """The catalog's entries, put back as they were after the test."""
    axes, strategies = dict(catalog.AXES), dict(catalog.STRATEGIES)
    yield catalog
    catalog.AXES.clear()
    catalog.AXES.update(axes)
    catalog.STRATEGIES.clear()
    catalog.STRATEGIES.update(strategies)


def _knob(**kw) -> catalog.Axis:
    """A text axis for DDP alone (off | on, default off), added one version past the base."""
    args = {"families": ("ddp",), "since": NEXT} | kw
    return catalog.Axis("knob_x", "VARCHAR", ("off", "on"), "off", **args)


def _in(names) -> str:
    return ", ".join(f"'{n}'" for n in names)


def _under_the_catalog(monkeypatch) -> None:
    """``db.py`` opens databases with the schema and migrations of the catalog as it is now."""
    monkeypatch.setattr(db, "SCHEMA_VERSION", catalog.schema_version())
    monkeypatch.setattr(db, "TABLES", schema.tables())
    monkeypatch.setattr(db, "VIEWS", schema.views())
    monkeypatch.setattr(db, "MIGRATIONS", migrations.migrations())


def test_axes_migrated_by_hand_get_no_derived_step_and_versions_go_one_at_a_time():
    by_hand = [a.name for a in catalog.AXES.values() if a.since <= migrations.AXES_BY_HAND_UNTIL]
    derived = migrations.derived()
    assert all(v > migrations.AXES_BY_HAND_UNTIL for v in derived)
    altered = re.compile(r"ALTER TABLE \w+ (?:ADD|DROP) COLUMN (?:IF (?:NOT )?EXISTS )?(\w+)")
    touched = {m[1] for stmts in derived.values() for s in stmts if (m := altered.match(s))}
    assert not touched & set(by_hand)
    assert catalog.schema_version() == schema.SCHEMA_VERSION
    assert sorted(migrations.MIGRATIONS) == list(range(2, schema.SCHEMA_VERSION + 1))


def test_the_first_derived_step_folds_ddp_grad_dtype_into_grad_compression():
    """v13: grad_compression (ddp_grad_dtype's values mapped: fp32 -> none, bf16 -> bf16; else
    DDP's default none, the placeholder elsewhere), the old column dropped, then powersgd_rank
    (1 where the compression is PowerSGD and the strategy DDP, else 0), in every keyed table."""
    ddp = _in(catalog.names("ddp"))
    compression = (
        "CASE ddp_grad_dtype WHEN 'fp32' THEN 'none' WHEN 'bf16' THEN 'bf16' "
        f"ELSE CASE WHEN strategy IN ({ddp}) THEN 'none' ELSE 'n/a' END END"
    )
    rank = (
        "CASE WHEN NOT coalesce(grad_compression IN ('powersgd'), false) THEN 0 "
        f"WHEN strategy IN ({ddp}) THEN 1 ELSE 0 END"
    )
    tables = schema.VARIANT_TABLES
    assert migrations.derived()[13] == [
        *(
            stmt
            for t in tables
            for stmt in (
                f"ALTER TABLE {t} ADD COLUMN IF NOT EXISTS grad_compression VARCHAR",
                f"UPDATE {t} SET grad_compression = {compression} WHERE grad_compression IS NULL",
                f"ALTER TABLE {t} DROP COLUMN IF EXISTS ddp_grad_dtype",
            )
        ),
        *(
            stmt
            for t in tables
            for stmt in (
                f"ALTER TABLE {t} ADD COLUMN IF NOT EXISTS powersgd_rank INTEGER",
                f"UPDATE {t} SET powersgd_rank = {rank} WHERE powersgd_rank IS NULL",
            )
        ),
    ]
    assert min(migrations.derived()) == 13 and schema.SCHEMA_VERSION >= 13
    assert migrations.MIGRATIONS[13] == migrations.derived()[13]  # no hand-written v13


def test_every_keyed_table_and_view_holds_the_catalogs_key():
    key = catalog.variant_key()
    for table in schema.VARIANT_TABLES:
        columns = [line.split()[0] for line in schema.TABLES[table].splitlines() if line.strip()]
        expected = [k for k in key if k != "link"] if table in schema.GROUP_TABLES else key
        assert [c for c in columns if c in key] == list(expected), table
    for view in ("run_summary", "variant_summary", "link_sensitivity"):
        assert ", ".join(key) in " ".join(schema.VIEWS[view].split()), view


def test_a_new_axis_derives_its_column_and_old_rows_value(changed_catalog):
    default_on = catalog.Strategy(
        "ddp_alt", "ddp", "DDP-alt", "DDP alt", "workloads.strategies:DDPStrategy",
        "orchestrator.analysis.theories:ddp", defaults={"knob_x": "on"},
    )  # fmt: skip
    catalog.add_strategy(default_on)
    before = migrations.derived()  # the catalog's own derived steps (ddp_alt among DDP's)
    catalog.add_axis(_knob())
    ddp = [n for n in catalog.names("ddp") if n != "ddp_alt"]
    fill = f"CASE WHEN strategy IN ({_in(ddp)}) THEN 'off' WHEN strategy IN ('ddp_alt') THEN 'on' ELSE 'n/a' END"
    assert migrations.fill_sql(catalog.axis("knob_x")) == fill
    assert catalog.schema_version() == NEXT
    expected = [
        stmt
        for table in schema.VARIANT_TABLES
        for stmt in (
            f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS knob_x VARCHAR",
            f"UPDATE {table} SET knob_x = {fill} WHERE knob_x IS NULL",
        )
    ]
    assert migrations.derived() == {**before, NEXT: expected}
    steps = migrations.migrations()
    assert sorted(steps) == list(range(2, NEXT + 1)) and steps[NEXT] == expected
    assert steps[7] == migrations.MIGRATIONS[7]  # the hand-written steps stay as written
    assert "knob_x VARCHAR" in schema.tables()["link_model"]
    assert "knob_x" in schema.views()["variant_summary"]


def test_an_axis_that_requires_another_applies_only_where_it_is_met(changed_catalog):
    catalog.add_axis(_knob())
    rank = catalog.Axis(
        "rank_x", "INTEGER", None, 4, families=("ddp",), requires=("knob_x", ("on",)), na=0,
        since=NEXT,
    )  # fmt: skip
    catalog.add_axis(rank)
    assert migrations.fill_sql(rank) == (
        "CASE WHEN NOT coalesce(knob_x IN ('on'), false) THEN 0 "
        f"WHEN strategy IN ({_in(catalog.names('ddp'))}) THEN 4 ELSE 0 END"
    )
    step = migrations.derived()[NEXT]
    # knob_x is filled first (the catalog's order): rank_x's rule reads it
    first_rank = next(i for i, s in enumerate(step) if "rank_x" in s)
    assert all("rank_x" not in s for s in step[:first_rank]) and "knob_x" in step[0]


def _old_database(path: str) -> None:
    """A database made by this linksweep (the current schema), rows of three families in it:
    DDP uncompressed and in bf16, ZeRO-3 and FSDP2 (no compression: n/a)."""
    key = {"sweep_id": "s", "grad_accum": 1, "link": "a", "placement": "pack"}
    rows = [
        {"strategy": "ddp", "offload": "none", "bucket_mb": 25, "grad_compression": "none"},
        {"strategy": "ddp", "offload": "none", "bucket_mb": 25, "grad_compression": "bf16"},
        {"strategy": "zero3", "offload": "cpu", "bucket_mb": 5, "grad_compression": "n/a"},
        {"strategy": "fsdp", "offload": "none", "bucket_mb": 0, "grad_compression": "n/a"},
    ]
    with Store(path) as s, s.transaction():
        s.insert("sweeps", [{"sweep_id": "s", "name": "old"}])
        s.insert("runs", [{"run_id": f"r{i}", "seq": i, **key, **r} for i, r in enumerate(rows)])
        s.insert("variant_stats", [{**key, **r, "n_runs": 1} for r in rows])
        s.insert("link_model", [{"sweep_id": "s", "strategy": r["strategy"]} for r in rows])


def test_a_database_made_before_an_axis_opens_with_its_column(
    changed_catalog, tmp_path, monkeypatch
):
    path = str(tmp_path / "old.duckdb")
    _old_database(path)
    catalog.add_axis(_knob())
    _under_the_catalog(monkeypatch)
    with Store(path) as s:
        assert s.query("SELECT value FROM meta WHERE key = 'schema_version'")[1] == [(str(NEXT),)]
        got = s.query("SELECT strategy, knob_x FROM runs ORDER BY seq")[1]
        assert got == [("ddp", "off"), ("ddp", "off"), ("zero3", "n/a"), ("fsdp", "n/a")]
        got = s.query("SELECT strategy, knob_x FROM variant_summary ORDER BY strategy")[1]
        assert got == [("ddp", "off"), ("ddp", "off"), ("fsdp", "n/a"), ("zero3", "n/a")]
        assert s.query("SELECT count(*) FROM link_model WHERE knob_x IS NULL")[1] == [(0,)]
        s.insert("runs", [{"run_id": "new", "strategy": "ddp", "knob_x": "on"}])
    with Store(path) as s:  # opened again: nothing left to migrate, the new row as written
        assert s.query("SELECT knob_x FROM runs WHERE run_id = 'new'")[1] == [("on",)]


def test_a_v12_database_reads_grad_compression_from_its_ddp_grad_dtype(tmp_path):
    """A database as v12 wrote it (``ddp_grad_dtype`` fp32 | bf16 | n/a, no ``grad_compression``
    nor ``powersgd_rank``) opens under this linksweep: the renamed axis reads the old column
    through its mapping, the rank its placeholder, and the old column is gone."""
    path = str(tmp_path / "v12.duckdb")
    _old_database(path)
    as_version(path, 12)
    con = duckdb.connect(path)
    try:  # as v12 left it
        got = con.execute("SELECT strategy, ddp_grad_dtype FROM runs ORDER BY seq").fetchall()
        assert got == [("ddp", "fp32"), ("ddp", "bf16"), ("zero3", "n/a"), ("fsdp", "n/a")]
        columns = {r[0] for r in con.execute("DESCRIBE variant_stats").fetchall()}
        assert "ddp_grad_dtype" in columns and not {"grad_compression", "powersgd_rank"} & columns
    finally:
        con.close()
    with Store(path) as s:
        version = s.query("SELECT value FROM meta WHERE key = 'schema_version'")[1]
        assert version == [(str(schema.SCHEMA_VERSION),)]
        got = s.query("SELECT strategy, grad_compression, powersgd_rank FROM runs ORDER BY seq")[1]
        assert got == [
            ("ddp", "none", 0),
            ("ddp", "bf16", 0),
            ("zero3", "n/a", 0),
            ("fsdp", "n/a", 0),
        ]
        got = s.query(
            "SELECT strategy, grad_compression FROM variant_summary ORDER BY strategy, 2 DESC"
        )[1]
        assert got == [("ddp", "none"), ("ddp", "bf16"), ("fsdp", "n/a"), ("zero3", "n/a")]
        assert s.query("SELECT count(*) FROM link_model WHERE grad_compression IS NULL")[1] == [
            (0,)
        ]
        for table in schema.VARIANT_TABLES:
            columns = {r[0] for r in s.query(f"DESCRIBE {table}")[1]}
            assert {"grad_compression", "powersgd_rank"} <= columns, table
            assert "ddp_grad_dtype" not in columns, table


def test_queries_list_the_catalogs_key():
    key = catalog.variant_key()
    group = tuple(k for k in key if k != "link")
    assert Q.VARIANT_GROUP_RUNS.params == {"sweep_id", *group}
    assert queries.key_columns(key) in Q.SWEEP_RUN_SLOTS.sql
    assert queries.key_columns(key, "r") in Q.REPORT_STEP_TIMES.sql
    shorts = {catalog.axis(k).short for k in key}
    for query in (Q.VARIANT_SUMMARY_TABLE, Q.SENSITIVITY_TABLE):
        assert all(f" {s}," in query.sql or f"{s}," in query.sql for s in shorts), query.name
    for k in key:
        assert f"r.{k} = v.{k}" in Q.REPORT_VARIANTS.sql, k


def test_rows_sort_as_the_catalog_lists_strategies(tmp_path):
    order = list(catalog.names())
    shuffled = sorted(order)  # alphabetical: not the catalog's order
    assert shuffled != order
    with Store(str(tmp_path / "o.duckdb")) as s:
        with s.transaction():
            s.insert(
                "variant_stats",
                [{"sweep_id": "s", "strategy": n, "link": "a", "grad_accum": 1} for n in shuffled],
            )
        got = [r["strategy"] for r in s.rows(Q.VARIANT_SUMMARY_TABLE, sweep_id="s")]
    assert got == order


# --- linksweep run's end-of-run tables ------------------------------------------------------


def _sweep_over_bucket(path: str) -> None:
    """Variant and slowdown rows of a DDP sweep over bucket_mb (4 and 25) on two links (every
    other key column DDP's default, as the planner names it)."""

    def key(bucket_mb: int, link: str) -> dict:
        return {"sweep_id": "s", **Variant("ddp", 1, link, "pack", bucket_mb=bucket_mb).axes}

    with Store(path) as s, s.transaction():
        s.insert(
            "variant_stats",
            [
                {**key(b, link), "n_runs": 2, "median_step_time_s": t}
                for b, link, t in (
                    (4, "fast", 1.0),
                    (25, "fast", 1.1),
                    (4, "slow", 2.0),
                    (25, "slow", 3.0),
                )
            ],
        )
        s.insert(
            "sensitivity_stats",
            [
                {**key(b, "slow"), "baseline_link": "fast", "slowdown": x}
                for b, x in ((4, 2.0), (25, 2.7))
            ],
        )


def _tables(path: str, capsys) -> dict[str, list[str]]:
    from orchestrator.commands.run import print_variant_tables

    with Store(path) as s:
        print_variant_tables(s, "s")
    lines, blocks = capsys.readouterr().out.splitlines(), {}
    for title, header in zip(lines, lines[1:], strict=False):
        if title.startswith(("variant_summary (", "link_sensitivity (", "link model:")):
            blocks[title.split()[0]] = header.split()
    return blocks


def test_a_sweep_over_bucket_mb_shows_the_bucket_in_the_end_of_run_tables(tmp_path, capsys):
    path = str(tmp_path / "b.duckdb")
    _sweep_over_bucket(path)
    tables = _tables(path, capsys)
    assert "bucket" in tables["variant_summary"] and "bucket" in tables["link_sensitivity"]
    assert tables["variant_summary"][:3] == ["strategy", "bucket", "link"]


def test_an_axis_the_sweep_does_not_vary_is_not_shown(tmp_path, capsys):
    path = str(tmp_path / "b.duckdb")
    _sweep_over_bucket(path)
    tables = _tables(path, capsys)
    for header in tables.values():
        for short in {a.short for a in catalog.AXES.values()} - {"strategy", "bucket", "link"}:
            assert short not in header, (short, header)
        assert "strategy" in header and "link" in header  # they name the row


def test_shown_columns_keep_what_names_the_row_and_each_strategys_own_value_counts_once():
    from orchestrator.commands.run import shown_columns

    cols = ["strategy", "bucket", "sync", "link", "step_s"]
    rows = [("ddp", 25, "last", "a", 1.0), ("zero3", 5, "n/a", "a", 2.0)]
    # DDP's bucket and sync against ZeRO's: what each strategy implies, not a sweep axis
    assert shown_columns(cols, rows) == (
        ["strategy", "link", "step_s"],
        [("ddp", "a", 1.0), ("zero3", "a", 2.0)],
    )
