"""``linksweep run SWEEP.yaml``: every variant of a sweep file, repeats interleaved, each run
stored as it ends; at the end the variant and slowdown tables, the links and the headline.
``--resume`` continues an interrupted sweep under its id.

May import: sweeping, orchestrator.cli_help, orchestrator.errors, orchestrator.headline,
orchestrator.links, orchestrator.longsweep, orchestrator.resume, orchestrator.store,
orchestrator.sweep, orchestrator.ui.
"""

from __future__ import annotations

import argparse
import sys

from orchestrator.cli_help import ADDRESS_HELP, DB_HELP, EXIT_CODES
from orchestrator.commands.sweeping import load_checked, on_cluster, open_store, print_query_table
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, err


def add_parser(sub) -> None:
    r = sub.add_parser(
        "run",
        help="run a sweep file and store every run in DuckDB",
        description="Run every variant of a sweep file, repeats interleaved, storing each run "
        "as it ends; print the variant and slowdown tables, the links and the headline.",
        epilog=f"{EXIT_CODES}\n\nthen: linksweep report [--db PATH]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("sweep", help="sweep file (YAML), e.g. sweeps/quickstart.yaml")
    r.add_argument("--db", default="results.duckdb", help=DB_HELP)
    r.add_argument("--address", default=None, help=ADDRESS_HELP)
    r.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=None,
        metavar="SWEEP_ID",
        help="continue an interrupted sweep (default: the latest with this file's name): same "
        "sweep id, only the runs not stored yet, in the original order",
    )
    r.add_argument(
        "--retry-failed",
        action="store_true",
        help="with --resume (implied): also re-run failed runs (kept, marked superseded); "
        "default: off",
    )
    r.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    spec = load_checked(args.sweep, args.db, deepspeed=True)
    store = open_store(args.db) if spec is not None else None
    if store is None:
        return EXIT_BAD_INPUT
    resume = None
    if args.resume or args.retry_failed:
        from orchestrator.longsweep import resume_plan
        from orchestrator.resume import ResumeError
        from orchestrator.store import StoreError

        sweep_arg = args.resume if isinstance(args.resume, str) else None
        try:
            resume = resume_plan(store, spec, sweep_arg, args.retry_failed)
        except (ResumeError, StoreError) as exc:
            err(str(exc))
            return EXIT_BAD_INPUT
        print(f"resuming sweep {resume[0]}: {len(resume[1])} run(s) left", file=sys.stderr)

    def body(address: str, bundle: dict) -> int:
        from orchestrator.store import Q
        from orchestrator.store.db import StoreLocked
        from orchestrator.sweep import execute_sweep
        from orchestrator.ui import SweepUI

        ui = SweepUI()
        try:
            sweep_id = execute_sweep(spec, store, address, bundle, ui, resume=resume)
        except StoreLocked as exc:  # busy from the start (runs that finished are spooled)
            err(str(exc))
            return EXIT_BAD_INPUT
        try:
            _print_summary(store, sweep_id)
            failed = store.rows(Q.FAILED_RUN_COUNT, sweep_id=sweep_id)[0]["n"]
        except StoreLocked:
            err(f"{args.db} is busy: no summary; every run is stored or spooled (linksweep query)")
            failed = ui.failed
        print(f"results: {args.db} (sweep {sweep_id})", file=sys.stderr)
        return EXIT_FAILED if failed else EXIT_OK

    hint = f"resume: linksweep run {args.sweep} --resume --db {args.db}"
    return on_cluster(spec, args.address, hint, body)


def _print_summary(store, sweep_id: str) -> None:
    from orchestrator.store import Q

    print_query_table(
        store, Q.VARIANT_SUMMARY_TABLE, sweep_id, f"variant_summary (sweep {sweep_id})"
    )
    print_query_table(
        store,
        Q.SENSITIVITY_TABLE,
        sweep_id,
        "link_sensitivity (variant median / baseline median)",
        if_empty=False,
    )
    print_query_table(
        store,
        Q.LINK_MODEL_EXPOSURE_TABLE,
        sweep_id,
        "link model: step = compute_s + exposure x predicted comm (exposure: share of "
        "communication the step does not hide; 95% bootstrap interval)",
        if_empty=False,
    )
    for r in store.rows(Q.LINK_MISMATCHES, sweep_id=sweep_id):
        print(
            f"LINK MISMATCH run #{r['seq']}: link {r['link']!r} on a {r['link_class']} pair but "
            f"NCCL used {r['effective_transport']}: this run does not measure what its link "
            "name says",
            file=sys.stderr,
        )
    (c,) = store.rows(Q.TELEMETRY_COUNTS, sweep_id=sweep_id)
    if c["absent"] == c["total"]:
        throttling = "throttling not checked (no GPU telemetry on any run)"
    else:
        throttling = (
            f"{c['throttled']} throttled and {c['hot']} hot run(s) of {c['total']} (kept, "
            f"flagged, excluded from figures); throttling not checked on {c['absent']} run(s) "
            "without GPU telemetry"
        )
    print(f"telemetry: {throttling}", file=sys.stderr)
    _print_headline(store, sweep_id)


def _print_headline(store, sweep_id: str) -> None:
    """The links as described and measured, then the headline (orchestrator/headline.py)."""
    from orchestrator.headline import build_headline
    from orchestrator.links import link_label
    from orchestrator.store import Q
    from orchestrator.ui import print_headline

    overview = store.rows(Q.REPORT_LINK_OVERVIEW, sweep_id=sweep_id)
    for o in overview:
        print(f"link {link_label(o['link'], o)}: {o['description']}")
    headline = build_headline(
        store.rows(Q.REPORT_SENSITIVITY, sweep_id=sweep_id),
        store.rows(Q.REPORT_VARIANTS, sweep_id=sweep_id),
        overview,
    )
    print_headline(headline)
