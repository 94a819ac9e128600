"""``linksweep linkbench SWEEP.yaml``: only the link microbenchmark of a sweep file, each link x
placement (all_reduce, all_gather, reduce_scatter from 1 KiB to ``linkbench_max_mb``), stored in
``link_bench`` and printed from the ``link_bandwidth`` view.

May import: sweeping, orchestrator.cli_help, orchestrator.errors, orchestrator.store,
orchestrator.sweep.execute, orchestrator.ui.
"""

from __future__ import annotations

import argparse
import sys

from orchestrator.cli_help import ADDRESS_HELP, DB_HELP, EXIT_CODES
from orchestrator.commands.sweeping import (
    add_set_argument,
    load_checked,
    on_cluster,
    open_store,
    print_query_table,
)
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_OK, err


def add_parser(sub) -> None:
    lb = sub.add_parser(
        "linkbench",
        help="run only the link microbenchmark of a sweep file (each link x placement)",
        description="all_reduce, all_gather and reduce_scatter over each link of a sweep file, "
        "from 1 KiB to linkbench_max_mb; stored in link_bench, read through link_bandwidth.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    lb.add_argument("sweep", help="sweep file (YAML); its links and placements are measured")
    add_set_argument(lb)
    lb.add_argument("--db", default="results.duckdb", help=DB_HELP)
    lb.add_argument("--address", default=None, help=ADDRESS_HELP)
    lb.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    # nothing trains: no ZeRO config to check
    spec = load_checked(args.sweep, args.db, deepspeed=False, overrides=args.set)
    store = open_store(args.db) if spec is not None else None
    if store is None:
        return EXIT_BAD_INPUT

    def body(address: str, bundle: dict, excluded: list[dict]) -> int:
        from orchestrator.store import Q
        from orchestrator.store.db import StoreLocked
        from orchestrator.sweep.execute import execute_linkbench
        from orchestrator.ui import SweepUI

        ui = SweepUI()
        try:
            sweep_id = execute_linkbench(spec, store, address, bundle, ui, excluded)
        except StoreLocked as exc:  # busy from the start
            err(str(exc))
            return EXIT_BAD_INPUT
        try:
            title = f"link_bandwidth (sweep {sweep_id})"
            print_query_table(store, Q.BANDWIDTH_TABLE, sweep_id, title)
        except StoreLocked:
            err(f"{args.db} is busy: no table; the measurements are stored (linksweep query)")
        print(f"results: {args.db} (sweep {sweep_id})", file=sys.stderr)
        return EXIT_OK  # a failed measurement is a row of link_bench (status, error)

    return on_cluster(spec, args.address, f"measure again: linksweep linkbench {args.sweep}", body)
