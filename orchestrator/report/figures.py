"""Every figure of the report, drawn: ``build_figures(data)`` -> ``FigureResult`` (PNG bytes, or
the reason the figure is not drawn). One figure that fails to draw becomes a note, never an
exception: the rest of the report is still written.

May import: predicted, reading, draw, findings, linkmodel_view, plots, timeline, orchestrator.errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.errors import err
from orchestrator.report.draw import figure_png
from orchestrator.report.findings import extra_rows
from orchestrator.report.linkmodel_view import plot_link_model
from orchestrator.report.plots import (
    plot_busbw,
    plot_bytes_per_step,
    plot_slowdown,
    plot_step_times,
)
from orchestrator.report.predicted import plot_extra_vs_predicted
from orchestrator.report.timeline import plot_timeline

if TYPE_CHECKING:
    from orchestrator.report.reading import ReportData

FIGURES = (
    "slowdown_vs_grad_accum.png",
    "step_time_distributions.png",
    "bytes_per_step.png",
    "busbw_vs_msg_size.png",
    "extra_vs_predicted.png",
    "step_time_vs_comm.png",
    "trace_timeline.png",
)


@dataclass(frozen=True)
class FigureResult:
    name: str
    title: str
    png: bytes | None
    note: str


def _rated(data: ReportData) -> dict[str, float]:
    return {o["link"]: o["rated_gbps"] for o in data.link_overview if o.get("rated_gbps")}


def build_figures(data: ReportData) -> list[FigureResult]:
    """Draw every figure; a figure that cannot be drawn becomes a note, never an exception."""
    plan = [
        (FIGURES[0], "Link slowdown vs gradient accumulation",
         lambda: plot_slowdown(data.sensitivity, data.link_order)),
        (FIGURES[1], "Step time distributions",
         lambda: plot_step_times(data.step_times, data.link_order)),
        (FIGURES[2], "Communication bytes per optimizer step",
         lambda: plot_bytes_per_step(data.runs)),
        (FIGURES[3], "Link microbenchmark: bus bandwidth vs message size",
         lambda: plot_busbw(data.bandwidth, data.link_order, _rated(data))),
        (FIGURES[4], "Measured extra step time vs predicted communication time",
         lambda: plot_extra_vs_predicted(extra_rows(data))),
        (FIGURES[5], "Link model: step time vs predicted communication time",
         lambda: plot_link_model(data.runs, data.link_model, data.link_order)),
        (FIGURES[6], "Traced steps: compute and communication per rank",
         lambda: plot_timeline(data.timelines, data.link_order)),
    ]  # fmt: skip
    out = []
    for name, title, draw in plan:
        try:
            fig, note = draw()
            png = figure_png(fig) if fig is not None else None
        except Exception as exc:  # noqa: BLE001 - one bad figure must not lose the report
            err(f"report: {name} could not be drawn: {type(exc).__name__}: {exc}")
            png, note = None, f"This figure could not be drawn: {type(exc).__name__}: {exc}"
        out.append(FigureResult(name, title, png, note))
    return out
