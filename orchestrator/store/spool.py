"""The spool: each finished run, written durably beside the database before it is committed.

A run's rows go to ``<db>.spool/<run_id>.json`` (written to a temporary name, fsync'd, renamed,
and the folder fsync'd), and only then into DuckDB. Whoever next opens the database for writing
(``Store``: the driver itself a moment later, or any later command) commits every spooled run
in one transaction each and deletes its file. Committing is idempotent: a run whose ``run_id``
is already stored is not inserted again (the process may die between COMMIT and unlink).

A file is JSON (no pickle): ``{"run_id", "tables": {table: [row, ...]}, "updates": [...]}``;
datetimes are tagged ``{"$datetime": iso}`` and read back as datetimes. Pure file I/O: no
duckdb here (``db.py`` applies the payloads).

May import: nothing (the standard library only).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from dataclasses import dataclass, field
from typing import Any

SUFFIX = ".json"
FORMAT = 1


def spool_dir(db_path: str) -> str:
    return os.path.abspath(db_path) + ".spool"


@dataclass
class Payload:
    """One run's rows, and updates to apply in the same transaction (e.g. supersede a run)."""

    run_id: str
    tables: dict[str, list[dict[str, Any]]]
    updates: list[dict[str, Any]] = field(default_factory=list)
    """Each ``{"table", "key": {...}, "values": {...}}``."""


def _default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if hasattr(value, "item") and hasattr(value, "dtype"):  # a numpy scalar
        return value.item()
    raise TypeError(f"cannot spool a {type(value).__name__}: {value!r}")


def _hook(obj: dict) -> Any:
    if len(obj) == 1 and "$datetime" in obj:
        return dt.datetime.fromisoformat(obj["$datetime"])
    return obj


def encode(p: Payload) -> bytes:
    body = {"format": FORMAT, "run_id": p.run_id, "tables": p.tables, "updates": p.updates}
    return json.dumps(body, default=_default).encode()


def decode(data: bytes) -> Payload:
    body = json.loads(data, object_hook=_hook)
    if body.get("format") != FORMAT:
        raise ValueError(f"spool format {body.get('format')!r}, expected {FORMAT}")
    return Payload(body["run_id"], body["tables"], body.get("updates", []))


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_name(run_id: str) -> str:
    return run_id + SUFFIX


def write(db_path: str, p: Payload) -> str:
    """Durably spool ``p``; returns the file. After this returns the run survives a crash."""
    folder = spool_dir(db_path)
    os.makedirs(folder, exist_ok=True)
    final = os.path.join(folder, file_name(p.run_id))
    tmp = f"{final}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(encode(p))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    _fsync_dir(folder)
    return final


def pending(db_path: str) -> list[str]:
    """Spooled files not yet committed, oldest run first (run ids sort by sequence).

    Temporary files (a writer died before its rename) are not runs: they are ignored.
    """
    folder = spool_dir(db_path)
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return [os.path.join(folder, n) for n in sorted(names) if n.endswith(SUFFIX)]


def read(path: str) -> Payload:
    with open(path, "rb") as f:
        return decode(f.read())


def done(path: str) -> None:
    """The file's run is committed: remove it (another process may have done so already)."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
