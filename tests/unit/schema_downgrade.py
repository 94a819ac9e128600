"""A database as an older schema version wrote it: the columns every later migration added
dropped, a renamed axis's old column put back (its values mapped back) for the versions before
the axis's ``since``, the views dropped (they name those columns), and ``meta.schema_version``
set back. Opening it with ``Store`` then runs the real migrations, which is what the schema
tests check: a v12 database has ``ddp_grad_dtype`` (fp32 | bf16 | n/a) and no
``grad_compression``, as v12 wrote it, and v13's derived step maps it forward."""

from __future__ import annotations

import re

import duckdb

from orchestrator.store.migrations import MIGRATIONS
from orchestrator.store.schema import VIEWS, sql_literal
from workloads import catalog

ADDED = re.compile(r"ALTER TABLE (\w+) ADD COLUMN (?:IF NOT EXISTS )?(\w+)")
DROPPED = re.compile(r"ALTER TABLE (\w+) DROP COLUMN (?:IF EXISTS )?(\w+)")


def as_version(db: str, version: int) -> None:
    """Make the database at ``db`` look as schema ``version`` left it: each later step undone,
    newest first, its statements in reverse order (a renamed axis's old column comes back
    while the new one is still there to map from, then the new one goes)."""
    con = duckdb.connect(db)
    try:
        for view in VIEWS:
            con.execute(f"DROP VIEW IF EXISTS {view}")
        for later in sorted((v for v in MIGRATIONS if v > version), reverse=True):
            for stmt in reversed(MIGRATIONS[later]):
                if m := ADDED.match(stmt):
                    con.execute(f"ALTER TABLE {m[1]} DROP COLUMN IF EXISTS {m[2]}")
                elif (m := DROPPED.match(stmt)) and (axis := _renamed(m[2], later)):
                    _put_back(con, m[1], axis)
        con.execute(f"UPDATE meta SET value = '{version}' WHERE key = 'schema_version'")
    finally:
        con.close()


def _renamed(column: str, version: int) -> catalog.Axis | None:
    """The axis that step ``version`` renamed from ``column`` (None: a column simply dropped)."""
    return next(
        (
            a
            for a in catalog.AXES.values()
            if a.since == version and a.renamed_from and a.renamed_from[0] == column
        ),
        None,
    )


def _put_back(con: duckdb.DuckDBPyConnection, table: str, axis: catalog.Axis) -> None:
    """``table``'s old column of ``axis`` as the older version had it: each new value mapped
    back to the old one it came from (``none`` -> ``fp32``); a value the old column could not
    hold (``powersgd``) and the placeholder stay as they are."""
    old, mapping = axis.renamed_from
    back = " ".join(
        f"WHEN {sql_literal(new, axis.sql_type)} THEN {sql_literal(was)}"
        for was, new in mapping.items()
    )
    con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {old} {axis.sql_type}")
    con.execute(f"UPDATE {table} SET {old} = CASE {axis.name} {back} ELSE {axis.name} END")
