"""Matplotlib style and axis helpers shared by the plots.

Figures are drawn on ``matplotlib.figure.Figure`` with the Agg canvas, never pyplot: no global
state, no display. matplotlib is imported inside the functions, so importing the report stays
cheap.

May import: matplotlib.
"""

from __future__ import annotations

import inspect
import io
import math
from collections.abc import Sequence
from typing import Any

DPI = 110
"""PNG resolution: a 10 in figure is 1100 px, sharp in a 1200 px page without being heavy."""

RC = {
    "font.size": 10.5,
    "axes.titlesize": 11.5,
    "axes.labelsize": 10.5,
    "xtick.labelsize": 9.5,
    "ytick.labelsize": 9.5,
    "legend.fontsize": 9.5,
    "legend.title_fontsize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
)


def new_figure(width_in: float, height_in: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width_in, height_in), layout="constrained")


def figure_png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None}, facecolor="white")
    return buf.getvalue()


def log2_axis(ax, values: Sequence[float]) -> None:
    """Log2 x axis ticked at exactly the values measured (grad_accum 1, 4, 16)."""
    from matplotlib.ticker import FixedLocator, NullLocator

    ticks = sorted(set(values))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    lo, hi = min(ticks), max(ticks)
    ax.set_xlim(lo / 2**0.5, hi * 2**0.5)


def dodge(j: int, n: int, step_log2: float = 0.07) -> float:
    """Multiplicative x offset for series j of n, so error bars at one x do not overlap."""
    return 2 ** ((j - (n - 1) / 2) * step_log2)


def color_map(keys: Sequence[Any]) -> dict[Any, str]:
    return {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(keys)}


def legend_outside(fig, handles, labels, title: str | None = None, below: bool = False) -> None:
    """Legends never sit on the data: right of the axes, or below them for wide figures."""
    if not handles:
        return
    if below:
        fig.legend(
            handles,
            labels,
            loc="outside lower center",
            title=title,
            frameon=False,
            ncols=min(len(handles), 6),
        )
    else:
        fig.legend(handles, labels, loc="outside right upper", title=title, frameon=False)


def panel_grid(fig, n: int, max_cols: int = 3):
    """n axes in rows of at most ``max_cols``, sharing y; the unused cells removed."""
    cols = min(n, max_cols)
    rows = math.ceil(n / cols)
    grid = fig.subplots(rows, cols, sharey=True, squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[n:]:
        ax.remove()
    return axes[:n], cols


def nice_log_ticks(lo: float, hi: float, max_ticks: int = 8) -> list[float]:
    """Round log-axis ticks between lo and hi: the densest of 1-1.5-2-3-4-5-6-8, 1-2-5, 1-3
    and decades that stays within ``max_ticks`` (labels like "200 ms" need room)."""
    best: list[float] = []
    for mantissas in ((1, 1.5, 2, 3, 4, 5, 6, 8), (1, 2, 5), (1, 3), (1,)):
        ticks = [
            m * 10.0**e
            for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
            for m in mantissas
            if lo <= m * 10.0**e <= hi
        ]
        if len(ticks) <= max_ticks:
            return ticks or best
        best = ticks
    return best


def boxplot_horizontal(ax, data, positions, **kw):
    # matplotlib 3.10 replaced vert=False with orientation="horizontal"; pyproject allows 3.8.
    if "orientation" in inspect.signature(ax.boxplot).parameters:
        return ax.boxplot(data, positions=positions, orientation="horizontal", **kw)
    return ax.boxplot(data, positions=positions, vert=False, **kw)
