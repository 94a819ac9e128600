"""``linksweep report``: one sweep's report.html (headline first) and its PNG figures; with
``--fleet [FLEET_ID]``, one fleet check's fleet.html and its heatmaps instead
(``orchestrator/report/fleet_view.py``).

May import: shared, orchestrator.cli_help, orchestrator.compare.comparison, orchestrator.errors,
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
        epilog="exit codes: 0 written; 2 no such database, sweep or fleet check, or --out not "
        "writable",
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
    rp.add_argument(
        "--fleet",
        nargs="?",
        const="latest",
        default=None,
        metavar="FLEET_ID",
        help="report a fleet check (`linksweep fleet`) instead of a sweep: fleet.html and "
        "fleet_heatmap_<link>.png in --out (FLEET_ID default: the latest check)",
    )
    rp.set_defaults(func=main)


FLEET_PAGE = "fleet.html"


def load_fleet(db: str, fleet_id: str) -> dict[str, list[dict] | dict]:
    """One fleet check's rows, as ``fleet_text`` and ``fleet_view`` take them (keyword
    arguments check, nodes, pairs, rounds, suspects; ``store.snapshot.load_fleet``).
    ``fleet_id`` 'latest': the latest check. Raises StoreError (unreadable database) or
    ReportError naming --fleet (no such check)."""
    from orchestrator.report.reading import ReportError
    from orchestrator.store.snapshot import NoSuchFleet
    from orchestrator.store.snapshot import load_fleet as read_fleet

    try:
        return read_fleet(db, fleet_id)
    except NoSuchFleet as exc:
        if fleet_id == "latest":
            raise ReportError(
                f"--fleet: {db} holds no fleet check yet; run one first (linksweep fleet --db {db})"
            ) from None
        raise ReportError(f"--fleet {fleet_id}: {exc}") from None


def _writable(out_dir: str) -> bool:
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        err(f"--out {out_dir}: cannot create the folder ({exc.strerror})")
        return False
    if not os.access(out_dir, os.W_OK):
        err(f"--out {out_dir}: folder is not writable")
        return False
    return True


def fleet_main(args: argparse.Namespace) -> int:
    """``report --fleet``: exit 0 written; 2 no such database or check, or --out not writable."""
    import glob

    from orchestrator.report.fleet_view import render_fleet_html
    from orchestrator.report.reading import ReportError
    from orchestrator.store import StoreError

    db, out_dir = args.db, args.out
    if args.sweep or args.baseline:
        err("--fleet reports a fleet check, not a sweep: leave out --sweep and --baseline")
        return EXIT_BAD_INPUT
    if not ready_to_read(db):
        return EXIT_BAD_INPUT
    try:
        rows = load_fleet(db, args.fleet)
    except (StoreError, ReportError) as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    if not _writable(out_dir):
        return EXIT_BAD_INPUT
    page, pngs = render_fleet_html(**rows)
    for stale in glob.glob(os.path.join(glob.escape(out_dir), "fleet_heatmap_*.png")):
        if os.path.basename(stale) not in pngs:
            os.remove(stale)  # an earlier check's link: never mix two checks in one folder
    written = [os.path.join(out_dir, FLEET_PAGE)]
    with open(written[0], "w", encoding="utf-8") as fh:
        fh.write(page)
    for name, png in pngs.items():
        written.append(os.path.join(out_dir, name))
        with open(written[-1], "wb") as fh:
            fh.write(png)
    check = rows["check"]
    print(f"report of fleet check {check['fleet_id']} ({len(rows['suspects'])} suspect(s)):")
    for path in written:
        print(f"  {path}")
    return EXIT_OK


def baseline_comparison(db: str, name: str, sweep_id: str) -> dict | None:
    """``compare``'s JSON of sweep ``sweep_id`` against the baseline ``name`` of ``db``; None
    after saying why not (no such baseline, unreadable sweep)."""
    from orchestrator.compare.comparison import (
        CompareError,
        SweepFacts,
        compare_sweeps,
        comparison_json,
    )
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
    With ``--fleet``: ``fleet_main``.
    """
    if args.fleet is not None:
        return fleet_main(args)
    from orchestrator.report.figures import build_figures
    from orchestrator.report.html import render_html
    from orchestrator.report.reading import ReportError, load_report_data
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
    if not _writable(out_dir):
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
