"""``linksweep query``: one SQL statement, read-only, printed as a table, CSV or JSON.

Imports beyond argparse and the help texts happen inside ``main``: building the parser stays
cheap for every command.

May import: orchestrator.cli_help, orchestrator.errors, orchestrator.store, orchestrator.ui.
"""

from __future__ import annotations

import argparse
import json

from orchestrator.cli_help import DB_HELP, QUERY_EPILOG, SQL_HELP
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_OK, err

FORMATS = ("table", "csv", "json")


def add_parser(sub) -> None:
    q = sub.add_parser(
        "query",
        help="run read-only SQL against the results database",
        description="Run one SQL statement, read-only (refused with a clear message while a "
        "sweep is writing the database). Numbers are printed in full, never abbreviated; use "
        "--format csv or json for other programs.",
        epilog=QUERY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    q.add_argument("sql", help=SQL_HELP)
    q.add_argument("--db", default="results.duckdb", help=DB_HELP)
    q.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="table: aligned, numbers in full; csv or json: for other programs (default: table)",
    )
    q.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from orchestrator.store import StoreError, bring_up_to_date, read_query
    from orchestrator.ui import print_table, write_csv

    try:
        bring_up_to_date(args.db)
        cols, rows = read_query(args.db, args.sql)
    except StoreError as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    if args.format == "json":
        print(json.dumps([dict(zip(cols, r, strict=True)) for r in rows], default=str, indent=1))
    elif args.format == "csv":
        write_csv(cols, rows)
    else:
        print_table(cols, rows)
    return EXIT_OK
