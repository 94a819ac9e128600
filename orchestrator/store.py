"""DuckDB behind one small interface: the only module that imports duckdb.

The Ray driver is the only writer (DuckDB allows one read-write process, or many read-only
ones). Workers return plain records; the driver stores each run in one transaction, so a crash
or Ctrl-C leaves every finished run intact. Readers open ``read_only=True``.

The schema lives here, in one place, with a version number. Opening an older database upgrades
it in a transaction (``MIGRATIONS``); a newer or foreign one is refused with a clear message.
Analysis is plain SQL views created with the schema, so users can read and reuse them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from typing import Any

import duckdb

SCHEMA_VERSION = 1

TABLES: dict[str, str] = {
    "meta": """
        key VARCHAR PRIMARY KEY,
        value VARCHAR
    """,
    "sweeps": """
        sweep_id VARCHAR PRIMARY KEY,
        name VARCHAR,
        spec JSON,
        started_at TIMESTAMPTZ,
        finished_at TIMESTAMPTZ,
        status VARCHAR,              -- running | ok | failed | interrupted
        git_sha VARCHAR,
        git_dirty BOOLEAN,
        versions JSON,
        ray_address VARCHAR,
        n_runs_planned INTEGER,
        driver_host VARCHAR,
        topology_status VARCHAR
    """,
    "runs": """
        run_id VARCHAR PRIMARY KEY,
        sweep_id VARCHAR,
        seq INTEGER,                 -- execution order within the sweep (interleaved repeats)
        strategy VARCHAR,
        offload VARCHAR,
        grad_accum INTEGER,
        bucket_mb INTEGER,
        link VARCHAR,
        link_env JSON,
        placement VARCHAR,
        world_size INTEGER,
        model VARCHAR,
        n_params BIGINT,
        precision VARCHAR,
        seq_len INTEGER,
        micro_batch_size INTEGER,
        steps INTEGER,
        warmup_steps INTEGER,
        "repeat" INTEGER,
        backend VARCHAR,
        status VARCHAR,              -- ok | failed
        error VARCHAR,
        started_at TIMESTAMPTZ,
        finished_at TIMESTAMPTZ,
        startup_s DOUBLE,            -- actors created -> first step starts
        nodes JSON,                  -- per rank: node id, hostname, ip, gpu ids
        gpu_visibility VARCHAR,
        data_source VARCHAR,
        tokenizer VARCHAR,
        peak_mem_bytes BIGINT,       -- max over ranks
        comm_bytes_per_step DOUBLE,  -- measured message bytes per optimizer step per rank
        expected_comm_bytes_per_step DOUBLE,
        comm_note VARCHAR,
        nvme_swap_files INTEGER,     -- files DeepSpeed had written under nvme_path (offload nvme)
        predicted_comm_s_per_step DOUBLE,
        link_class VARCHAR,
        effective_transport VARCHAR,
        link_check VARCHAR,          -- ok | mismatch | unknown
        nccl_version VARCHAR,
        telemetry VARCHAR,           -- nvml | absent: <reason>
        max_temp_c DOUBLE,
        mean_power_w DOUBLE,
        min_sm_clock_mhz DOUBLE,
        throttled BOOLEAN,
        hot BOOLEAN,
        variant JSON
    """,
    "steps": """
        run_id VARCHAR,
        rank INTEGER,
        step INTEGER,
        warmup BOOLEAN,
        step_time_s DOUBLE,
        samples INTEGER,
        tokens BIGINT,
        loss DOUBLE
    """,
    "ranks": """
        run_id VARCHAR,
        rank INTEGER,
        node_id VARCHAR,
        hostname VARCHAR,
        local_rank INTEGER,
        device VARCHAR,
        peak_mem_bytes BIGINT
    """,
    "comms": """
        run_id VARCHAR,
        rank INTEGER,
        op VARCHAR,
        msg_bytes BIGINT,
        count BIGINT,
        total_time_s DOUBLE,
        algbw_gbps DOUBLE,
        busbw_gbps DOUBLE
    """,
    "nodes": """
        sweep_id VARCHAR,
        node VARCHAR,                -- hostname
        node_id VARCHAR,
        ip VARCHAR,
        cpus DOUBLE,
        gpus DOUBLE,
        topo_text VARCHAR,
        driver_version VARCHAR,
        cuda_version VARCHAR,
        nvml VARCHAR
    """,
    "gpus": """
        sweep_id VARCHAR,
        node VARCHAR,
        gpu_index INTEGER,
        name VARCHAR,
        uuid VARCHAR,
        pci_bus_id VARCHAR,
        memory_total_bytes BIGINT,
        pcie_gen_current INTEGER,
        pcie_gen_max INTEGER,
        pcie_width_current INTEGER,
        pcie_width_max INTEGER,
        power_limit_w DOUBLE,
        power_default_limit_w DOUBLE,
        nvlink_active_count INTEGER
    """,
    "gpu_links": """
        sweep_id VARCHAR,
        node VARCHAR,
        gpu_a VARCHAR,
        gpu_b VARCHAR,
        link VARCHAR
    """,
    "transports": """
        run_id VARCHAR,
        rank INTEGER,
        channel INTEGER,
        peer INTEGER,
        transport VARCHAR,
        detail VARCHAR
    """,
    "telemetry": """
        run_id VARCHAR,
        rank INTEGER,
        t_s DOUBLE,
        temp_c DOUBLE,
        power_w DOUBLE,
        sm_clock_mhz DOUBLE,
        reasons BIGINT
    """,
    "link_bench": """
        sweep_id VARCHAR,
        link VARCHAR,
        placement VARCHAR,
        backend VARCHAR,
        world_size INTEGER,
        op VARCHAR,
        msg_bytes BIGINT,
        iteration INTEGER,
        time_s DOUBLE,
        algbw_gbps DOUBLE,
        busbw_gbps DOUBLE,
        status VARCHAR,
        error VARCHAR
    """,
    "variant_stats": """
        sweep_id VARCHAR,
        strategy VARCHAR,
        offload VARCHAR,
        grad_accum INTEGER,
        bucket_mb INTEGER,
        link VARCHAR,
        placement VARCHAR,
        n_runs INTEGER,
        n_excluded INTEGER,
        median_step_time_s DOUBLE,
        ci_low_s DOUBLE,
        ci_high_s DOUBLE
    """,
    "sensitivity_stats": """
        sweep_id VARCHAR,
        strategy VARCHAR,
        offload VARCHAR,
        grad_accum INTEGER,
        bucket_mb INTEGER,
        placement VARCHAR,
        link VARCHAR,
        baseline_link VARCHAR,
        slowdown DOUBLE,
        ci_low DOUBLE,
        ci_high DOUBLE
    """,
}

VIEWS: dict[str, str] = {
    # Per step: the slowest rank sets the pace (max over ranks), warmup excluded.
    "step_times": """
        SELECT run_id, step, max(step_time_s) AS step_time_s,
               sum(samples) AS samples, sum(tokens) AS tokens, avg(loss) AS loss
        FROM steps WHERE NOT warmup GROUP BY run_id, step
    """,
    "run_summary": """
        SELECT r.run_id, r.sweep_id, r.seq, r.strategy, r.offload, r.grad_accum, r.bucket_mb,
               r.link, r.placement, r.world_size, r.model, r.precision, r."repeat", r.backend,
               r.status, r.throttled, r.link_class, r.effective_transport, r.link_check,
               count(s.step) AS n_steps,
               median(s.step_time_s) AS median_step_time_s,
               quantile_cont(s.step_time_s, 0.1) AS p10_step_time_s,
               quantile_cont(s.step_time_s, 0.9) AS p90_step_time_s,
               sum(s.samples) / sum(s.step_time_s) AS samples_per_s,
               sum(s.tokens) / sum(s.step_time_s) AS tokens_per_s,
               r.comm_bytes_per_step, r.expected_comm_bytes_per_step,
               r.predicted_comm_s_per_step, r.peak_mem_bytes, r.startup_s
        FROM runs r LEFT JOIN step_times s USING (run_id)
        GROUP BY ALL
    """,
    "variant_summary": """
        SELECT v.sweep_id, v.strategy, v.offload, v.grad_accum, v.bucket_mb, v.link, v.placement,
               v.n_runs, v.n_excluded, v.median_step_time_s, v.ci_low_s, v.ci_high_s,
               median(rs.samples_per_s) AS samples_per_s,
               median(rs.tokens_per_s) AS tokens_per_s,
               median(rs.comm_bytes_per_step) AS comm_bytes_per_step,
               median(rs.expected_comm_bytes_per_step) AS expected_comm_bytes_per_step,
               median(rs.predicted_comm_s_per_step) AS predicted_comm_s_per_step,
               max(rs.peak_mem_bytes) AS peak_mem_bytes
        FROM variant_stats v
        LEFT JOIN run_summary rs
          ON rs.status = 'ok' AND NOT coalesce(rs.throttled, false)
         AND rs.sweep_id = v.sweep_id AND rs.strategy = v.strategy AND rs.offload = v.offload
         AND rs.grad_accum = v.grad_accum AND rs.bucket_mb = v.bucket_mb AND rs.link = v.link
         AND rs.placement = v.placement
        GROUP BY ALL
    """,
    "link_sensitivity": """
        SELECT sweep_id, strategy, offload, grad_accum, bucket_mb, placement, link, baseline_link,
               slowdown, ci_low, ci_high
        FROM sensitivity_stats
    """,
    "link_bandwidth": """
        SELECT sweep_id, link, placement, backend, world_size, op AS collective, msg_bytes,
               count(*) AS iterations,
               median(time_s) AS time_s,
               median(algbw_gbps) AS algbw_gbps,
               median(busbw_gbps) AS busbw_gbps
        FROM link_bench WHERE status = 'ok'
        GROUP BY ALL
    """,
}

# version -> SQL statements that bring a database from version-1 to version.
MIGRATIONS: dict[int, list[str]] = {}


class StoreError(RuntimeError):
    """The database cannot be used as asked (locked, foreign, newer schema)."""


def _is_lock_error(exc: Exception) -> bool:
    text = str(exc)
    return "lock" in text.lower() and ("Could not set lock" in text or "Conflicting lock" in text)


def _connect(path: str, read_only: bool) -> duckdb.DuckDBPyConnection:
    try:
        return duckdb.connect(path, read_only=read_only)
    except duckdb.IOException as exc:
        if _is_lock_error(exc):
            raise StoreError(
                f"{path} is locked by another process (a sweep is writing to it); "
                "query it when the sweep has finished, or query a copy"
            ) from None
        raise StoreError(f"cannot open {path}: {exc}") from None


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


def _jsonify(value: Any) -> Any:
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, default=str)
    return value


class Store:
    """Read-write handle used by the driver. Use as a context manager."""

    def __init__(self, path: str):
        self.path = path
        self.con = _connect(path, read_only=False)
        try:
            _prepare(self.con, path)
        except Exception:
            self.con.close()
            raise

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
        """Insert dict rows; keys must be columns of ``table`` (missing ones stay NULL)."""
        if not rows:
            return
        cols = list(rows[0])
        for r in rows:
            if list(r) != cols:
                raise ValueError(f"{table}: rows must share the same keys")
        names = ", ".join(f'"{c}"' for c in cols)
        marks = ", ".join("?" for _ in cols)
        self.con.executemany(
            f"INSERT INTO {table} ({names}) VALUES ({marks})",
            [[_jsonify(r[c]) for c in cols] for r in rows],
        )

    def update(self, table: str, key: dict[str, Any], values: dict[str, Any]) -> None:
        sets = ", ".join(f'"{c}" = ?' for c in values)
        where = " AND ".join(f'"{c}" = ?' for c in key)
        self.con.execute(
            f"UPDATE {table} SET {sets} WHERE {where}",
            [_jsonify(v) for v in values.values()] + list(key.values()),
        )

    def query(self, sql: str, params: Iterable[Any] = ()) -> tuple[list[str], list[tuple]]:
        cur = self.con.execute(sql, list(params))
        cols = [d[0] for d in cur.description] if cur.description else []
        return cols, cur.fetchall()

    def replace_rows(self, table: str, where: dict[str, Any], rows: Sequence[dict]) -> None:
        """Delete the rows matching ``where`` and insert ``rows``, in one transaction."""
        cond = " AND ".join(f'"{c}" = ?' for c in where)
        with self.transaction():
            self.con.execute(f"DELETE FROM {table} WHERE {cond}", list(where.values()))
            self.insert(table, rows)


def check_writable(path: str) -> None:
    """Before any work: refuse a locked, foreign or newer database without changing it."""
    if not os.path.exists(path):
        parent = os.path.dirname(os.path.abspath(path))
        if not os.access(parent, os.W_OK):
            raise StoreError(f"--db {path}: folder {parent} is not writable")
        return
    con = _connect(path, read_only=True)
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
    con = _connect(path, read_only=True)
    try:
        version = _schema_version(con)
        if version is None:
            raise StoreError(f"{path} is not a linksweep database (no meta table)")
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
    con = _connect(path, read_only=True)
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
