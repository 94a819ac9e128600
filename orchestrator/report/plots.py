"""The report's four figures: rows -> ``(Figure, caption)``, or ``(None, reason)`` when there is
nothing to draw. Pure apart from matplotlib (imported inside the functions).

May import: draw, fmt, labels, matplotlib, numpy.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.report.draw import (
    RC,
    boxplot_horizontal,
    color_map,
    dodge,
    legend_outside,
    log2_axis,
    new_figure,
    nice_log_ticks,
    panel_grid,
)
from orchestrator.report.fmt import fmt_msg_size, tick_seconds
from orchestrator.report.labels import (
    OP_ORDER,
    VARIANT_KEY,
    order_index,
    series_in_order,
    series_key,
    strategy_label,
    variant_label,
    variant_sort_key,
    varying,
)


def plot_slowdown(sensitivity: list[dict], link_order: Sequence[str]) -> tuple[Any | None, str]:
    """Slowdown vs grad_accum with its interval: one panel per non-baseline link."""
    rows = [r for r in sensitivity if r.get("slowdown") is not None]
    if not rows:
        return None, (
            "No link slowdowns: they need at least two links, each with ok runs not flagged "
            "throttled of the same variant (every key of the variant but the link)."
        )
    import matplotlib

    links = [x for x in link_order if any(r["link"] == x for r in rows)]
    links += sorted({r["link"] for r in rows} - set(links))
    vary = varying(rows)
    series = series_in_order(rows, vary)
    colors = color_map(series)
    markers = "osD^vP*X"
    with matplotlib.rc_context(RC):
        cols = min(len(links), 3)
        rows_n = math.ceil(len(links) / cols)
        fig = new_figure(2.2 + 3.6 * cols if cols > 1 else 7.0, 0.4 + 3.9 * rows_n)
        axes, cols = panel_grid(fig, len(links))
        handles: dict[tuple, Any] = {}
        for ax, link in zip(axes, links, strict=True):
            link_rows = [r for r in rows if r["link"] == link]
            for j, key in enumerate(series):
                pts = sorted(
                    (r for r in link_rows if series_key(r, vary) == key),
                    key=lambda r: r["grad_accum"],
                )
                if not pts:
                    continue
                xs = [r["grad_accum"] * dodge(j, len(series)) for r in pts]
                ys = [r["slowdown"] for r in pts]
                lo = [
                    max(0.0, y - (r["ci_low"] if r["ci_low"] is not None else y))
                    for y, r in zip(ys, pts, strict=True)
                ]
                hi = [
                    max(0.0, (r["ci_high"] if r["ci_high"] is not None else y) - y)
                    for y, r in zip(ys, pts, strict=True)
                ]
                h = ax.errorbar(
                    xs,
                    ys,
                    yerr=[lo, hi],
                    color=colors[key],
                    marker=markers[j % len(markers)],
                    markersize=6,
                    capsize=4,
                    linewidth=1.8,
                    elinewidth=1.3,
                )
                handles.setdefault(key, h)
            ax.axhline(1.0, color="0.35", linestyle="--", linewidth=1.0, zorder=0)
            log2_axis(ax, [r["grad_accum"] for r in rows])
            base = next(
                (r["baseline_link"] for r in link_rows if r.get("baseline_link")), "baseline"
            )
            ax.set_title(f"link {link} vs {base}")
            ax.set_xlabel("grad_accum")
            ax.grid(True, axis="y", alpha=0.3)
        for i, ax in enumerate(axes):
            if i % cols == 0:
                ax.set_ylabel("slowdown (÷ baseline step time)")
        keys = list(handles)
        legend_outside(fig, [handles[k] for k in keys], [" ".join(k) for k in keys], "strategy")
    note = (
        "Median step time on the link divided by the median on the baseline link, per variant; "
        f"error bars: {' or '.join(sorted({_BARS.get(r.get('interval_kind'), 'interval') for r in rows}))}"
        " (none where a side had a single run). Above the dashed line at 1.0 the link costs time."
    )
    return fig, note


_BARS = {
    "range": "range of the run-pair ratios (fewer than 5 runs a side: spread, not confidence)",
    "bootstrap95": "95% percentile-bootstrap interval over repeats",
}

MAX_VARIANTS_ONE_PANEL = 24
"""Above this many variants the step-time figure gets one panel per strategy, two per row,
so a 60-variant sweep is a figure of readable height instead of one 3000 px column."""


def plot_step_times(step_times: list[dict], link_order: Sequence[str]) -> tuple[Any | None, str]:
    """Box plots of timed step times (max over ranks, warmup excluded), one row per variant."""
    rows = [r for r in step_times if r.get("step_time_s") is not None]
    if not rows:
        return None, (
            "No timed steps: no run of this sweep finished ok and unflagged (see failed and "
            "throttled runs below)."
        )
    import matplotlib
    from matplotlib.patches import Patch

    variants = _step_variants(rows, link_order)
    first = variants.first
    links = [x for x in link_order if any(first[k]["link"] == x for k in variants.keys)]
    links += sorted({first[k]["link"] for k in variants.keys} - set(links))
    colors = color_map(links)
    values = [v for k in variants.keys for v in variants.groups[k]]
    positive = [v for v in values if v > 0]
    log_x = bool(positive) and len(positive) == len(values) and max(values) / min(positive) > 8
    panels, ncols = step_panels(variants.keys, first)
    nrows = math.ceil(len(panels) / ncols)
    row_sizes = [
        max(len(ks) for _, ks in panels[i * ncols : (i + 1) * ncols]) for i in range(nrows)
    ]
    with matplotlib.rc_context(RC):
        fig = new_figure(10.5, max(2.6, 0.34 * sum(row_sizes) + 0.55 * nrows + 0.8))
        grid = fig.subplots(
            nrows,
            ncols,
            sharex=True,
            squeeze=False,
            gridspec_kw={"height_ratios": [n + 1.2 for n in row_sizes]},
        )
        axes = [ax for row in grid for ax in row]
        for ax in axes[len(panels) :]:
            ax.remove()
        log_range = (min(positive) / 1.05, max(values) * 1.05) if log_x else None
        for i, (ax, (facet, ks)) in enumerate(zip(axes, panels, strict=False)):
            _step_panel(ax, facet, ks, row_sizes[i // ncols], variants, colors)
            _step_x_axis(ax, log_range, max_ticks=8 if ncols == 1 else 5)
        xlabel = "time per optimizer step (slowest rank" + (", log scale)" if log_x else ")")
        for ax in axes[: len(panels)][-ncols:]:
            ax.set_xlabel(xlabel)
        legend_outside(fig, [Patch(facecolor=colors[x], alpha=0.6) for x in links], links, "link")
    n_runs = len({r["run_id"] for r in rows})
    note = (
        f"Every timed step of {n_runs} ok run(s) not flagged throttled, pooled per variant: box = "
        "quartiles, line = median, whiskers = 1.5 IQR, dots = outliers. A step's time is its "
        "slowest rank's; warmup steps are excluded."
    )
    return fig, note


@dataclass(frozen=True)
class _StepVariants:
    """Timed step times pooled per variant (by its ``VARIANT_KEY`` values), each variant's first
    row (its columns, for labels and order), and the variants in report order."""

    groups: dict[tuple, list[float]]
    first: dict[tuple, dict]
    keys: list[tuple]
    vary: set[str]  # the variant columns whose values differ (the rest stay out of labels)


def _step_variants(rows: list[dict], link_order: Sequence[str]) -> _StepVariants:
    groups: dict[tuple, list[float]] = defaultdict(list)
    first: dict[tuple, dict] = {}
    for r in rows:
        key = tuple(r.get(k) for k in VARIANT_KEY)
        groups[key].append(r["step_time_s"])
        first.setdefault(key, r)
    keys = sorted(groups, key=lambda k: variant_sort_key(first[k], link_order))
    return _StepVariants(groups, first, keys, varying(rows))


def step_panels(
    keys: list[tuple], first: dict[tuple, dict]
) -> tuple[list[tuple[str | None, list[tuple]]], int]:
    """(panels, columns) of the step-time figure: one untitled panel of every variant, or above
    ``MAX_VARIANTS_ONE_PANEL`` variants one panel per strategy (its title), two per row."""
    if len(keys) <= MAX_VARIANTS_ONE_PANEL:
        return [(None, keys)], 1
    facets = list(dict.fromkeys(strategy_label(first[k]) for k in keys))
    return [(f, [k for k in keys if strategy_label(first[k]) == f]) for f in facets], 2


def _step_panel(
    ax, facet: str | None, ks: list[tuple], row_n: int, variants: _StepVariants, colors: dict
) -> None:
    """One panel's boxes, coloured by link, labelled by variant (less the strategy where the
    panel's title names it), first variant on top, rules between strategies and grad_accums."""
    first = variants.first
    positions = list(range(1, len(ks) + 1))
    bp = boxplot_horizontal(
        ax,
        [variants.groups[k] for k in ks],
        positions,
        widths=0.62,
        patch_artist=True,
        showfliers=True,
        medianprops={"color": "black", "linewidth": 1.4},
        flierprops={"marker": ".", "markersize": 3, "alpha": 0.5},
    )
    for box, k in zip(bp["boxes"], ks, strict=True):
        box.set_facecolor(colors[first[k]["link"]])
        box.set_alpha(0.6)
    labels = [variant_label(first[k], variants.vary) for k in ks]
    ax.set_yticks(positions)
    ax.set_yticklabels([t.split(" ", 1)[1] if facet is not None else t for t in labels])
    ax.set_ylim(row_n + 0.6, 0.4)  # first variant on top; panels in a row align
    if facet is not None:
        ax.set_title(facet)
    # A rule between strategies (and grad_accum groups) guides the eye across rows.
    for i in range(1, len(ks)):
        a, b = first[ks[i - 1]], first[ks[i]]
        if strategy_label(a) != strategy_label(b):
            ax.axhline(i + 0.5, color="0.55", linewidth=0.9)
        elif a["grad_accum"] != b["grad_accum"]:
            ax.axhline(i + 0.5, color="0.85", linewidth=0.6)


