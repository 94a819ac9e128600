"""The report's timeline of traced steps (``trace_timeline.png``): one traced step per variant
and link, a lane per rank, its compute and its communication as the overlap figures count them
(``orchestrator.analysis.trace_overlap.step_intervals``), in milliseconds from the step's start,
so a reader sees where each strategy's communication sits against its compute. Pure: rows
(``ReportData.timelines``) in, a Figure out.

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
    for ax, (title, rows) in zip(axes, panels, strict=True):
        for lane, t in enumerate(rows):
            t0 = t["window"][0]
            spans = [((b - t0) / 1e3, (e - b) / 1e3) for b, e in t["compute"]]
            ax.broken_barh(spans, (lane - 0.35, 0.3), color=COMPUTE)
            spans = [((b - t0) / 1e3, (e - b) / 1e3) for b, e in t["comm"]]
            ax.broken_barh(spans, (lane + 0.05, 0.3), color=COMM)
        ax.set_yticks(range(len(rows)), [f"rank {t['rank']}" for t in rows])
        ax.set_ylim(-0.5, len(rows) - 0.5)
        ax.set_title(title, fontsize=9, loc="left")
        ax.set_xlim(0, max((t["window"][1] - t["window"][0]) / 1e3 for t in rows))
    axes[-1].set_xlabel("ms from the traced step's start")
    fig.legend(
        handles=[_patch(COMPUTE), _patch(COMM)],
        labels=["compute", "communication"],
        loc="outside upper right",
        ncols=2,
    )
    return fig, (
        "Blue: compute, orange: communication, as the overlap figures count them (interval "
        "unions; docs/trace-overlap.md). Where orange sits under no blue, communication is exposed."
    )


def _patch(colour: str):
    from matplotlib.patches import Patch

    return Patch(color=colour)
