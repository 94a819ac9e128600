"""The link model in the report: the figure (step time against predicted communication time,
measured points and fitted lines, the slope is the exposure) and the section (the fits and the
leave-one-link-out table). Rows in (``link_model``, ``link_model_check``, runs), figure or
HTML out; the fit itself is ``orchestrator/analysis/linkmodel.py``'s and is only read here.

May import: draw, fmt, labels, markup, matplotlib, orchestrator.analysis.stats.
"""

from __future__ import annotations

import math
from typing import Any

from orchestrator.analysis.stats import link_measurement
from orchestrator.report.draw import RC, color_map, legend_outside, new_figure
from orchestrator.report.fmt import sig3, tick_seconds
from orchestrator.report.labels import (
    GROUP_KEY,
    group_label,
    order_index,
    variant_sort_key,
    varying,
)
from orchestrator.report.markup import esc, html_table, missing

MAX_PANELS = 16

MODEL_COLS = (
    *GROUP_KEY, "n_links", "n_runs",
    "n_excluded", "exposure", "exposure_ci_low", "exposure_ci_high", "compute_s",
    "compute_ci_low_s", "compute_ci_high_s", "residual_rel", "quality", "note",
)  # fmt: skip
CHECK_COLS = (
    *GROUP_KEY, "link", "n_runs",
    "predicted_comm_s", "measured_step_s", "predicted_step_s", "rel_error", "n_links_fit",
    "predicted_step_ci_low_s", "predicted_step_ci_high_s", "extrapolation", "covered",
)  # fmt: skip


def _gkey(r: dict) -> tuple:
    return tuple(r.get(k) for k in GROUP_KEY)


def _sort(r: dict) -> tuple:
    return variant_sort_key(r, [])


def _exposure_text(m: dict) -> str:
    if m.get("exposure") is None:
        return f"no line ({m.get('quality')})"
    lo, hi = m.get("exposure_ci_low"), m.get("exposure_ci_high")
    ci = f" [{sig3(lo)}–{sig3(hi)}]" if lo is not None and hi is not None else ""
    return f"exposure {sig3(m['exposure'])}{ci}"


def plot_link_model(
    runs: list[dict], link_model: list[dict], link_order: list[str]
) -> tuple[Any | None, str]:
    """One panel per variant group with a line: its runs that measure their link as dots
    (``stats.link_measurement``, the fit's own rule; colour = link) and the fitted line
    ``compute_s + exposure x comm`` from 0 to the slowest link."""
    fits = sorted((m for m in link_model if m.get("exposure") is not None), key=_sort)
    if not fits:
        return None, (
            "No link model: it needs a variant measured on two or more links with the link "
            "microbenchmark on (grid.linkbench: true), and ok, unthrottled runs (see the link "
            "model section for each variant's flag)."
        )
    fits = fits[:MAX_PANELS]
    pts = [
        r for r in runs
        if link_measurement(r)
        and r.get("median_step_time_s") is not None
        and r.get("predicted_comm_s_per_step") is not None
    ]  # fmt: skip
    # Links from the slowest (most predicted communication) to the fastest, as the x axis reads.
    slowest = {}
    for r in pts:
        slowest[r["link"]] = max(slowest.get(r["link"], 0.0), r["predicted_comm_s_per_step"])
    links = sorted(slowest, key=lambda x: (-slowest[x], order_index(x, link_order)))
    colors = color_map(links)
    vary = varying(fits, GROUP_KEY)
    import matplotlib
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    with matplotlib.rc_context(RC):
        cols = min(len(fits), 2 if len(fits) <= 4 else 3)
        rows_n = math.ceil(len(fits) / cols)
        fig = new_figure(1.8 + 3.9 * cols, 0.5 + 3.3 * rows_n)
        grid = fig.subplots(rows_n, cols, squeeze=False)
        axes = [ax for row in grid for ax in row]
        for ax in axes[len(fits) :]:
            ax.remove()
        for ax, m in zip(axes, fits, strict=False):
            group_points = [r for r in pts if _gkey(r) == _gkey(m)]
            for r in group_points:
                ax.plot(r["predicted_comm_s_per_step"], r["median_step_time_s"], "o",
                        color=colors[r["link"]], markersize=5.5, alpha=0.85, zorder=3)  # fmt: skip
            x_hi = max([r["predicted_comm_s_per_step"] for r in group_points] or [1.0]) * 1.08
            ax.plot([0, x_hi], [m["compute_s"], m["compute_s"] + m["exposure"] * x_hi],
                    color="0.2", linewidth=1.6, zorder=2)  # fmt: skip
            ax.set_xlim(0, x_hi)
            ax.set_ylim(bottom=0)
            ax.set_title(f"{group_label(m, vary)}\n{_exposure_text(m)}", fontsize=10.5)
            ax.xaxis.set_major_locator(MaxNLocator(4))
            ax.xaxis.set_major_formatter(FuncFormatter(tick_seconds))
            ax.yaxis.set_major_formatter(FuncFormatter(tick_seconds))
            ax.grid(True, alpha=0.3)
        for i, ax in enumerate(axes[: len(fits)]):
            if i % cols == 0:
                ax.set_ylabel("step time (median of a run)")
            if i >= len(fits) - cols:
                ax.set_xlabel("predicted communication per step")
        handles = [Line2D([], [], color=colors[x], marker="o", linestyle="") for x in links]
        handles.append(Line2D([], [], color="0.2", linewidth=1.6))
        legend_outside(fig, handles, [*links, "fit"], "link")
    more = len([m for m in link_model if m.get("exposure") is not None]) - len(fits)
    note = (
        "Each dot is one ok, unthrottled run that measures its link (no one-GPU rehearsal): "
        "its median step time against its measured "
        "collectives priced at its link's microbenchmark bandwidth. The line is the fit "
        "step = compute_s + exposure x communication (least squares on the links' medians, "
        "exposure >= 0): it meets the y axis at compute_s and its slope is the exposure, the "
        "share of communication the step does not hide; 95% bootstrap interval over runs."
        + (f" {more} more variant(s) in the table below." if more > 0 else "")
    )
    return fig, note


