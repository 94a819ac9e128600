"""``linksweep export``: every table and view of the database, one parquet or CSV file each;
with ``--mlflow URI``, its sweeps logged to MLflow instead (or as well, with OUTDIR):
``orchestrator/tracking/mlflow_log.py``, docs/mlflow.md.

May import: shared, orchestrator.cli_help, orchestrator.errors, orchestrator.store,
orchestrator.tracking.
"""

from __future__ import annotations

import argparse
import os

from orchestrator.cli_help import DB_HELP
from orchestrator.commands.shared import ready_to_read
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, err

FORMATS = ("parquet", "csv")


def add_parser(sub) -> None:
    ex = sub.add_parser(
        "export",
        help="write every table and view as parquet or csv, or log sweeps to MLflow",
        epilog="exit codes: 0 written; 2 bad input (no such database or sweep, OUTDIR not "
        "writable, an unusable --mlflow URI or mlflow not installed), nothing written; 1 MLflow "
        "refused what was logged (what it took stays; logging again goes on from there)",
    )
    ex.add_argument(
        "outdir",
        nargs="?",
        default=None,
        help="output folder, created if missing; one file per table/view (not needed with "
        "--mlflow)",
    )
    ex.add_argument(
        "--format", choices=FORMATS, default="parquet", help="file format (default: parquet)"
    )
    ex.add_argument("--db", default="results.duckdb", help=DB_HELP)
    ex.add_argument(
        "--mlflow",
        default=None,
        metavar="URI",
        help="log the database's sweeps to MLflow at this tracking URI (e.g. "
        "sqlite:///mlflow.db): one MLflow run per sweep, one nested run per linksweep run, the "
        "report as the sweep's artifacts; logging again logs only what is new (docs/mlflow.md); "
        "needs pip install 'linksweep[mlflow]'; default: off",
    )
    ex.add_argument(
        "--sweep",
        action="append",
        default=None,
        metavar="ID",
        help="with --mlflow: this sweep only (repeatable; 'latest': the most recent); default: "
        "every sweep that planned runs",
    )
    ex.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Exit 0 with the files listed; 2 when the database cannot be read or OUTDIR written.
    CSV lines end with ``\\n`` (DuckDB's COPY)."""
    from orchestrator.store import Reader, StoreError, export_all

    db, out_dir = args.db, args.outdir
    if out_dir is None and not args.mlflow:
        err("export needs OUTDIR (files) or --mlflow URI (MLflow), or both")
        return EXIT_BAD_INPUT
    if args.sweep and not args.mlflow:
        err("--sweep chooses what --mlflow logs; the files hold every sweep (leave out --sweep)")
        return EXIT_BAD_INPUT
    if not os.path.exists(db):
        ready_to_read(db)  # says why (no such database), creating nothing
        return EXIT_BAD_INPUT
    if args.mlflow:  # before the database is brought up to date: nothing written on bad input
        from orchestrator.tracking.mlflow_client import unreachable

        why = unreachable(args.mlflow)
        if why:
            err(f"--mlflow {args.mlflow}: {why}")
            return EXIT_BAD_INPUT
    if not ready_to_read(db):
        return EXIT_BAD_INPUT
    if out_dir is None:
        return _to_mlflow(args)
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
    return _to_mlflow(args) if args.mlflow else EXIT_OK


def _to_mlflow(args: argparse.Namespace) -> int:
    """Each sweep asked for, logged to ``--mlflow`` (only what MLflow lacks); a line each."""
    from orchestrator.store import StoreError
    from orchestrator.tracking.mlflow_log import export

    try:
        done = export(args.mlflow, args.db, args.sweep)
    except StoreError as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    except KeyError as exc:
        err(f"--sweep: no such sweep in {args.db}: {exc.args[0]}")
        return EXIT_BAD_INPUT
    except Exception as exc:  # noqa: BLE001 - MLflow's own errors, said in one line
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        err(f"--mlflow {args.mlflow}: {type(exc).__name__}: {first}")
        return EXIT_FAILED
    print(f"logged {len(done)} sweep(s) of {args.db} to MLflow at {args.mlflow}:")
    for sweep_id, synced in done:
        print(f"  sweep {sweep_id}: {synced}")
    return EXIT_OK
