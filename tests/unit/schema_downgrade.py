"""A database as an older schema version wrote it: the columns every later migration added
dropped, the views dropped (they name those columns), and ``meta.schema_version`` set back. Opening
it with ``Store`` then runs the real migrations, which is what the schema tests check."""

from __future__ import annotations

import re

import duckdb

from orchestrator.store.migrations import MIGRATIONS
from orchestrator.store.schema import VIEWS

ADDED = re.compile(r"ALTER TABLE (\w+) ADD COLUMN (?:IF NOT EXISTS )?(\w+)")


def as_version(db: str, version: int) -> None:
    """Make the database at ``db`` look as schema ``version`` left it."""
    con = duckdb.connect(db)
    try:
        for view in VIEWS:
            con.execute(f"DROP VIEW IF EXISTS {view}")
        for later in sorted((v for v in MIGRATIONS if v > version), reverse=True):
            for stmt in MIGRATIONS[later]:
                if m := ADDED.match(stmt):
                    con.execute(f"ALTER TABLE {m[1]} DROP COLUMN IF EXISTS {m[2]}")
        con.execute(f"UPDATE meta SET value = '{version}' WHERE key = 'schema_version'")
    finally:
        con.close()
