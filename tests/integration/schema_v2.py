"""Turn a fresh current database into a schema-2 one, as a database written before this
release: every view dropped, every table and column that schema v3 and later added removed."""

from __future__ import annotations

import re

import duckdb

from orchestrator.store.migrations import MIGRATIONS
from orchestrator.store.schema import TABLES, VIEWS

V2_TABLES = frozenset(
    [
        "meta",
        "sweeps",
        "runs",
        "steps",
        "ranks",
        "comms",
        "nodes",
        "gpus",
        "gpu_links",
        "transports",
        "telemetry",
        "link_bench",
        "variant_stats",
        "sensitivity_stats",
    ]
)


def as_v2(db: str) -> None:
    con = duckdb.connect(db)
    for view in VIEWS:
        con.execute(f"DROP VIEW IF EXISTS {view}")
    for table in set(TABLES) - V2_TABLES:
        con.execute(f"DROP TABLE IF EXISTS {table}")
    for stmt in (s for v in sorted(MIGRATIONS) if v > 2 for s in MIGRATIONS[v]):
        m = re.match(r"ALTER TABLE (\w+) ADD COLUMN (\w+)", stmt)
        if m and m[1] in V2_TABLES:
            con.execute(f"ALTER TABLE {m[1]} DROP COLUMN IF EXISTS {m[2]}")
    con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.close()