def _step_x_axis(ax, log_range: tuple[float, float] | None, max_ticks: int) -> None:
    """Seconds on x, on a log scale with readable ticks over ``log_range`` when one is given."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    if log_range is not None:
        ax.set_xscale("log")
        ticks = nice_log_ticks(*log_range, max_ticks=max_ticks)
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(tick_seconds))
    ax.tick_params(axis="x", labelbottom=True)
    ax.grid(True, axis="x", which="both", alpha=0.3)


# strategy label -> grad_accum -> {"measured": [bytes], "expected": [bytes]}
BytesByStrategy = dict[str, dict[int, dict[str, list[float]]]]


def bytes_by_strategy(runs: list[dict]) -> BytesByStrategy:
    """Measured and analytic bytes per optimizer step of the ok runs by grad_accum and label
    (``fsdp sync=each``: every axis that varies), links pooled; labels in display order."""
    by: BytesByStrategy = defaultdict(lambda: defaultdict(lambda: {"measured": [], "expected": []}))
    vary = varying(runs)  # the link too: series_key leaves it out
    for r in sorted(runs, key=lambda r: variant_sort_key(r, [])):
        if r.get("status") != "ok":
            continue
        for col, kind in (
            ("comm_bytes_per_step", "measured"),
            ("expected_comm_bytes_per_step", "expected"),
        ):
            if r.get(col) is not None:
                by[" ".join(series_key(r, vary))][r["grad_accum"]][kind].append(float(r[col]))
    return by


def plot_bytes_per_step(runs: list[dict]) -> tuple[Any | None, str]:
    """Measured vs analytic collective bytes per optimizer step, per strategy, vs grad_accum."""
    by = bytes_by_strategy(runs)
    if not any(v["measured"] or v["expected"] for s in by.values() for v in s.values()):
        return None, (
            "No communication volume: no ok run recorded measured bytes per step "
            "(runs.comm_bytes_per_step) or an analytic expectation (world_size 1 has none)."
        )
    import matplotlib

    series = list(by)  # in display order
    colors = color_map(series)
    all_y = [
        y for s in by.values() for v in s.values() for y in (v["measured"] + v["expected"]) if y > 0
    ]
    log_y = bool(all_y) and max(all_y) / min(all_y) > 20
    with matplotlib.rc_context(RC):
        fig = new_figure(9.5, 4.2)
        ax = fig.subplots()
        for j, s in enumerate(series):
            _bytes_lines(ax, by[s], colors[s], dodge(j, len(series), 0.05))
        log2_axis(ax, [g for s in by.values() for g in s])
        _bytes_y_axis(ax, (min(all_y) / 1e6 / 1.3, max(all_y) / 1e6 * 1.3) if log_y else None)
        ax.set_xlabel("grad_accum (micro-steps per optimizer step)")
        ax.set_ylabel("MB per optimizer step, per rank" + (" (log scale)" if log_y else ""))
        ax.grid(True, which="major", alpha=0.3)
        _bytes_legend(fig, series, colors)
    note = (
        "Solid, filled: message bytes one rank sent through collectives in one profiled "
        "optimizer step (median over ok runs of all links; 1 MB = 1e6 B). Dashed, hollow: the analytic "
        "expectation from orchestrator/analysis/comm_model.py. DDP and ZeRO-1 should be flat in "
        "grad_accum; ZeRO-2/3 grow with it."
    )
    return fig, note


def _bytes_lines(ax, by_ga: dict[int, dict[str, list[float]]], color, off: float) -> None:
    """One strategy's medians vs grad_accum (x ``off``, dodged): expected first, with big hollow
    markers; measured on top, small and filled: where the two agree the filled dot sits inside
    the hollow square."""
    import numpy as np

    gas = sorted(by_ga)
    for kind, style in (("expected", "--"), ("measured", "-")):
        pts = [(g, float(np.median(by_ga[g][kind]))) for g in gas if by_ga[g][kind]]
        if not pts:
            continue
        measured = kind == "measured"
        ax.plot(
            [g * off for g, _ in pts],
            [y / 1e6 for _, y in pts],
            linestyle=style,
            color=color,
            marker="o" if measured else "s",
            markersize=5.5 if measured else 11,
            markerfacecolor=color if measured else "none",
            markeredgewidth=1.0 if measured else 1.6,
            linewidth=2.0 if measured else 1.5,
            zorder=3 if measured else 2,
        )


def _bytes_y_axis(ax, log_range_mb: tuple[float, float] | None) -> None:
    """MB from 0, or on a log scale with readable ticks over ``log_range_mb`` when one is given."""
    if log_range_mb is None:
        ax.set_ylim(bottom=0)
        return
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(FixedLocator(nice_log_ticks(*log_range_mb, 7)))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.6g}"))
    ax.set_ylim(*log_range_mb)


def _bytes_legend(fig, series: list[str], colors: dict) -> None:
    """A line per strategy, then what solid and dashed mean."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colors[s], linewidth=2.4) for s in series]
    labels = list(series)
    handles += [
        Line2D([], [], color="0.3", linestyle="-", marker="o", markersize=5.5, linewidth=2.0),
        Line2D([], [], color="0.3", linestyle="--", marker="s", markersize=9,
               markerfacecolor="none", markeredgewidth=1.6),
    ]  # fmt: skip
    labels += ["measured (profiled step)", "expected (comm_model)"]
    legend_outside(fig, handles, labels, "strategy")


