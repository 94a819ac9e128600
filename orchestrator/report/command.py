"""``linksweep report`` and ``linksweep export``: arguments -> files, messages and exit codes.

May import every module of this package, ``orchestrator.store`` and ``orchestrator.errors``.
"""

from __future__ import annotations

import os

from orchestrator.errors import EXIT_BAD_INPUT, EXIT_OK, err
from orchestrator.report.data import ReportError, load_report_data
from orchestrator.report.figures import build_figures
from orchestrator.report.html import render_html
from orchestrator.store import Reader, StoreError, bring_up_to_date, export_all

EXPORT_FORMATS = ("parquet", "csv")


def report_command(db: str, sweep_id: str | None, out_dir: str) -> int:
    """``linksweep report``: write report.html and the figures into ``out_dir``.

    Exit 0 on success (also for a sweep with nothing to plot: the HTML says what is missing);
    2 when the database or the sweep does not exist or cannot be read, or out_dir is not writable.
    """
    if not os.path.exists(db):
        err(f"--db {db} does not exist; run a sweep first (linksweep run SWEEP.yaml --db {db})")
        return EXIT_BAD_INPUT
    try:
        bring_up_to_date(db)
        data = load_report_data(db, sweep_id)
    except (StoreError, ReportError) as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
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
        fh.write(render_html(data, figures))
    print(f"report of sweep {data.sweep['sweep_id']} ({data.sweep.get('name')}):")
    for path in [report, *written]:
        print(f"  {path}")
    skipped = [f.name for f in figures if f.png is None]
    if skipped:
        print(f"  not drawn (no data; reason in the report): {', '.join(skipped)}")
    return EXIT_OK


def export_command(db: str, fmt: str, out_dir: str) -> int:
    """``linksweep export --format parquet|csv OUTDIR``: every table and view, one file each."""
    if fmt not in EXPORT_FORMATS:
        err(f"--format {fmt!r} is not supported; allowed: {', '.join(EXPORT_FORMATS)}")
        return EXIT_BAD_INPUT
    if not os.path.exists(db):
        err(f"--db {db} does not exist; run a sweep first (linksweep run SWEEP.yaml --db {db})")
        return EXIT_BAD_INPUT
    try:
        bring_up_to_date(db)
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
        written = export_all(db, out_dir, fmt)
    except StoreError as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    print(f"exported {len(written)} tables and views from {db} as {fmt}:")
    for path in written:
        print(f"  {path}")
    return EXIT_OK
