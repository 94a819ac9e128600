"""DuckDB connections: the only module that imports duckdb.

The Ray driver is the only writer (DuckDB allows one read-write process, or many read-only
ones): it stores each run in one transaction, so a crash or Ctrl-C leaves every finished run
intact. Everyone else reads through :class:`Reader` (``read_only=True``) with the named queries
of ``orchestrator/store/queries.py``; ``read_query`` runs a user's own SQL (``linksweep query``).

Where data changes, by name: ``Store.insert``/``update``/``delete`` in a transaction (the driver;
what a sweep writes by which route: ``writes.SWEEP_WRITES``), ``Store.commit_spooled`` (spooled
runs, ``spool.py``, each applied by ``writes.apply_payload``), ``Store.mark_interrupted`` (sweeps
and fleet checks whose driver is gone), ``Store.import_link_bench`` (``linksweep import``), and
``bring_up_to_date`` (a reading command's one write). Opening for writing (``Store``) creates or
upgrades the schema in a transaction (``migrations.MIGRATIONS``) and nothing else; opening
read-only never writes. A newer or foreign database is refused, unchanged, with a clear message.

May import: columnar, liveness, migrations, queries, schema, spool, writes, duckdb.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import duckdb

from orchestrator.store import columnar, liveness, spool
from orchestrator.store import queries as Q
from orchestrator.store.migrations import MIGRATIONS
from orchestrator.store.queries import Query
from orchestrator.store.schema import SCHEMA_VERSION, TABLES, VIEWS
from orchestrator.store.writes import apply_payload


class StoreError(RuntimeError):
    """The database cannot be used as asked (locked, foreign, newer schema)."""


def _is_lock_error(exc: Exception) -> bool:
    text = str(exc)
    return "lock" in text.lower() and ("Could not set lock" in text or "Conflicting lock" in text)


class StoreLocked(StoreError):
    """Another process holds the database (DuckDB: one writer, or many readers)."""


READ_WAIT_S = 10.0  # a reader waits this long for a sweep's commit (it holds the lock briefly)


def _connect(
    path: str, read_only: bool, wait_s: float = 0.0, on_wait=None
) -> duckdb.DuckDBPyConnection:
    """Open ``path``; while another process holds it, retry with backoff for up to ``wait_s``
    (calling ``on_wait(waited_s)`` before each retry), then raise StoreLocked."""
    deadline = time.monotonic() + wait_s
    delay = 0.02
    while True:
        try:
            return duckdb.connect(path, read_only=read_only)
        except duckdb.IOException as exc:
            if not _is_lock_error(exc):
                raise StoreError(f"cannot open {path}: {exc}") from None
            left = deadline - time.monotonic()
            if left <= 0:
                how_long = f" for more than {wait_s:.0f} s" if wait_s >= 1 else ""
                raise StoreLocked(
                    f"{path} is locked by another process{how_long} (a sweep commits runs briefly; "
                    "another program, e.g. the duckdb CLI, may hold it open); try again, or "
                    "query a copy"
                ) from None
            if on_wait is not None:
                on_wait(wait_s - left)
            time.sleep(min(delay, left))
            delay = min(delay * 2, 1.0)


def _table_exists(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    row = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]
    ).fetchone()
    return bool(row and row[0])


def _schema_version(con: duckdb.DuckDBPyConnection) -> int | None:
    if not _table_exists(con, "meta"):
        return None
    row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else None


def _create_schema(con: duckdb.DuckDBPyConnection) -> None:
    for name, cols in TABLES.items():
        con.execute(f"CREATE TABLE IF NOT EXISTS {name} ({cols})")
    for name, sql in VIEWS.items():
        con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")


def _prepare(con: duckdb.DuckDBPyConnection, path: str) -> None:
    """Create a fresh schema, upgrade an older one, or refuse."""
    version = _schema_version(con)
    if version is None:
        user_tables = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'main'"
        ).fetchone()[0]
        if user_tables:
            raise StoreError(
                f"{path} is a DuckDB database but not a linksweep one (no meta table); "
                "refusing to write into it: pass another --db"
            )
        con.execute("BEGIN")
        _create_schema(con)
        con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
        con.execute("COMMIT")
        return
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{path} has schema version {version}, newer than this linksweep's "
            f"{SCHEMA_VERSION}; upgrade linksweep to use it (nothing was changed)"
        )
    if version < SCHEMA_VERSION:
        con.execute("BEGIN")
        try:
            for v in range(version + 1, SCHEMA_VERSION + 1):
                for stmt in MIGRATIONS.get(v, []):
                    con.execute(stmt)
            _create_schema(con)
            con.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION)]
            )
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
    else:
        _create_schema(con)  # views are cheap to refresh and may have been improved


_H = TypeVar("_H", bound="_Handle")


class _Handle:
    """An open connection, closed by ``close()`` or at the end of a ``with`` block."""

    con: duckdb.DuckDBPyConnection

    def close(self) -> None:
        self.con.close()

    def __enter__(self: _H) -> _H:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Store(_Handle):
    """Read-write handle used by the driver. Use as a context manager."""

    def __init__(self, path: str, wait_s: float = 0.0, on_wait=None):
        """Open ``path`` read-write, creating its schema or upgrading an older one (one
        transaction, rows kept). Nothing else is written here: the spool is committed by
        :meth:`commit_spooled`, dead drivers' sweeps marked by :meth:`mark_interrupted`."""
        self.path = path
        self.con = _connect(path, read_only=False, wait_s=wait_s, on_wait=on_wait)
        try:
            _prepare(self.con, path)
        except Exception:
            self.con.close()
            raise

    def commit_spooled(self, just_spooled: spool.Payload | None = None) -> list[str]:
        """Commit every spooled run (``spool.py``), one transaction each, oldest first, and
        delete its file; returns the run ids this call inserted. Idempotent: a run already
        stored (the process died between COMMIT and unlink) is not inserted again.

        ``just_spooled``: a payload the caller just spooled and still holds; its file is not read back
        (a 64-rank x 1,000-step run's JSON takes ~0.4 s to decode)."""
        committed = []
        for path in spool.pending(self.path):
            name = os.path.basename(path)
            in_hand = just_spooled is not None and name == spool.file_name(just_spooled.run_id)
            p = just_spooled if in_hand else spool.read(path)
            with self.transaction():
                if apply_payload(self, p):
                    committed.append(p.run_id)
            spool.done(path)
        return committed

    def mark_interrupted(self) -> list[str]:
        """Sweeps and fleet checks still ``running`` whose driver is gone (``liveness``) become
        ``interrupted``, finished at their last heartbeat; returns their ids."""
        now, host = dt.datetime.now(dt.timezone.utc), liveness.this_host()
        gone = []
        for table, t in liveness.DRIVER_TABLES.items():
            for row in (r for r in self.rows(t.running) if liveness.driver_gone(r, host, now)):
                values = {"status": "interrupted", "finished_at": row.get("heartbeat_at") or now}
                values.update(t.when_driver_gone)
                self.update(table, {t.key: row[t.key], "status": "running"}, values)
                gone.append(row[t.key])
        return gone

    def import_link_bench(
        self, rows: Sequence[dict[str, Any]], new_sweep: dict[str, Any] | None, record: dict
    ) -> None:
        """Rows read from another tool's output (``linksweep import nccl-tests``) into
        ``link_bench``, in one transaction: with ``new_sweep`` its sweeps row is inserted first;
        otherwise the rows join ``rows[0]['sweep_id']``, whose spec JSON gains ``record`` (what
        was imported: file, avg busbw, ...) in its ``imports`` list."""
        with self.transaction():
            if new_sweep is not None:
                self.insert("sweeps", [new_sweep])
            else:
                sweep_id = rows[0]["sweep_id"]
                spec = json.loads(self.rows(Q.SWEEP, sweep_id=sweep_id)[0]["spec"] or "{}")
                spec = spec if isinstance(spec, dict) else {"spec": spec}
                spec["imports"] = [*spec.get("imports", []), record]
                self.update("sweeps", {"sweep_id": sweep_id}, {"spec": json.dumps(spec)})
            self.insert("link_bench", rows)

    def set_baseline(self, name: str, sweep_id: str, note: str | None) -> str | None:
        """Name ``sweep_id`` a baseline (``linksweep baseline set``), in one transaction,
        replacing a baseline of that name; returns the sweep it named before, or None."""
        with self.transaction():
            before = self.rows(Q.BASELINE, name=name)
            self.delete("baselines", {"name": name})
            self.insert(
                "baselines",
                [
                    {
                        "name": name,
                        "sweep_id": sweep_id,
                        "set_at": dt.datetime.now(dt.timezone.utc),
                        "note": note,
                    }
                ],
            )
        return before[0]["sweep_id"] if before else None

    @contextmanager
    def transaction(self):
        self.con.execute("BEGIN")
        try:
            yield self
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    def insert(self, table: str, rows: Sequence[dict[str, Any]]) -> None:
        """Insert dict rows; keys must be columns of ``table`` (missing ones stay NULL).

        One columnar batch (an Arrow table typed by the table's own column types, then
        ``INSERT ... SELECT``); rows whose values would not convert exactly go row by row."""
        if not rows:
            return
        try:
            batch = columnar.arrow_table(table, rows, self._column_types(table))
        except columnar.NotColumnar:
            self._insert_rows(table, rows)
            return
        names = ", ".join(f'"{c}"' for c in batch.column_names)
        view = f"_linksweep_insert_{table}"
        self.con.register(view, batch)
        try:
            self.con.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM {view}")
        finally:
            self.con.unregister(view)

    def _column_types(self, table: str) -> dict[str, str]:
        """Column -> DuckDB type name of ``table``, read once per handle."""
        cache = self.__dict__.setdefault("_types", {})
        if table not in cache:
            found = self.con.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = 'main' AND table_name = ?",
                [table],
            ).fetchall()
            if not found:
                raise ValueError(f"no table {table!r}")
            cache[table] = dict(found)
        return cache[table]

    def _insert_rows(self, table: str, rows: Sequence[dict[str, Any]]) -> None:
        """The row-at-a-time path (``executemany``), for values Arrow would not take exactly."""
        cols = list(rows[0])
        names = ", ".join(f'"{c}"' for c in cols)
        marks = ", ".join("?" for _ in cols)
        self.con.executemany(
            f"INSERT INTO {table} ({names}) VALUES ({marks})",
            [[columnar.jsonify(r[c]) for c in cols] for r in rows],
        )

    def update(self, table: str, key: dict[str, Any], values: dict[str, Any]) -> None:
        sets = ", ".join(f'"{c}" = ?' for c in values)
        where = " AND ".join(f'"{c}" = ?' for c in key)
        self.con.execute(
            f"UPDATE {table} SET {sets} WHERE {where}",
            [columnar.jsonify(v) for v in values.values()] + list(key.values()),
        )

    def query(self, sql: str, params: Iterable[Any] = ()) -> tuple[list[str], list[tuple]]:
        cur = self.con.execute(sql, list(params))
        cols = [d[0] for d in cur.description] if cur.description else []
        return cols, cur.fetchall()

    def rows(self, query: Query, **params: Any) -> list[dict[str, Any]]:
        """A named query's rows as dicts keyed by column."""
        return _rows(self.con, query, params)

    def table(self, query: Query, **params: Any) -> tuple[list[str], list[tuple]]:
        """A named query's column names and row tuples (for printing)."""
        return _table(self.con, query, params)

    def delete(self, table: str, where: dict[str, Any]) -> None:
        """Delete the rows of ``table`` whose columns equal ``where``'s values."""
        cond = " AND ".join(f'"{c}" = ?' for c in where)
        self.con.execute(f"DELETE FROM {table} WHERE {cond}", list(where.values()))