def plot_busbw(
    bandwidth: list[dict], link_order: Sequence[str], rated: dict[str, float] | None = None
) -> tuple[Any | None, str]:
    """Link microbenchmark: busbw vs message size, log-log, one panel per collective; a link's
    rated rate (``rated``: link -> GB/s, e.g. its tc rate) as a dashed line in its colour."""
    rated = {k: v for k, v in (rated or {}).items() if v}
    rows = [
        r
        for r in bandwidth
        if r.get("busbw_gbps") is not None and r["busbw_gbps"] > 0 and (r.get("msg_bytes") or 0) > 0
    ]
    if not rows:
        return None, (
            "No link microbenchmark results for this sweep (grid.linkbench was off, or every "
            "size failed: see below)."
        )
    import matplotlib

    ops = [o for o in OP_ORDER if any(r["collective"] == o for r in rows)]
    ops += sorted({r["collective"] for r in rows} - set(ops))
    vary = varying(rows, ("placement", "backend", "world_size"))
    by_series: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        by_series[busbw_series_key(r, vary)].append(r)
    series = sorted(by_series, key=lambda k: (order_index(k[0], list(link_order)), k[1:]))
    colors = color_map(series)
    sizes = sorted({r["msg_bytes"] for r in rows})
    with matplotlib.rc_context(RC):
        cols = min(len(ops), 3)
        fig = new_figure(0.9 + 3.5 * cols if cols > 1 else 7.0, 0.9 + 3.6 * math.ceil(len(ops) / 3))
        axes, cols = panel_grid(fig, len(ops))
        handles: dict[tuple, Any] = {}
        for ax, op in zip(axes, ops, strict=True):
            for key in series:
                pts = sorted(
                    (r for r in by_series[key] if r["collective"] == op),
                    key=lambda r: r["msg_bytes"],
                )
                if pts:
                    handles.setdefault(key, _busbw_line(ax, pts, key, colors[key], rated, sizes))
            _busbw_axes(ax, op, sizes)
        for i, ax in enumerate(axes):
            if i % cols == 0:
                ax.set_ylabel("busbw (GB/s)")
        keys = list(handles)
        legend_outside(
            fig, [handles[k] for k in keys], [" ".join(k) for k in keys], "link", below=True
        )
    return fig, _busbw_note(rated)


