"""The results database: schema (``schema.py``), named queries (``queries.py``) and the DuckDB
connections (``db.py``, the only module that imports duckdb). Driver-side; imports nothing from
linksweep outside this package.

The store's typed interface (``TableStore``, what ``Store`` and ``LiveStore`` both are; a sweep
driver's ``SweepStore``) and the one list of what a sweep writes, when and through which route
(direct, spool, heartbeat) are in ``writes.py``.

One module per job:
    schema      every table and view at one version; the variant key's columns from the catalog.
    migrations  the steps that bring an older database up to date: hand-written, then derived
                from the catalog's axes (``Axis.since``).
    queries     every named SELECT, with bound parameters; pure data.
    db          DuckDB connections, migrations applied: the only module that imports duckdb.
    writes      the typed interface, and the one list of what a sweep writes where.
    spool       each finished run written durably beside the database before its commit.
    live        the driver's handle during a sweep: the database open only while used.
    liveness    is a ``running`` sweep's driver still alive.
    columnar    dict rows -> one Arrow table typed by the target table; pure.
    snapshot    one sweep's comparable facts, read from a database file read-only.
    schema_doc  docs/schema.md, generated from the real schema.

May import: db, queries, schema, writes.
"""

from orchestrator.store import queries as Q
from orchestrator.store.db import (
    Reader,
    Store,
    StoreError,
    bring_up_to_date,
    check_writable,
    export_all,
    json_value,
    read_query,
)
from orchestrator.store.schema import SCHEMA_VERSION, TABLES, VIEWS
from orchestrator.store.writes import SweepStore, TableStore

__all__ = [
    "Q",
    "Reader",
    "SCHEMA_VERSION",
    "Store",
    "StoreError",
    "SweepStore",
    "TABLES",
    "TableStore",
    "VIEWS",
    "bring_up_to_date",
    "check_writable",
    "export_all",
    "json_value",
    "read_query",
]