def _table(
    con: duckdb.DuckDBPyConnection, query: Query, params: dict
) -> tuple[list[str], list[tuple]]:
    """Run a named query with exactly its parameters: (column names, row tuples)."""
    if set(params) != query.params:
        raise TypeError(f"query {query.name} takes {sorted(query.params)}, got {sorted(params)}")
    cur = con.execute(query.sql, params) if params else con.execute(query.sql)
    return [d[0] for d in cur.description], cur.fetchall()


def _rows(con: duckdb.DuckDBPyConnection, query: Query, params: dict) -> list[dict[str, Any]]:
    cols, rows = _table(con, query, params)
    return [dict(zip(cols, r, strict=True)) for r in rows]


def _needs_write(con: duckdb.DuckDBPyConnection, path: str, version: int) -> bool:
    """An older schema, spooled runs, or a sweep whose driver is gone: worth a brief write."""
    if version < SCHEMA_VERSION or spool.pending(path):
        return True
    now, host = dt.datetime.now(dt.timezone.utc), liveness.this_host()
    rows = [r for t in liveness.DRIVER_TABLES.values() for r in _rows(con, t.running, {})]
    return any(liveness.driver_gone(r, host, now) for r in rows)


def bring_up_to_date(path: str, wait_s: float = 2.0) -> None:
    """The one write a reading command makes, before it opens the database read-only, so every
    reader sees the same truth: an older schema upgraded, spooled runs committed
    (:meth:`Store.commit_spooled`), sweeps and fleet checks of dead drivers ``interrupted``.

    Looks first (read-only) and writes only when one of those is due. When the database cannot
    be written now (a sweep is committing, a read-only file) it is read as it is, except an older
    schema, which the named queries cannot read (StoreError). A missing file is left missing.
    """
    if not os.path.exists(path):
        return
    con = _connect(path, read_only=True, wait_s=READ_WAIT_S)
    try:
        version = _schema_version(con)
        due = version is not None and version <= SCHEMA_VERSION and _needs_write(con, path, version)
    finally:
        con.close()
    if not due:
        return
    try:
        with Store(path, wait_s=wait_s) as store:
            store.commit_spooled()
            store.mark_interrupted()
    except StoreError:
        if version < SCHEMA_VERSION:
            raise


