"""``linksweep run SWEEP.yaml``: every variant of a sweep file, repeats interleaved, each run
stored as it ends; at the end the variant and slowdown tables, the links and the headline.
``--resume`` continues an interrupted sweep under its id. ``--exclude-suspects FLEET_ID`` keeps
the ranks off the nodes a fleet check (``linksweep fleet``) named suspect, beside the sweep
file's ``exclude_nodes``.

May import: observers, sweeping, orchestrator.cli_help, orchestrator.errors, orchestrator.sweep.exclusions,
orchestrator.analysis.headline, orchestrator.analysis.stats,
orchestrator.analysis.links, orchestrator.report.accumulation, orchestrator.sweep.ledger,
orchestrator.sweep.resume, orchestrator.store, orchestrator.sweep.execute, orchestrator.ui,
workloads.catalog.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from orchestrator.cli_help import ADDRESS_HELP, DB_HELP, EXIT_CODES
from orchestrator.commands.observers import add_observer_arguments, observer_problems, observers
from orchestrator.commands.sweeping import add_set_argument, load_checked, on_cluster, open_store
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, err

if TYPE_CHECKING:
    from orchestrator.store import TableStore


def add_parser(sub) -> None:
    r = sub.add_parser(
        "run",
        help="run a sweep file and store every run in DuckDB",
        description="Run every variant of a sweep file, repeats interleaved, storing each run "
        "as it ends; print the variant and slowdown tables, the links and the headline.",
        epilog=f"{EXCLUDE_HELP}\n\n{EXIT_CODES}\n\nthen: linksweep report [--db PATH]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("sweep", help="sweep file (YAML), e.g. sweeps/quickstart.yaml")
    r.add_argument("--db", default="results.duckdb", help=DB_HELP)
    add_set_argument(r)
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
    r.add_argument(
        "--exclude-suspects",
        default=None,
        metavar="FLEET_ID",
        help="keep every rank off the nodes fleet check FLEET_ID (in --db; 'latest': the most "
        "recent) named suspect, besides the sweep file's exclude_nodes; suspect pairs are only "
        "named (add one of their nodes to exclude_nodes); default: none",
    )
    add_observer_arguments(r, "run")
    r.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    spec = load_checked(args.sweep, args.db, deepspeed=True, overrides=args.set)
    if spec is None:
        return EXIT_BAD_INPUT
    # The observers' options after the sweep file: checking --mlflow sqlite:///PATH creates
    # that store, which a refused sweep file must not leave behind.
    problems = observer_problems(args)
    for problem in problems:
        err(problem)
    if problems:
        return EXIT_BAD_INPUT
    store = open_store(args.db)
    if store is None:
        return EXIT_BAD_INPUT
    resume = None
    if args.resume or args.retry_failed:
        from orchestrator.store import StoreError
        from orchestrator.sweep.ledger import resume_plan
        from orchestrator.sweep.resume import ResumeError

        sweep_arg = args.resume if isinstance(args.resume, str) else None
        try:
            resume = resume_plan(store, spec, sweep_arg, args.retry_failed)
        except (ResumeError, StoreError) as exc:
            err(str(exc))
            return EXIT_BAD_INPUT
        print(f"resuming sweep {resume[0]}: {len(resume[1])} run(s) left", file=sys.stderr)
    exclude = _exclusion_entries(store, args, resume)
    if exclude is None:
        return EXIT_BAD_INPUT

    def body(address: str, bundle: dict, excluded: list[dict]) -> int:
        from orchestrator.store import Q
        from orchestrator.store.db import StoreLocked
        from orchestrator.sweep.execute import SweepStart, execute_sweep
        from orchestrator.ui import SweepUI

        ui = SweepUI(observers=observers(args, address=address, db=args.db, command="run"))
        try:
            start = SweepStart(resume, excluded)
            sweep_id = execute_sweep(spec, store, address, bundle, ui, start)
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
    return on_cluster(spec, args.address, hint, body, exclude)


EXCLUDE_HELP = """\
avoiding nodes:
  exclude_nodes: [ID, IP or HOSTNAME, ...] in the sweep file, and --exclude-suspects FLEET_ID,
  keep every rank (and the link microbenchmark's) off those nodes: entries are matched against
  the nodes alive when the sweep starts (a hostname several nodes share excludes them all; an
  entry matching none is a warning), capacity is checked without them, and the sweep stores
  what it excluded in sweeps.excluded_nodes. --resume re-resolves the file's entries and the
  fleet suspects the sweep excluded against the nodes alive then."""


def _exclusion_entries(
    store: TableStore, args: argparse.Namespace, resume
) -> list[tuple[str, str]] | None:
    """Entries to exclude beyond the sweep file's: the suspect nodes of ``--exclude-suspects``
    (read before anything starts) and, on resume, the fleet entries the sweep excluded before.
    None after saying why (unknown fleet id: exit 2)."""
    import os

    from orchestrator.store import Q, json_value
    from orchestrator.sweep.exclusions import resume_entries, suspect_entries

    entries: list[tuple[str, str]] = []
    if resume is not None:
        (sweep,) = store.rows(Q.SWEEP, sweep_id=resume[0])
        entries += resume_entries(json_value(sweep.get("excluded_nodes")))
    fleet_id = args.exclude_suspects
    if fleet_id is None:
        return entries
    flag = f"--exclude-suspects {fleet_id}"
    if not os.path.exists(args.db):
        err(f"{flag}: {args.db} does not exist; run linksweep fleet --db {args.db} first")
        return None
    if fleet_id == "latest":
        latest = store.rows(Q.LATEST_FLEET)
        fleet_id = latest[0]["fleet_id"] if latest else None
    check = store.rows(Q.FLEET_CHECK, fleet_id=fleet_id) if fleet_id else []
    if not check:
        recent = [
            f"{r['fleet_id']} ({r['status']}, {r['n_suspects']} suspect(s))"
            for r in store.rows(Q.RECENT_FLEETS, limit=5)
        ]
        known = "; ".join(recent) if recent else "none (run linksweep fleet first)"
        err(f"{flag}: no such fleet check in {args.db}; most recent fleet ids: {known}")
        return None
    if check[0]["status"] != "ok":
        print(
            f"linksweep: warning: fleet check {fleet_id} ended {check[0]['status']!r}: its "
            "suspects may be incomplete",
            file=sys.stderr,
        )
    fleet_entries, notes = suspect_entries(
        fleet_id, store.rows(Q.FLEET_SUSPECTS, fleet_id=fleet_id)
    )
    for note in notes:
        print(f"linksweep: {note}", file=sys.stderr)
    return entries + fleet_entries


def _print_summary(store: TableStore, sweep_id: str) -> None:
    from orchestrator.store import Q

    print_variant_tables(store, sweep_id)
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
    from orchestrator.report.accumulation import accumulation_lines

    for line in accumulation_lines(store.rows(Q.ACCUM_CHECKS, sweep_id=sweep_id)):
        print(line, file=sys.stderr)


def print_variant_tables(store: TableStore, sweep_id: str) -> None:
    """The end-of-run tables: variants, slowdowns, the link model's exposures. Each shows every
    axis that varies among its rows and none that does not (:func:`shown_columns`)."""
    from orchestrator.store import Q
    from orchestrator.ui import print_table

    for query, title, if_empty in (
        (Q.VARIANT_SUMMARY_TABLE, f"variant_summary (sweep {sweep_id})", True),
        (Q.SENSITIVITY_TABLE, "link_sensitivity (variant median / baseline median)", False),
        (
            Q.LINK_MODEL_EXPOSURE_TABLE,
            "link model: step = compute_s + exposure x predicted comm (exposure: share of "
            "communication the step does not hide; 95% bootstrap interval)",
            False,
        ),
    ):
        cols, rows = store.table(query, sweep_id=sweep_id)
        if rows or if_empty:
            print_table(*shown_columns(cols, rows), title=title, digits=4)


def shown_columns(cols: list[str], rows: list[tuple]) -> tuple[list[str], list[tuple]]:
    """A variant table's columns (a key column headed by its axis's short name, as the queries
    select it) less the grid axes that take one value over ``rows``, where a value each strategy
    implies (DDP's bucket against ZeRO's) counts as one (``stats.varying``, as labels do). The
    strategy and the link always show: they name the row."""
    from orchestrator.analysis.stats import varying
    from workloads import catalog

    axis_of = {a.short: a.name for a in catalog.grid_axes()}
    named = [
        {
            axis_of.get(c, c): v
            for c, v in zip(cols, r, strict=True)
            if c in axis_of or c == "strategy"
        }
        for r in rows
    ]
    vary = varying(named, [axis_of[c] for c in cols if c in axis_of])
    keep = [i for i, c in enumerate(cols) if c not in axis_of or axis_of[c] in vary]
    return [cols[i] for i in keep], [tuple(r[i] for i in keep) for r in rows]


def _print_headline(store: TableStore, sweep_id: str) -> None:
    """The links as described and measured, then the headline (orchestrator/analysis/headline.py)."""
    from orchestrator.analysis.headline import build_headline
    from orchestrator.analysis.links import link_label
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