def link_model_html(link_model: list[dict], link_model_check: list[dict]) -> str:
    """The fits (table ``link_model``) and the leave-one-link-out check (``link_model_check``)."""
    if not link_model:
        return missing(
            "No link model rows for this sweep: runs finished before linksweep had the link "
            "model (schema v3), or no run finished. `linksweep project` refits from the runs."
        )
    intro = (
        "<p class='note'>table <code>link_model</code>: per variant (everything but the link), "
        "step time = compute_s + exposure x predicted communication time, fitted over its "
        "links. exposure 1: every byte's time is on the step; 0: all of it hidden behind "
        "compute. quality: ok, runs_excluded (failed or throttled runs left out), poor_fit "
        "(rms residual above 10%), no_communication, under_determined (fewer than 2 links), "
        "no_prediction (no link microbenchmark).</p>"
    )
    check = sorted(link_model_check, key=lambda r: (_sort(r), r.get("predicted_comm_s") or 0))
    tested = [r for r in check if r.get("rel_error") is not None]
    worst = max((abs(r["rel_error"]) for r in tested), default=None)
    far = [r for r in tested if (r.get("extrapolation") or 1.0) > 1.0]
    missed = [r for r in tested if r.get("covered") is False]
    check_intro = (
        "<p class='note'>table <code>link_model_check</code>: each link left out in turn, its "
        "median step time predicted by the line through the other links (needs 3 or more "
        "links); rel_error = (predicted - measured) / measured. The interval joins the "
        "bootstrap with what monotonicity allows; extrapolation above 1: the left-out link "
        "lies that many times outside the others' communication times, where the line is a "
        "guess and the interval is what the model promises (covered)."
        + (f" Largest |rel_error|: {worst:.1%}." if worst is not None else "")
        + (f" {len(far)} prediction(s) extrapolate." if far else "")
        + (
            f" <b>{len(missed)} measured step time(s) outside the interval</b>: the model's "
            "assumptions do not hold there (docs/link-model.md)."
            if missed
            else ""
        )
        + "</p>"
    )
    return (
        intro
        + html_table(sorted(link_model, key=_sort), MODEL_COLS, fold=True)
        + f"<h3>{esc('Leave one link out')}</h3>"
        + check_intro
        + (html_table(check, CHECK_COLS, fold=True) if check else missing("No check rows."))
    )
