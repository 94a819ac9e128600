"""The results database: schema (``schema.py``), named queries (``queries.py``) and the DuckDB
connections (``db.py``, the only module that imports duckdb). Driver-side; imports nothing from
linksweep outside this package.

The store's typed interface (``TableStore``, what ``Store`` and ``LiveStore`` both are; a sweep
driver's ``SweepStore``) and the one list of what a sweep writes, when and through which route
(direct, spool, heartbeat) are in ``writes.py``.

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
