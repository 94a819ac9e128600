"""``linksweep compare``: did the candidate sweep get slower than the baseline, beyond the noise?

A side is a sweep id (in ``--db``), a database file (its newest sweep with runs), ``PATH:SWEEP_ID``,
or, for the baseline, a named baseline (``--baseline NAME``, looked up in ``--db``). Every file is
brought up to date (``shared.ready_to_read``: the one write a reader makes) and then read
read-only (``orchestrator.store.snapshot``). The comparison is ``orchestrator.compare.comparison`` (pure);
the text ``orchestrator.compare.table``.

Exit 0: no regression beyond the threshold; 1: a regression; 2: bad input (unknown sweep or
baseline, bad threshold or link map, unreadable file, a workload mismatch without ``--force``).

May import: shared, orchestrator.cli_help, orchestrator.compare.comparison, orchestrator.compare.table,
orchestrator.errors, orchestrator.store.
"""

from __future__ import annotations

import argparse
import json
import os

from orchestrator.cli_help import COMPARE_EPILOG, DB_HELP
from orchestrator.commands.shared import ready_to_read
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, err

FORMATS = ("table", "markdown", "json")


def add_parser(sub) -> None:
    cp = sub.add_parser(
        "compare",
        usage="linksweep compare BASELINE CANDIDATE [options]\n"
        "       linksweep compare --baseline NAME CANDIDATE [options]",
        help="compare two sweeps (or a named baseline and a sweep); exit 1 on a regression",
        description="Compare a candidate sweep with a baseline: variants matched on the variant "
        "key, median step time, slowdowns, tokens/s, MFU and link busbw, each with a ratio, its "
        "interval and a verdict (slower / faster / no change / not comparable). What differs in "
        "the environment (versions, GPUs, topology, links) is printed first.",
        epilog=COMPARE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cp.add_argument(
        "sides",
        nargs="+",
        metavar="SIDE",
        help="BASELINE CANDIDATE: each a sweep id (in --db), a database file (its newest sweep "
        "with runs) or PATH:SWEEP_ID; with --baseline NAME only the CANDIDATE",
    )
    cp.add_argument(
        "--baseline",
        dest="baseline_name",
        metavar="NAME",
        default=None,
        help="the baseline is the sweep named NAME by `linksweep baseline set` in --db "
        "(default: none: the first side is the baseline)",
    )
    cp.add_argument("--db", default="results.duckdb", help=DB_HELP)
    cp.add_argument(
        "--threshold",
        default="5%",
        help="smallest change that counts, as 5%% or 0.05 (default: 5%%)",
    )
    cp.add_argument(
        "--link-map",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="the baseline's link OLD is the candidate's link NEW; repeat for several (default: "
        "none; links match by name)",
    )
    cp.add_argument("--format", choices=FORMATS, default="table", help="(default: table)")
    cp.add_argument(
        "--force",
        action="store_true",
        help="compare even when the workload differs (model, precision, seq_len, "
        "micro_batch_size, world_size) (default: off: exit 2 naming the fields)",
    )
    cp.set_defaults(func=main)


def parse_side(text: str, db: str) -> tuple[str, str | None]:
    """``(database path, sweep id or None for its newest)`` of a side as typed. ValueError
    naming the side when it names a file that does not exist."""
    if os.path.isfile(text):
        return text, None
    path, sep, sweep_id = text.rpartition(":")
    if sep and path and os.path.isfile(path):
        return path, sweep_id or None
    if text.endswith((".duckdb", ".db")) or os.sep in text:
        shown = path if sep and path.endswith((".duckdb", ".db")) else text
        raise ValueError(f"{shown}: no such database file")
    return db, text


def _resolve(args) -> tuple[tuple[str, str | None], tuple[str, str | None]] | None:
    """Both sides as (path, sweep id); None after saying why not."""
    from orchestrator.store import StoreError
    from orchestrator.store.snapshot import baseline, baselines

    sides = list(args.sides)
    want = 1 if args.baseline_name else 2
    if len(sides) != want:
        usage = "--baseline NAME CANDIDATE" if args.baseline_name else "BASELINE CANDIDATE"
        err(f"compare takes {usage}: got {len(sides)} side(s): {' '.join(sides)}")
        return None
    try:
        if args.baseline_name:
            if not ready_to_read(args.db):
                return None
            row = baseline(args.db, args.baseline_name)
            if row is None:
                names = ", ".join(b["name"] for b in baselines(args.db)) or "none"
                err(
                    f"--baseline {args.baseline_name}: no such baseline in {args.db}; "
                    f"baselines: {names} (set one with linksweep baseline set NAME)"
                )
                return None
            base = (args.db, str(row["sweep_id"]))
        else:
            base = parse_side(sides.pop(0), args.db)
        cand = parse_side(sides[0], args.db)
    except (ValueError, StoreError) as exc:
        err(str(exc))
        return None
    return base, cand


def main(args: argparse.Namespace) -> int:
    from orchestrator.compare.comparison import (
        CompareError,
        SweepFacts,
        compare_sweeps,
        parse_link_map,
        parse_threshold,
    )

    if args.format not in FORMATS:
        err(f"--format {args.format!r} is not allowed; use one of {', '.join(FORMATS)}")
        return EXIT_BAD_INPUT
    try:
        threshold = parse_threshold(args.threshold)
        link_map = parse_link_map(args.link_map)
    except CompareError as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    sides = _resolve(args)
    if sides is None:
        return EXIT_BAD_INPUT
    from orchestrator.store import StoreError
    from orchestrator.store.snapshot import load_sweep

    facts = []
    for label, (path, sweep_id) in zip(("baseline", "candidate"), sides, strict=True):
        if not ready_to_read(path):
            return EXIT_BAD_INPUT
        try:
            facts.append(SweepFacts(**load_sweep(path, sweep_id)))
        except StoreError as exc:
            err(f"{label}: {exc}")
            return EXIT_BAD_INPUT
    try:
        result = compare_sweeps(facts[0], facts[1], threshold, link_map)
    except CompareError as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    if result.workload and not args.force:
        return _refuse(result, args.format)
    _print(result, args.format)
    return EXIT_FAILED if result.regressions else EXIT_OK


def _refuse(result, fmt: str) -> int:
    """A workload mismatch: what differs, then exit 2 naming the fields."""
    from orchestrator.compare.table import render_fingerprint

    if fmt == "json":
        out = {"fingerprint": result.fingerprint, "workload_mismatch": result.workload}
        print(json.dumps(out, indent=1, default=str))
    else:
        print(render_fingerprint(result))
    fields = "; ".join(f"{w['field']} {w['baseline']} vs {w['candidate']}" for w in result.workload)
    err(
        f"the workloads differ ({fields}): step times of different workloads are not comparable; "
        "refusing to gate (pass --force to compare anyway)"
    )
    return EXIT_BAD_INPUT


def _print(result, fmt: str) -> None:
    from orchestrator.compare.comparison import comparison_json
    from orchestrator.compare.table import render_markdown, render_table

    if fmt == "json":
        print(json.dumps(comparison_json(result), indent=1, default=str))
    elif fmt == "markdown":
        print(render_markdown(result))
    else:
        print(render_table(result))
