"""``linksweep export``: every table and view of the database, one parquet or CSV file each.

May import: shared, orchestrator.cli_help, orchestrator.errors, orchestrator.store.
"""

from __future__ import annotations

import argparse
import os

from orchestrator.cli_help import DB_HELP
from orchestrator.commands.shared import ready_to_read
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_OK, err

FORMATS = ("parquet", "csv")


def add_parser(sub) -> None:
    ex = sub.add_parser("export", help="write every table and view as parquet or csv")
    ex.add_argument("outdir", help="output folder, created if missing; one file per table/view")
    ex.add_argument(
        "--format", choices=FORMATS, default="parquet", help="file format (default: parquet)"
    )
    ex.add_argument("--db", default="results.duckdb", help=DB_HELP)
    ex.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Exit 0 with the files listed; 2 when the database cannot be read or OUTDIR written.
    CSV lines end with ``\\n`` (DuckDB's COPY)."""
    from orchestrator.store import Reader, StoreError, export_all

    db, out_dir = args.db, args.outdir
    if not ready_to_read(db):
        return EXIT_BAD_INPUT
    try:
        with Reader(db):  # refuses a foreign or locked database with a clear message
            pass
        os.makedirs(out_dir, exist_ok=True)
        if not os.access(out_dir, os.W_OK):
            raise OSError(13, "not writable")
    except StoreError as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    except OSError as exc:
        err(f"{out_dir}: cannot write there ({exc.strerror or exc})")
        return EXIT_BAD_INPUT
    try:
        written = export_all(db, out_dir, args.format)
    except StoreError as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    print(f"exported {len(written)} tables and views from {db} as {args.format}:")
    for path in written:
        print(f"  {path}")
    return EXIT_OK
