"""``linksweep report``: one sweep's report.html (headline first) and its PNG figures.

May import: shared, orchestrator.cli_help, orchestrator.compare, orchestrator.errors,
orchestrator.report, orchestrator.store.
"""

from __future__ import annotations

import argparse
import os

from orchestrator.cli_help import DB_HELP
from orchestrator.commands.shared import ready_to_read
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_OK, err


def add_parser(sub) -> None:
    rp = sub.add_parser(
        "report",
        help="write a self-contained report.html (headline first) and PNG figures",
        description="One sweep's report: the headline, caveats, links, the classic table, "
        "figures, the views, runs needing attention and provenance, in one offline HTML file.",
        epilog="exit codes: 0 written; 2 no such database or sweep, or --out not writable",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rp.add_argument("--db", default="results.duckdb", help=DB_HELP)
    rp.add_argument(
        "--sweep", default=None, help="sweep id, as `run` printed it (default: the latest sweep)"
    )
    rp.add_argument(
        "--out", default="report", help="output folder, created if missing (default: ./report)"
    )
    rp.add_argument(
        "--baseline",
        default=None,
        metavar="NAME",
        help="add a 'Compared with baseline' section: this sweep against the sweep named NAME "
        "by `linksweep baseline set` in --db (threshold 5%%; see `linksweep compare`; "
        "default: none)",
    )
    rp.set_defaults(func=main)


def baseline_comparison(db: str, name: str, sweep_id: str) -> dict | None:
    """``compare``'s JSON of sweep ``sweep_id`` against the baseline ``name`` of ``db``; None
    after saying why not (no such baseline, unreadable sweep)."""
    from orchestrator.compare import CompareError, SweepFacts, compare_sweeps, comparison_json
    from orchestrator.store import StoreError
    from orchestrator.store.snapshot import baseline, baselines, load_sweep

    try:
        row = baseline(db, name)
        if row is None:
            names = ", ".join(b["name"] for b in baselines(db)) or "none"
            err(f"--baseline {name}: no such baseline in {db}; baselines: {names}")
            return None
        base = SweepFacts(**load_sweep(db, str(row["sweep_id"])))
        cand = SweepFacts(**load_sweep(db, sweep_id))
        return comparison_json(compare_sweeps(base, cand))
    except (StoreError, CompareError) as exc:
        err(f"--baseline {name}: {exc}")
        return None


def main(args: argparse.Namespace) -> int:
    """Exit 0 on success (also for a sweep with nothing to plot: the HTML says what is missing);
    2 when the database or the sweep does not exist or cannot be read, or --out is not writable.
    """
    from orchestrator.report.data import ReportError, load_report_data
    from orchestrator.report.figures import build_figures
    from orchestrator.report.html import render_html
    from orchestrator.store import StoreError

    db, out_dir = args.db, args.out
    if not ready_to_read(db):
        return EXIT_BAD_INPUT
    try:
        data = load_report_data(db, args.sweep)
    except (StoreError, ReportError) as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    extra, baseline_png = [], None
    if args.baseline:
        doc = baseline_comparison(db, args.baseline, data.sweep["sweep_id"])
        if doc is None:
            return EXIT_BAD_INPUT
        from orchestrator.report.baseline_view import baseline_section

        html, baseline_png = baseline_section(args.baseline, doc)
        extra.append(("baseline", f"Compared with baseline {args.baseline}", html))
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        err(f"--out {out_dir}: cannot create the folder ({exc.strerror})")
        return EXIT_BAD_INPUT
    if not os.access(out_dir, os.W_OK):
        err(f"--out {out_dir}: folder is not writable")
        return EXIT_BAD_INPUT

    figures = build_figures(data)
    written = []
    if baseline_png is not None:
        from orchestrator.report.baseline_view import FIGURE

        with open(os.path.join(out_dir, FIGURE), "wb") as fh:
            fh.write(baseline_png)
        written.append(os.path.join(out_dir, FIGURE))
    for f in figures:
        path = os.path.join(out_dir, f.name)
        if f.png is not None:
            with open(path, "wb") as fh:
                fh.write(f.png)
            written.append(path)
        elif os.path.exists(path):
            os.remove(path)  # a stale figure from an earlier report would mix two sweeps
    report = os.path.join(out_dir, "report.html")
    with open(report, "w", encoding="utf-8") as fh:
        fh.write(render_html(data, figures, extra))
    print(f"report of sweep {data.sweep['sweep_id']} ({data.sweep.get('name')}):")
    for path in [report, *written]:
        print(f"  {path}")
    skipped = [f.name for f in figures if f.png is None]
    if skipped:
        print(f"  not drawn (no data; reason in the report): {', '.join(skipped)}")
    return EXIT_OK