def _open_read(path: str) -> duckdb.DuckDBPyConnection:
    """A read-only connection to a linksweep database of this schema version. Never writes:
    an older database is refused (``bring_up_to_date`` upgrades it)."""
    con = _connect(path, read_only=True, wait_s=READ_WAIT_S)
    version = _schema_version(con)
    if version is None:
        con.close()
        raise StoreError(f"{path} is not a linksweep database (no meta table)")
    if version < SCHEMA_VERSION:
        con.close()
        raise StoreError(
            f"{path} has schema version {version}, older than this linksweep's "
            f"{SCHEMA_VERSION}: open it with a linksweep command (query, report, export, run) "
            "once to upgrade it"
        )
    return con


def json_value(value: Any) -> Any:
    """A JSON column as read back: its decoded value, or the text as it is when it is not JSON."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


class Reader(_Handle):
    """Read-only handle for the report, the CLI and benchmarks. Use as a context manager.
    Opening never writes (commands call :func:`bring_up_to_date` first, by name).

    Refuses (StoreError) a missing file, a locked one, an older schema, or one that is not a
    linksweep database.
    """

    def __init__(self, path: str):
        if not os.path.exists(path):
            raise StoreError(
                f"--db {path} does not exist; run a sweep first (linksweep run SWEEP.yaml --db {path})"
            )
        self.path = path
        self.con = _open_read(path)

    def rows(self, query: Query, **params: Any) -> list[dict[str, Any]]:
        try:
            return _rows(self.con, query, params)
        except duckdb.Error as exc:
            raise StoreError(f"query {query.name} failed on {self.path}: {exc}") from None


def check_writable(path: str) -> None:
    """Before any work: refuse a locked, foreign or newer database without changing it."""
    if not os.path.exists(path):
        parent = os.path.dirname(os.path.abspath(path))
        if not os.access(parent, os.W_OK):
            raise StoreError(f"--db {path}: folder {parent} is not writable")
        return
    con = _connect(path, read_only=True, wait_s=READ_WAIT_S)
    try:
        version = _schema_version(con)
        tables = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'main'"
        ).fetchone()[0]
    finally:
        con.close()
    if version is None and tables:
        raise StoreError(
            f"--db {path} is a DuckDB database but not a linksweep one (no meta table)"
        )
    if version is not None and version > SCHEMA_VERSION:
        raise StoreError(
            f"--db {path} has schema version {version}, newer than this linksweep's "
            f"{SCHEMA_VERSION}; upgrade linksweep to use it"
        )


def read_query(path: str, sql: str) -> tuple[list[str], list[tuple]]:
    """Run one SQL statement read-only. Raises StoreError with a clear message on any failure."""
    if not os.path.exists(path):
        raise StoreError(f"{path} does not exist; run a sweep first (linksweep run SWEEP.yaml)")
    con = _open_read(path)
    try:
        try:
            cur = con.execute(sql)
        except duckdb.Error as exc:
            raise StoreError(f"query failed: {exc}") from None
        cols = [d[0] for d in cur.description] if cur.description else []
        return cols, cur.fetchall()
    finally:
        con.close()


def export_all(path: str, out_dir: str, fmt: str) -> list[str]:
    """Write every table and view to ``out_dir`` as parquet or csv; return the files written."""
    os.makedirs(out_dir, exist_ok=True)
    con = _open_read(path)
    written = []
    try:
        names = [*TABLES, *VIEWS]
        for name in names:
            if name == "meta":
                continue
            dest = os.path.join(out_dir, f"{name}.{fmt}")
            opts = "FORMAT parquet" if fmt == "parquet" else "FORMAT csv, HEADER true"
            con.execute(f"COPY (SELECT * FROM {name}) TO '{dest}' ({opts})")
            written.append(dest)
    finally:
        con.close()
    return written
