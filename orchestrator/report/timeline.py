"""The report's timeline of traced steps (``trace_timeline.png``): one traced step per variant
and link, a lane per rank, its compute and its communication as the overlap figures count them
(``orchestrator.analysis.trace_overlap.step_intervals``), so a reader sees where each strategy's
communication sits against its compute. Where every rank's trace of the panel is on rank 0's
clock (a row's ``common_clock``: read from its rebased copy, ``orchestrator/analysis/
trace_merge``), the lanes share one time axis, milliseconds from the earliest rank's start of the
step, so a rank that started late sits to the right and its peers' communication waits for it;
otherwise (runs traced before the clocks were measured) each lane starts at its own rank's step
start. Pure: rows (``ReportData.timelines``) in, a Figure out.

May import: draw, matplotlib.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.report.draw import new_figure

COMPUTE, COMM = "#4c72b0", "#dd8452"


def timeline_panels(timelines: list[dict], link_order: Sequence[str]) -> list[tuple[str, list]]:
    """[(panel title, its ranks' rows)], variants in their order of appearance, links in the
    report's order."""
    order = {link: i for i, link in enumerate(link_order)}
    keys: list[tuple[str, str]] = []
    for t in timelines:
        if (t["label"], t["link"]) not in keys:
            keys.append((t["label"], t["link"]))
    labels = list(dict.fromkeys(label for label, _ in keys))
    keys.sort(key=lambda k: (labels.index(k[0]), order.get(k[1], len(order))))
    return [
        (
            f"{label} | {link}",
            sorted(
                (t for t in timelines if (t["label"], t["link"]) == (label, link)),
                key=lambda t: t["rank"],
            ),
        )
        for label, link in keys
    ]


def plot_timeline(timelines: list[dict], link_order: Sequence[str]) -> tuple[Any | None, str]:
    """One row of lanes per (variant, link); None and why when nothing was traced."""
    panels = timeline_panels(timelines, link_order)
    if not panels:
        return None, "No run of this sweep was traced (sweep key trace: {steps: N})."
    fig = new_figure(9.0, 0.9 + 0.55 * sum(len(rows) for _, rows in panels))
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    common = False
    for ax, (title, rows) in zip(axes, panels, strict=True):
        origins = lane_origins(rows)
        common = common or all(t.get("common_clock") for t in rows)
        for lane, (t, t0) in enumerate(zip(rows, origins, strict=True)):
            spans = [((b - t0) / 1e3, (e - b) / 1e3) for b, e in t["compute"]]
            ax.broken_barh(spans, (lane - 0.35, 0.3), color=COMPUTE)
            spans = [((b - t0) / 1e3, (e - b) / 1e3) for b, e in t["comm"]]
            ax.broken_barh(spans, (lane + 0.05, 0.3), color=COMM)
        ax.set_yticks(range(len(rows)), [f"rank {t['rank']}" for t in rows])
        ax.set_ylim(-0.5, len(rows) - 0.5)
        ax.set_title(title, fontsize=9, loc="left")
        ax.set_xlim(
            0, max((t["window"][1] - t0) / 1e3 for t, t0 in zip(rows, origins, strict=True))
        )
    axes[-1].set_xlabel(
        "ms from the traced step's start (one clock: the earliest rank's start)"
        if common
        else "ms from each rank's traced step start"
    )
    fig.legend(
        handles=[_patch(COMPUTE), _patch(COMM)],
        labels=["compute", "communication"],
        loc="outside upper right",
        ncols=2,
    )
    one_clock = (
        " The ranks share one clock (rank 0's; each rank's offset was measured before the traced "
        "steps): a collective ends together on every rank, and orange that starts before a "
        "peer's is a rank waiting for a later one."
        if common
        else ""
    )
    return fig, (
        "Blue: compute, orange: communication, as the overlap figures count them (interval "
        "unions; docs/trace-overlap.md). Where orange sits under no blue, communication is "
        "exposed." + one_clock
    )


def lane_origins(rows: list[dict]) -> list[float]:
    """Where each lane's time axis starts (trace microseconds): the earliest window start of the
    panel where every row is on the common clock (``common_clock``), else each row's own."""
    if rows and all(t.get("common_clock") for t in rows):
        return [min(t["window"][0] for t in rows)] * len(rows)
    return [t["window"][0] for t in rows]


def _patch(colour: str):
    from matplotlib.patches import Patch

    return Patch(color=colour)
