"""The report's "where a run's seconds go" section: per phase (``workloads.contract.PHASES``),
the median over runs of the slowest rank's seconds, the sweep's total, its share, and one stacked
bar of the shares. Pure: rows in (``ReportData.phases``), HTML out.

May import: reading, markup, workloads.contract.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from orchestrator.report.markup import esc, html_table, missing
from workloads.contract import PHASES

if TYPE_CHECKING:
    from orchestrator.report.reading import ReportData

# One colour per phase, in PHASES order: set-up phases warm, training cool, teardown grey.
_COLOURS = (
    "#c44e52", "#dd8452", "#e5ae38", "#f28e2b", "#ccb974", "#937860", "#da8bc3", "#9d7660",
    "#8172b3", "#4c72b0", "#64b5cd", "#2a9d8f", "#8c8c8c", "#b0b0b0", "#55a868",
)  # fmt: skip


def phase_table(phases: list[dict]) -> list[dict]:
    """Rows in PHASES order (unknown phases last), each with its share of all phase seconds."""
    total = sum(r["total_s"] or 0.0 for r in phases)
    order = {p: i for i, p in enumerate(PHASES)}
    rows = sorted(phases, key=lambda r: (order.get(r["phase"], len(PHASES)), r["phase"]))
    return [{**r, "share": (r["total_s"] or 0.0) / total if total else None} for r in rows]


def sweep_wall_s(sweep: dict) -> float | None:
    start, end = sweep.get("started_at"), sweep.get("finished_at")
    if isinstance(start, dt.datetime) and isinstance(end, dt.datetime):
        return (end - start).total_seconds()
    return None


def _bar(rows: list[dict]) -> str:
    colour = dict(zip(PHASES, _COLOURS, strict=True))
    parts = "".join(
        f"<span title='{esc(r['phase'])} {100 * r['share']:.1f}%' style='display:inline-block;"
        f"height:1.2em;width:{100 * r['share']:.2f}%;"
        f"background:{colour.get(r['phase'], '#444')}'></span>"
        for r in rows
        if r["share"]
    )
    legend = " ".join(
        f"<span style='color:{colour.get(r['phase'], '#444')}'>■</span> {esc(r['phase'])}"
        for r in rows
    )
    return (
        f"<div style='width:100%;white-space:nowrap;font-size:0;border:1px solid #ccc'>{parts}"
        f"</div><p class='note'>{legend}</p>"
    )


def phases_html(data: ReportData) -> str:
    if not data.phases:
        return missing("No run phases stored (a database from before schema v3, or no runs).")
    rows = phase_table(data.phases)
    timed = next((r["total_s"] for r in rows if r["phase"] == "timed_steps"), None)
    wall = sweep_wall_s(data.sweep)
    eff = (
        f" Timed steps were {100 * timed / wall:.0f}% of the sweep's wall ({wall:.0f} s)."
        if timed and wall
        else ""
    )
    note = (
        "<p class='note'>table <code>run_phases</code>: per run the slowest rank's seconds in "
        "each phase (the driver's own for placement, teardown, commit); median over runs, total "
        f"over the sweep, share of all phase seconds.{esc(eff)}</p>"
    )
    shown = [{**r, "share_pct": None if r["share"] is None else 100 * r["share"]} for r in rows]
    cols = ["phase", "n_runs", "median_s", "total_s", "share_pct"]
    return note + _bar(rows) + html_table(shown, cols)
