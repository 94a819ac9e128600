"""Turn a fresh current database into a schema-2 one, as a database written before this
release: every view dropped, every table and column that schema v3 and later added removed."""

from __future__ import annotations

import duckdb

from orchestrator.store.schema import TABLES
from tests.unit.schema_downgrade import as_version

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
    """The columns of v3 and later undone as ``schema_downgrade.as_version`` undoes them (an
    ``ADD COLUMN IF NOT EXISTS`` column too, and a renamed axis back under its old name until
    the step that added that is undone in turn), then the tables v2 did not have dropped."""
    as_version(db, 2)
    con = duckdb.connect(db)
    for table in set(TABLES) - V2_TABLES:
        con.execute(f"DROP TABLE IF EXISTS {table}")
    con.close()
