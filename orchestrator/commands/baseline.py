"""``linksweep baseline set|list``: name a sweep to compare later ones with (``compare
--baseline NAME``, ``report --baseline NAME``), stored in the ``baselines`` table of ``--db``.

``set`` writes one row (``Store.set_baseline``, one transaction; an existing name is replaced and
the command says so); ``list`` only reads.

May import: shared, orchestrator.cli_help, orchestrator.errors, orchestrator.store,
orchestrator.ui.
"""

from __future__ import annotations

import argparse
import json

from orchestrator.cli_help import BASELINE_EPILOG, DB_HELP
from orchestrator.commands.shared import ready_to_read
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_OK, err

FORMATS = ("table", "json")
COLUMNS = ("name", "sweep_id", "sweep_name", "started_at", "n_runs", "set_at", "note")


def add_parser(sub) -> None:
    bp = sub.add_parser(
        "baseline",
        help="name a sweep as a baseline for compare (set), or list the names (list)",
        description="Named baselines, stored in the database: `compare --baseline NAME` and "
        "`report --baseline NAME` compare a sweep with the one named.",
        epilog=BASELINE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bsub = bp.add_subparsers(
        dest="action", required=True, metavar="ACTION", help="set or list (required)"
    )
    bs = bsub.add_parser("set", help="name a sweep (default: the newest with runs)")
    bs.add_argument("name", metavar="NAME")
    bs.add_argument("--sweep", default=None, help="sweep id (default: the newest with runs)")
    bs.add_argument("--db", default="results.duckdb", help=DB_HELP)
    bs.add_argument("--note", default=None, help="a note kept with the name")
    bs.set_defaults(func=main)
    bl = bsub.add_parser("list", help="every named baseline")
    bl.add_argument("--db", default="results.duckdb", help=DB_HELP)
    bl.add_argument("--format", choices=FORMATS, default="table", help="(default: table)")
    bl.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Exit 0 done; 2 no such database or sweep, or an empty name."""
    if not ready_to_read(args.db):
        return EXIT_BAD_INPUT
    if args.action == "set":
        return _set(args)
    return _list(args)


def _set(args) -> int:
    from orchestrator.store import Store, StoreError
    from orchestrator.store.db import READ_WAIT_S
    from orchestrator.store.snapshot import has_sweep, newest_sweep_id

    name = args.name.strip()
    if not name:
        err("baseline set NAME: the name is empty")
        return EXIT_BAD_INPUT
    try:
        if args.sweep is None:
            sweep_id = newest_sweep_id(args.db)
        elif has_sweep(args.db, args.sweep):
            sweep_id = args.sweep
        else:
            err(f"--sweep {args.sweep}: no such sweep in {args.db}")
            return EXIT_BAD_INPUT
        with Store(args.db, wait_s=READ_WAIT_S) as store:
            before = store.set_baseline(name, sweep_id, args.note)
    except StoreError as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    if before is None:
        print(f"baseline {name} = sweep {sweep_id} ({args.db})")
    elif before == sweep_id:
        print(f"baseline {name} = sweep {sweep_id} ({args.db}), as before")
    else:
        print(f"baseline {name} = sweep {sweep_id} ({args.db}), replacing sweep {before}")
    return EXIT_OK


def _list(args) -> int:
    from orchestrator.store import StoreError
    from orchestrator.store.snapshot import baselines

    try:
        rows = baselines(args.db)
    except StoreError as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    if args.format == "json":
        print(json.dumps([{c: r.get(c) for c in COLUMNS} for r in rows], indent=1, default=str))
        return EXIT_OK
    from orchestrator.ui import print_table

    print_table(list(COLUMNS), [tuple(r.get(c) for c in COLUMNS) for r in rows], title="baselines")
    return EXIT_OK
