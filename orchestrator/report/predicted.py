"""Measured vs predicted: does the link's bandwidth explain the slowdown? One figure and one
table from ``orchestrator.analysis.headline.extra_vs_predicted`` rows (measured extra step time on each
link over the baseline, next to the extra communication time the link microbenchmark predicts).

Pure apart from matplotlib (imported inside the function).

May import: draw, fmt, markup, matplotlib, orchestrator.analysis.flavours,
orchestrator.analysis.stats.
"""

from __future__ import annotations

from typing import Any

from orchestrator.analysis.flavours import series_name
from orchestrator.analysis.stats import varying
from orchestrator.report.draw import RC, color_map, legend_outside, new_figure
from orchestrator.report.fmt import fmt_seconds
from orchestrator.report.markup import esc, missing

NO_PREDICTION = (
    "No predicted communication time: it needs the link microbenchmark (grid.linkbench: true) "
    "and at least two links."
)


def plot_extra_vs_predicted(rows: list[dict]) -> tuple[Any | None, str]:
    """Measured extra step time (y) vs predicted extra communication time (x), one point per
    variant on a non-baseline link; the diagonal is "the link explains all of it"."""
    pts = [r for r in rows if r.get("predicted_extra_s") is not None]
    if not pts:
        return None, NO_PREDICTION
    import matplotlib

    vary = varying(rows)
    series = sorted({(series_name(r, vary), r["link"]) for r in pts})
    colors = color_map(series)
    with matplotlib.rc_context(RC):
        fig = new_figure(7.0, 4.6)
        ax = fig.add_subplot(1, 1, 1)
        handles = {}
        for r in pts:
            key = (series_name(r, vary), r["link"])
            h = ax.scatter(
                r["predicted_extra_s"], r["measured_extra_s"], color=colors[key], s=44, zorder=3
            )
            handles.setdefault(key, h)
            ax.annotate(
                f"ga {r['grad_accum']}",
                (r["predicted_extra_s"], r["measured_extra_s"]),
                textcoords="offset points",
                xytext=(5, 4),
                fontsize=8.5,
            )
        vals = [r["predicted_extra_s"] for r in pts] + [r["measured_extra_s"] for r in pts]
        lo, hi = min(0.0, *vals), max(vals) * 1.1 or 1.0
        ax.plot([lo, hi], [lo, hi], color="0.35", linestyle="--", linewidth=1.0, zorder=0)
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("predicted extra communication time per step (s)")
        ax.set_ylabel("measured extra step time (s)")
        ax.grid(True, alpha=0.3)
        keys = list(handles)
        legend_outside(fig, [handles[k] for k in keys], [f"{s} on {x}" for s, x in keys])
    note = (
        "Per variant: median step time on the link minus on the baseline link (measured) "
        "against the link's predicted communication time minus the baseline's (each run's "
        "measured collectives priced at the link microbenchmark's bandwidth). On the dashed "
        "diagonal the link's bandwidth explains the whole slowdown; above it something else "
        "(latency, overlap lost, CPU) costs time too; below it, communication overlapped compute."
    )
    return fig, note


def extra_vs_predicted_html(rows: list[dict]) -> str:
    if not rows:
        return missing("No variant ran on both a link and the baseline link.")
    trs = []
    vary = varying(rows)
    for r in rows:
        pred = r.get("predicted_extra_s")
        ratio = r.get("ratio")
        trs.append(
            f"<tr><td>{esc(r['link'])} ÷ {esc(r['baseline_link'])}</td>"
            f"<td>{esc(series_name(r, vary))}</td><td class='num'>{r['grad_accum']}</td>"
            f"<td class='num'>{_signed(r['measured_extra_s'])}</td>"
            f"<td class='num'>{'–' if pred is None else _signed(pred)}</td>"
            f"<td class='num'>{'–' if ratio is None else f'{ratio:.2f}'}</td></tr>"
        )
    head = (
        "<tr><th>link</th><th>strategy</th><th>grad_accum</th><th>measured extra step time</th>"
        "<th>predicted extra comm time</th><th>measured ÷ predicted</th></tr>"
    )
    return (
        f"<div class='scroll'><table><thead>{head}</thead><tbody>{''.join(trs)}</tbody>"
        "</table></div>"
        + (
            ""
            if any(r.get("predicted_extra_s") is not None for r in rows)
            else missing(NO_PREDICTION)
        )
    )


def _signed(seconds: float) -> str:
    return ("+" if seconds >= 0 else "−") + fmt_seconds(abs(seconds))