def busbw_series_key(r: dict, vary: set[str]) -> tuple:
    """A microbenchmark row's series: its link, then placement, backend and world size where
    those vary within the sweep."""
    key = [str(r["link"])]
    if "placement" in vary:
        key.append(str(r["placement"]))
    if "backend" in vary:
        key.append(str(r["backend"]))
    if "world_size" in vary:
        key.append(f"n={r['world_size']}")
    return tuple(key)


def size_ticks(sizes: list[int]) -> list[float]:
    """At most about six powers of two within the message sizes' range, their exponents the
    multiples of an even stride; the smallest size when none fits."""
    k_lo, k_hi = math.floor(math.log2(sizes[0])), math.ceil(math.log2(sizes[-1]))
    stride = max(1, math.ceil((k_hi - k_lo + 1) / 6))
    stride += stride % 2  # even strides keep ticks on 1 KiB, 1 MiB, ... boundaries
    start = k_lo + (-k_lo) % stride
    return [2.0**k for k in range(start, k_hi + 1, stride)] or [float(sizes[0])]


def _busbw_line(
    ax, pts: list[dict], key: tuple, color, rated: dict[str, float], sizes: list[int]
) -> Any:
    """One series' busbw vs size, and its link's rated rate as a dashed line where known."""
    (line,) = ax.plot(
        [r["msg_bytes"] for r in pts],
        [r["busbw_gbps"] for r in pts],
        marker="o",
        markersize=4,
        linewidth=1.8,
        color=color,
    )
    if key[0] in rated:
        ax.axhline(rated[key[0]], color=color, linestyle="--", linewidth=1.2)
        ax.annotate(
            f"{key[0]} rated {rated[key[0]]:.3g} GB/s",
            (sizes[0] / 1.4, rated[key[0]]),
            fontsize=8,
            color=color,
            va="bottom",
        )
    return line


def _busbw_axes(ax, op: str, sizes: list[int]) -> None:
    """Log-log: message sizes on power-of-two ticks, busbw in plain numbers; the op as title."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ticks = size_ticks(sizes)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.set_xticklabels([fmt_msg_size(t) for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(sizes[0] / 1.5, sizes[-1] * 1.5)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.set_title(op)
    ax.set_xlabel("message size")
    ax.grid(True, which="major", alpha=0.3)


def _busbw_note(rated: dict[str, float]) -> str:
    note = (
        "Median over iterations of the slowest rank's time, as bus bandwidth in GB/s "
        "(1 GB = 1e9 B; nccl-tests "
        "doc/PERFORMANCE.md: all_reduce x 2(n-1)/n, all_gather and reduce_scatter x (n-1)/n), "
        "comparable with the link's rated speed. Message size as in nccl-tests: the whole "
        "all_reduce buffer, all_gather's output, reduce_scatter's input."
    )
    if rated:
        note += (
            " Dashed lines: each link's rated rate where known ("
            + ", ".join(f"{k} {v:.3g} GB/s" for k, v in rated.items())
            + "; for the emulated cluster the tc rate recorded at `cluster up`)."
        )
    return note
