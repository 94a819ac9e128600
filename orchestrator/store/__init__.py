"""The results database: schema (``schema.py``), named queries (``queries.py``) and the DuckDB
connections (``db.py``, the only module that imports duckdb). Driver-side; imports nothing from
linksweep outside this package.

May import: db, queries, schema.
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

__all__ = [
    "Q",
    "Reader",
    "SCHEMA_VERSION",
    "Store",
    "StoreError",
    "TABLES",
    "VIEWS",
    "bring_up_to_date",
    "check_writable",
    "export_all",
    "json_value",
    "read_query",
]
