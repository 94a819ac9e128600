"""``linksweep report`` and ``linksweep export``: what a sweep found, readable offline.

``report_command(db, sweep_id, out_dir)`` writes into ``out_dir``:

- ``report.html``: self-contained. Inline CSS, figures embedded as base64 PNG data URIs, no
  scripts, no fonts, no links to anything outside the file, so it opens on an air-gapped machine
  and can be attached to an issue as one file.
- the figures as separate PNGs (``FIGURES``), for slides and issues:
  ``slowdown_vs_grad_accum.png`` (link slowdown with its bootstrap interval, per strategy),
  ``step_time_distributions.png`` (timed step times per variant),
  ``bytes_per_step.png`` (measured vs analytic collective bytes per optimizer step),
  ``busbw_vs_msg_size.png`` (link microbenchmark, nccl-tests bus bandwidth).

A figure that has no data to draw (a sweep whose runs all failed, one link only so no slowdown,
no link microbenchmark) is not written, and the HTML says what is missing and why; a PNG left in
``out_dir`` by an earlier report is removed so the folder never mixes two sweeps.

Layers: ``load_report_data`` is the only I/O (SQL through ``orchestrator.store.read_query``,
read-only; ``store.py`` is the only duckdb importer). ``plot_*`` turn rows into a matplotlib
``Figure`` or a reason; ``render_html`` turns rows and PNG bytes into a string. Figures are drawn
on ``matplotlib.figure.Figure`` with the Agg canvas, never pyplot: no global state, no display.

Units follow the schema's names: ``_s`` seconds, ``_bytes`` bytes, ``_gbps`` GB/s with
1 GB = 1e9 B. Message sizes in the microbenchmark are powers of two and are labelled in KiB/MiB.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import inspect
import io
import json
import math
import os
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.store import StoreError, read_query

EXIT_OK, EXIT_BAD_INPUT = 0, 2

FIGURES = (
    "slowdown_vs_grad_accum.png",
    "step_time_distributions.png",
    "bytes_per_step.png",
    "busbw_vs_msg_size.png",
)

VARIANT_KEYS = ("strategy", "offload", "grad_accum", "bucket_mb", "link", "placement")
STRATEGY_ORDER = ("ddp", "zero1", "zero2", "zero3")
OFFLOAD_ORDER = ("none", "cpu", "nvme")
OP_ORDER = ("all_reduce", "all_gather", "reduce_scatter")
EXPORT_FORMATS = ("parquet", "csv")

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


class ReportError(RuntimeError):
    """The report cannot be made as asked (no such sweep, empty database)."""


def _err(msg: str) -> None:
    print(f"linksweep: {msg}", file=sys.stderr)


# --------------------------------------------------------------------------------------------
# Reading: the only I/O besides writing the output files.


@dataclass(frozen=True)
class ReportData:
    """Everything the report shows about one sweep, as plain rows (dicts keyed by column)."""

    sweep: dict
    spec: dict
    versions: dict
    baseline_link: str | None
    link_order: list[str]
    runs: list[dict]
    variants: list[dict]
    sensitivity: list[dict]
    step_times: list[dict]
    bandwidth: list[dict]
    bench_failures: list[dict]
    nodes: list[dict]
    gpus: list[dict]
    gpu_links: list[dict]


def _sql_str(value: str) -> str:
    """A SQL string literal (read_query takes no parameters)."""
    return "'" + str(value).replace("'", "''") + "'"


def _rows(db: str, sql: str) -> list[dict]:
    cols, rows = read_query(db, sql)
    return [dict(zip(cols, r, strict=True)) for r in rows]


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def pick_sweep(db: str, sweep_id: str | None) -> dict:
    """The sweeps row asked for, or the latest by started_at. ReportError if there is none."""
    if sweep_id is not None:
        rows = _rows(db, f"SELECT * FROM sweeps WHERE sweep_id = {_sql_str(sweep_id)}")
        if rows:
            return rows[0]
        known = _rows(
            db, "SELECT sweep_id FROM sweeps ORDER BY started_at DESC NULLS LAST LIMIT 10"
        )
        listed = ", ".join(r["sweep_id"] for r in known) or "none"
        raise ReportError(f"--sweep {sweep_id}: no such sweep in {db}; latest sweeps: {listed}")
    rows = _rows(db, "SELECT * FROM sweeps ORDER BY started_at DESC NULLS LAST LIMIT 1")
    if not rows:
        raise ReportError(f"{db} holds no sweeps yet; run one first (linksweep run SWEEP.yaml)")
    return rows[0]


def load_report_data(db: str, sweep_id: str | None) -> ReportData:
    """Read one sweep's rows. Raises StoreError (unreadable db) or ReportError (no sweep)."""
    sweep = pick_sweep(db, sweep_id)
    sid = _sql_str(sweep["sweep_id"])
    spec = _json(sweep.get("spec")) or {}
    spec = spec if isinstance(spec, dict) else {}
    versions = _json(sweep.get("versions")) or {}
    versions = versions if isinstance(versions, dict) else {"versions": versions}

    runs = _rows(
        db,
        f"""SELECT r.*, rs.n_steps, rs.median_step_time_s, rs.samples_per_s, rs.tokens_per_s
            FROM runs r LEFT JOIN run_summary rs ON rs.run_id = r.run_id
            WHERE r.sweep_id = {sid} ORDER BY r.seq""",
    )
    variants = _rows(db, f"SELECT * FROM variant_summary WHERE sweep_id = {sid}")
    sensitivity = _rows(db, f"SELECT * FROM link_sensitivity WHERE sweep_id = {sid}")
    # Same exclusions as the summaries: failed and throttled runs are not in the figures.
    step_times = _rows(
        db,
        f"""SELECT r.strategy, r.offload, r.grad_accum, r.bucket_mb, r.link, r.placement,
                   r.run_id, st.step, st.step_time_s
            FROM step_times st JOIN runs r ON r.run_id = st.run_id
            WHERE r.sweep_id = {sid} AND r.status = 'ok' AND NOT coalesce(r.throttled, false)""",
    )
    bandwidth = _rows(db, f"SELECT * FROM link_bandwidth WHERE sweep_id = {sid}")
    bench_failures = _rows(
        db,
        f"""SELECT link, placement, op, status, count(*) AS n_rows, min(error) AS error
            FROM link_bench WHERE sweep_id = {sid} AND status <> 'ok'
            GROUP BY ALL ORDER BY link, placement, op""",
    )
    nodes = _rows(db, f"SELECT * FROM nodes WHERE sweep_id = {sid} ORDER BY node")
    gpus = _rows(db, f"SELECT * FROM gpus WHERE sweep_id = {sid} ORDER BY node, gpu_index")
    gpu_links = _rows(db, f"SELECT * FROM gpu_links WHERE sweep_id = {sid} ORDER BY node")

    links_in_spec = list((spec.get("links") or {}).keys())
    baseline = next((r["baseline_link"] for r in sensitivity if r.get("baseline_link")), None)
    baseline = (
        baseline or spec.get("baseline_link") or (links_in_spec[0] if links_in_spec else None)
    )
    seen = {r["link"] for r in runs} | {r["link"] for r in bandwidth}
    order = [x for x in links_in_spec if x in seen or x == baseline]
    order += sorted(x for x in seen if x not in order and x is not None)
    if baseline in order:
        order.remove(baseline)
        order.insert(0, baseline)
    return ReportData(
        sweep=sweep,
        spec=spec,
        versions=versions,
        baseline_link=baseline,
        link_order=order,
        runs=runs,
        variants=variants,
        sensitivity=sensitivity,
        step_times=step_times,
        bandwidth=bandwidth,
        bench_failures=bench_failures,
        nodes=nodes,
        gpus=gpus,
        gpu_links=gpu_links,
    )


# --------------------------------------------------------------------------------------------
# Labels and ordering, shared by figures and tables.


def _order_index(value: Any, order: Sequence[Any]) -> tuple:
    return (order.index(value), "") if value in order else (len(order), str(value))


def strategy_label(row: dict) -> str:
    """``zero3+cpu`` for ZeRO-3 with CPU offload; ``ddp`` for DDP."""
    off = row.get("offload")
    return row["strategy"] if off in (None, "none") else f"{row['strategy']}+{off}"


def varying(rows: Iterable[dict], keys: Sequence[str] = VARIANT_KEYS) -> set[str]:
    """The keys that take more than one value over ``rows`` (the rest need no label)."""
    rows = list(rows)
    return {k for k in keys if len({r.get(k) for r in rows}) > 1}


def variant_sort_key(row: dict, link_order: Sequence[str]) -> tuple:
    return (
        _order_index(row.get("strategy"), STRATEGY_ORDER),
        _order_index(row.get("offload"), OFFLOAD_ORDER),
        row.get("bucket_mb") or 0,
        _order_index(row.get("placement"), ("pack", "spread")),
        row.get("grad_accum") or 0,
        _order_index(row.get("link"), link_order),
    )


def variant_label(row: dict, vary: set[str]) -> str:
    """A short variant name: strategy, grad_accum and link always; the rest when they vary."""
    parts = [strategy_label(row), f"ga={row['grad_accum']}"]
    if "bucket_mb" in vary:
        parts.append(f"bucket={row['bucket_mb']}MB")
    if "placement" in vary:
        parts.append(str(row["placement"]))
    parts.append(str(row["link"]))
    return " ".join(parts)


def _series_key(row: dict, vary: set[str]) -> tuple:
    key = [strategy_label(row)]
    if "placement" in vary:
        key.append(str(row["placement"]))
    if "bucket_mb" in vary:
        key.append(f"bucket={row['bucket_mb']}MB")
    return tuple(key)


def _series_sort(key: tuple) -> tuple:
    strategy, _, offload = key[0].partition("+")
    return (
        _order_index(strategy, STRATEGY_ORDER),
        _order_index(offload or "none", OFFLOAD_ORDER),
        key[1:],
    )


# --------------------------------------------------------------------------------------------
# Number formatting (one place, so figures, tables and text agree).


def sig3(x: float) -> str:
    """Three significant digits, trailing zeros kept so a column reads evenly (1.50, 1.02)."""
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:#.3g}".rstrip(".")


def _scale_seconds(v: float) -> tuple[float, str]:
    if abs(v) < 1e-3:
        return 1e6, "µs"
    if abs(v) < 1:
        return 1e3, "ms"
    return 1.0, "s"


def fmt_seconds(v: float | None) -> str:
    """``90.8 ms``, ``1.50 s``: seconds in the unit that keeps three digits readable."""
    if v is None or not math.isfinite(v):
        return "–"
    if v == 0:
        return "0"
    scale, unit = _scale_seconds(v)
    return f"{sig3(v * scale)} {unit}"


def _tick_seconds(v: float, _pos: Any = None) -> str:
    """Axis ticks: like fmt_seconds but without padding zeros (``2 s``, not ``2.00 s``)."""
    if v <= 0:
        return "0"
    scale, unit = _scale_seconds(v)
    return f"{v * scale:.3g} {unit}"


def fmt_time_ci(med: float | None, lo: float | None, hi: float | None) -> str:
    """``101 ms [99.8–103]``: the interval in the median's unit."""
    if med is None:
        return "–"
    scale, unit = _scale_seconds(med)
    if lo is None or hi is None:
        return f"{sig3(med * scale)} {unit}"
    return f"{sig3(med * scale)} {unit} [{sig3(lo * scale)}–{sig3(hi * scale)}]"


def fmt_bytes(v: float | None) -> str:
    """Base-10 units (1 MB = 1e6 B), as everywhere in linksweep."""
    if v is None:
        return "–"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(v) >= scale:
            return f"{sig3(v / scale)} {unit}"
    return f"{v:.0f} B"


def fmt_msg_size(v: float) -> str:
    """Power-of-two message sizes: 1 KiB, 4 MiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if v >= scale:
            return f"{v / scale:g} {unit}"
    return f"{v:g} B"


def fmt_value(col: str, v: Any) -> str:
    """A cell, formatted by its column's unit suffix."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    if isinstance(v, (int, float)) and ("bytes" in col):
        return fmt_bytes(float(v))
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if (col.endswith("_s") and not col.endswith("_per_s")) or col.endswith("_s_per_step"):
            return fmt_seconds(v)
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10000 else str(v)
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True, default=str)
    return str(v)


def first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0].strip() if lines else ""


# --------------------------------------------------------------------------------------------
# Figures: rows -> (Figure, caption) or (None, reason). Pure apart from matplotlib.


@dataclass(frozen=True)
class FigureResult:
    name: str
    title: str
    png: bytes | None
    note: str


def _figure(width_in: float, height_in: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width_in, height_in), layout="constrained")


def figure_png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None}, facecolor="white")
    return buf.getvalue()


def _log2_axis(ax, values: Sequence[float]) -> None:
    """Log2 x axis ticked at exactly the values measured (grad_accum 1, 4, 16)."""
    from matplotlib.ticker import FixedLocator, NullLocator

    ticks = sorted(set(values))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    lo, hi = min(ticks), max(ticks)
    ax.set_xlim(lo / 2**0.5, hi * 2**0.5)


def _dodge(j: int, n: int, step_log2: float = 0.07) -> float:
    """Multiplicative x offset for series j of n, so error bars at one x do not overlap."""
    return 2 ** ((j - (n - 1) / 2) * step_log2)


def _colors(keys: Sequence[Any]) -> dict[Any, str]:
    return {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(keys)}


def _legend_outside(fig, handles, labels, title: str | None = None, below: bool = False) -> None:
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


def _panel_grid(fig, n: int, max_cols: int = 3):
    """n axes in rows of at most ``max_cols``, sharing y; the unused cells removed."""
    cols = min(n, max_cols)
    rows = math.ceil(n / cols)
    grid = fig.subplots(rows, cols, sharey=True, squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[n:]:
        ax.remove()
    return axes[:n], cols


def _nice_log_ticks(lo: float, hi: float, max_ticks: int = 8) -> list[float]:
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


def plot_slowdown(sensitivity: list[dict], link_order: Sequence[str]) -> tuple[Any | None, str]:
    """Slowdown vs grad_accum with its interval: one panel per non-baseline link."""
    rows = [r for r in sensitivity if r.get("slowdown") is not None]
    if not rows:
        return None, (
            "No link slowdowns: they need at least two links, each with ok, unthrottled runs "
            "of the same variant (strategy, offload, grad_accum, bucket, placement)."
        )
    import matplotlib

    links = [x for x in link_order if any(r["link"] == x for r in rows)]
    links += sorted({r["link"] for r in rows} - set(links))
    vary = varying(rows)
    series = sorted({_series_key(r, vary) for r in rows}, key=_series_sort)
    colors = _colors(series)
    markers = "osD^vP*X"
    with matplotlib.rc_context(RC):
        cols = min(len(links), 3)
        rows_n = math.ceil(len(links) / cols)
        fig = _figure(2.2 + 3.6 * cols if cols > 1 else 7.0, 0.4 + 3.9 * rows_n)
        axes, cols = _panel_grid(fig, len(links))
        handles: dict[tuple, Any] = {}
        for ax, link in zip(axes, links, strict=True):
            mine = [r for r in rows if r["link"] == link]
            for j, key in enumerate(series):
                pts = sorted(
                    (r for r in mine if _series_key(r, vary) == key), key=lambda r: r["grad_accum"]
                )
                if not pts:
                    continue
                xs = [r["grad_accum"] * _dodge(j, len(series)) for r in pts]
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
            _log2_axis(ax, [r["grad_accum"] for r in rows])
            base = next((r["baseline_link"] for r in mine if r.get("baseline_link")), "baseline")
            ax.set_title(f"link {link} vs {base}")
            ax.set_xlabel("grad_accum")
            ax.grid(True, axis="y", alpha=0.3)
        for i, ax in enumerate(axes):
            if i % cols == 0:
                ax.set_ylabel("slowdown (÷ baseline step time)")
        keys = list(handles)
        _legend_outside(fig, [handles[k] for k in keys], [" ".join(k) for k in keys], "strategy")
    note = (
        "Median step time on the link divided by the median on the baseline link, per variant; "
        "error bars: 95% percentile-bootstrap interval over repeats (none where a side had a "
        "single run). Above the dashed line at 1.0 the link costs time."
    )
    return fig, note


def _boxplot_horizontal(ax, data, positions, **kw):
    # matplotlib 3.10 replaced vert=False with orientation="horizontal"; pyproject allows 3.8.
    if "orientation" in inspect.signature(ax.boxplot).parameters:
        return ax.boxplot(data, positions=positions, orientation="horizontal", **kw)
    return ax.boxplot(data, positions=positions, vert=False, **kw)


MAX_VARIANTS_ONE_PANEL = 24
"""Above this many variants the step-time figure gets one panel per strategy, two per row,
so a 60-variant sweep is a figure of readable height instead of one 3000 px column."""


def plot_step_times(step_times: list[dict], link_order: Sequence[str]) -> tuple[Any | None, str]:
    """Box plots of timed step times (max over ranks, warmup excluded), one row per variant."""
    rows = [r for r in step_times if r.get("step_time_s") is not None]
    if not rows:
        return None, (
            "No timed steps: no run of this sweep finished ok and unthrottled (see failed and "
            "throttled runs below)."
        )
    import matplotlib
    from matplotlib.patches import Patch
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    vary = varying(rows)
    groups: dict[tuple, list[float]] = defaultdict(list)
    first: dict[tuple, dict] = {}
    for r in rows:
        key = tuple(r[k] for k in VARIANT_KEYS)
        groups[key].append(r["step_time_s"])
        first.setdefault(key, r)
    keys = sorted(groups, key=lambda k: variant_sort_key(first[k], link_order))
    links = [x for x in link_order if any(first[k]["link"] == x for k in keys)]
    links += sorted({first[k]["link"] for k in keys} - set(links))
    colors = _colors(links)
    values = [v for k in keys for v in groups[k]]
    positive = [v for v in values if v > 0]
    log_x = bool(positive) and len(positive) == len(values) and max(values) / min(positive) > 8

    if len(keys) > MAX_VARIANTS_ONE_PANEL:
        facets = list(dict.fromkeys(strategy_label(first[k]) for k in keys))
        panels = [(f, [k for k in keys if strategy_label(first[k]) == f]) for f in facets]
        ncols = 2
    else:
        panels, ncols = [(None, keys)], 1
    nrows = math.ceil(len(panels) / ncols)
    row_sizes = [
        max(len(ks) for _, ks in panels[i * ncols : (i + 1) * ncols]) for i in range(nrows)
    ]

    def label(k: tuple, facet: str | None) -> str:
        text = variant_label(first[k], vary)
        return text.split(" ", 1)[1] if facet is not None else text  # strategy is the title

    with matplotlib.rc_context(RC):
        fig = _figure(10.5, max(2.6, 0.34 * sum(row_sizes) + 0.55 * nrows + 0.8))
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
        for ax, (facet, ks) in zip(axes, panels, strict=False):
            positions = list(range(1, len(ks) + 1))
            bp = _boxplot_horizontal(
                ax,
                [groups[k] for k in ks],
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
            ax.set_yticks(positions)
            ax.set_yticklabels([label(k, facet) for k in ks])
            row_n = row_sizes[axes.index(ax) // ncols]
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
            if log_x:
                ax.set_xscale("log")
                ticks = _nice_log_ticks(
                    min(positive) / 1.05, max(values) * 1.05, max_ticks=8 if ncols == 1 else 5
                )
                ax.xaxis.set_major_locator(FixedLocator(ticks))
                ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_major_formatter(FuncFormatter(_tick_seconds))
            ax.tick_params(axis="x", labelbottom=True)
            ax.grid(True, axis="x", which="both", alpha=0.3)
        xlabel = "time per optimizer step (slowest rank" + (", log scale)" if log_x else ")")
        for ax in axes[: len(panels)][-ncols:]:
            ax.set_xlabel(xlabel)
        _legend_outside(fig, [Patch(facecolor=colors[x], alpha=0.6) for x in links], links, "link")
    n_runs = len({r["run_id"] for r in rows})
    note = (
        f"Every timed step of {n_runs} ok, unthrottled run(s), pooled per variant: box = "
        "quartiles, line = median, whiskers = 1.5 IQR, dots = outliers. A step's time is its "
        "slowest rank's; warmup steps are excluded."
    )
    return fig, note


def plot_bytes_per_step(runs: list[dict]) -> tuple[Any | None, str]:
    """Measured vs analytic collective bytes per optimizer step, per strategy, vs grad_accum."""
    ok = [r for r in runs if r.get("status") == "ok"]
    by: dict[str, dict[int, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: {"measured": [], "expected": []})
    )
    for r in ok:
        for col, kind in (
            ("comm_bytes_per_step", "measured"),
            ("expected_comm_bytes_per_step", "expected"),
        ):
            if r.get(col) is not None:
                by[strategy_label(r)][r["grad_accum"]][kind].append(float(r[col]))
    if not any(v["measured"] or v["expected"] for s in by.values() for v in s.values()):
        return None, (
            "No communication volume: no ok run recorded measured bytes per step "
            "(runs.comm_bytes_per_step) or an analytic expectation (world_size 1 has none)."
        )
    import matplotlib
    import numpy as np
    from matplotlib.lines import Line2D

    series = sorted(by, key=lambda s: _series_sort((s,)))
    colors = _colors(series)
    all_y = [
        y for s in by.values() for v in s.values() for y in (v["measured"] + v["expected"]) if y > 0
    ]
    log_y = bool(all_y) and max(all_y) / min(all_y) > 20
    with matplotlib.rc_context(RC):
        fig = _figure(9.5, 4.2)
        ax = fig.subplots()
        for j, s in enumerate(series):
            gas = sorted(by[s])
            off = _dodge(j, len(series), 0.05)
            # Expected first, with big hollow markers; measured on top, small and filled: where
            # the two agree the filled dot sits inside the hollow square.
            for kind, style in (("expected", "--"), ("measured", "-")):
                pts = [(g, float(np.median(by[s][g][kind]))) for g in gas if by[s][g][kind]]
                if not pts:
                    continue
                measured = kind == "measured"
                ax.plot(
                    [g * off for g, _ in pts],
                    [y / 1e6 for _, y in pts],
                    linestyle=style,
                    color=colors[s],
                    marker="o" if measured else "s",
                    markersize=5.5 if measured else 11,
                    markerfacecolor=colors[s] if measured else "none",
                    markeredgewidth=1.0 if measured else 1.6,
                    linewidth=2.0 if measured else 1.5,
                    zorder=3 if measured else 2,
                )
        _log2_axis(ax, [g for s in by.values() for g in s])
        if log_y:
            from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

            ax.set_yscale("log")
            lo_mb, hi_mb = min(all_y) / 1e6 / 1.3, max(all_y) / 1e6 * 1.3
            ax.yaxis.set_major_locator(FixedLocator(_nice_log_ticks(lo_mb, hi_mb, 7)))
            ax.yaxis.set_minor_locator(NullLocator())
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.6g}"))
            ax.set_ylim(lo_mb, hi_mb)
        else:
            ax.set_ylim(bottom=0)
        ax.set_xlabel("grad_accum (micro-steps per optimizer step)")
        ax.set_ylabel("MB per optimizer step, per rank" + (" (log scale)" if log_y else ""))
        ax.grid(True, which="major", alpha=0.3)
        handles = [Line2D([], [], color=colors[s], linewidth=2.4) for s in series]
        labels = list(series)
        handles += [
            Line2D([], [], color="0.3", linestyle="-", marker="o", markersize=5.5, linewidth=2.0),
            Line2D([], [], color="0.3", linestyle="--", marker="s", markersize=9,
                   markerfacecolor="none", markeredgewidth=1.6),
        ]  # fmt: skip
        labels += ["measured (profiled step)", "expected (comm_model)"]
        _legend_outside(fig, handles, labels, "strategy")
    note = (
        "Solid, filled: message bytes one rank sent through collectives in one profiled "
        "optimizer step (median over ok runs of all links; 1 MB = 1e6 B). Dashed, hollow: the analytic "
        "expectation from orchestrator/comm_model.py. DDP and ZeRO-1 should be flat in "
        "grad_accum; ZeRO-2/3 grow with it."
    )
    return fig, note


def plot_busbw(bandwidth: list[dict], link_order: Sequence[str]) -> tuple[Any | None, str]:
    """Link microbenchmark: busbw vs message size, log-log, one panel per collective."""
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
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ops = [o for o in OP_ORDER if any(r["collective"] == o for r in rows)]
    ops += sorted({r["collective"] for r in rows} - set(ops))
    vary = varying(rows, ("placement", "backend", "world_size"))

    def skey(r: dict) -> tuple:
        key = [str(r["link"])]
        if "placement" in vary:
            key.append(str(r["placement"]))
        if "backend" in vary:
            key.append(str(r["backend"]))
        if "world_size" in vary:
            key.append(f"n={r['world_size']}")
        return tuple(key)

    series = sorted(
        {skey(r) for r in rows}, key=lambda k: (_order_index(k[0], list(link_order)), k[1:])
    )
    colors = _colors(series)
    sizes = sorted({r["msg_bytes"] for r in rows})
    k_lo, k_hi = math.floor(math.log2(sizes[0])), math.ceil(math.log2(sizes[-1]))
    stride = max(1, math.ceil((k_hi - k_lo + 1) / 6))
    stride += stride % 2  # even strides keep ticks on 1 KiB, 1 MiB, ... boundaries
    start = k_lo + (-k_lo) % stride
    ticks = [2.0**k for k in range(start, k_hi + 1, stride)] or [float(sizes[0])]
    with matplotlib.rc_context(RC):
        cols = min(len(ops), 3)
        fig = _figure(0.9 + 3.5 * cols if cols > 1 else 7.0, 0.9 + 3.6 * math.ceil(len(ops) / 3))
        axes, cols = _panel_grid(fig, len(ops))
        handles: dict[tuple, Any] = {}
        for ax, op in zip(axes, ops, strict=True):
            for key in series:
                pts = sorted(
                    (r for r in rows if r["collective"] == op and skey(r) == key),
                    key=lambda r: r["msg_bytes"],
                )
                if not pts:
                    continue
                (h,) = ax.plot(
                    [r["msg_bytes"] for r in pts],
                    [r["busbw_gbps"] for r in pts],
                    marker="o",
                    markersize=4,
                    linewidth=1.8,
                    color=colors[key],
                )
                handles.setdefault(key, h)
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
        for i, ax in enumerate(axes):
            if i % cols == 0:
                ax.set_ylabel("busbw (GB/s)")
        keys = list(handles)
        _legend_outside(
            fig, [handles[k] for k in keys], [" ".join(k) for k in keys], "link", below=True
        )
    note = (
        "Median over iterations of the slowest rank's time, as bus bandwidth in GB/s "
        "(1 GB = 1e9 B; nccl-tests "
        "doc/PERFORMANCE.md: all_reduce x 2(n-1)/n, all_gather and reduce_scatter x (n-1)/n), "
        "comparable with the link's rated speed. Message size as in nccl-tests: the whole "
        "all_reduce buffer, all_gather's output, reduce_scatter's input."
    )
    return fig, note


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
         lambda: plot_busbw(data.bandwidth, data.link_order)),
    ]  # fmt: skip
    out = []
    for name, title, draw in plan:
        try:
            fig, note = draw()
            png = figure_png(fig) if fig is not None else None
        except Exception as exc:  # noqa: BLE001 - one bad figure must not lose the report
            _err(f"report: {name} could not be drawn: {type(exc).__name__}: {exc}")
            png, note = None, f"This figure could not be drawn: {type(exc).__name__}: {exc}"
        out.append(FigureResult(name, title, png, note))
    return out


# --------------------------------------------------------------------------------------------
# HTML: rows + PNG bytes -> one self-contained string.

CSS = """
body { font: 15px/1.45 -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Arial, sans-serif;
       color: #1d2330; margin: 0; background: #f6f7f9; }
main { max-width: 1280px; margin: 0 auto; padding: 20px 28px 60px; background: #fff; }
h1 { font-size: 26px; margin: 8px 0 4px; }
h2 { font-size: 20px; margin: 34px 0 8px; padding-top: 8px; border-top: 2px solid #e3e6eb; }
h3 { font-size: 16px; margin: 20px 0 6px; }
h3 small { font-weight: normal; color: #4a5568; font-size: 14px; }
p.meta { color: #4a5568; margin: 2px 0 12px; }
nav { font-size: 14px; margin: 10px 0 4px; }
nav a { margin-right: 14px; color: #2457a6; text-decoration: none; }
.note { color: #4a5568; font-size: 14px; margin: 4px 0 10px; max-width: 980px; }
.missing { background: #fff8e6; border-left: 4px solid #e0a800; padding: 8px 12px;
           margin: 8px 0; max-width: 980px; }
.warn { background: #fdecec; border-left: 4px solid #c53030; padding: 8px 14px; margin: 10px 0; }
.warn ul { margin: 4px 0; padding-left: 20px; }
.ok { background: #ebf8f0; border-left: 4px solid #2f855a; padding: 8px 14px; margin: 10px 0; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; font-size: 13.5px; margin: 6px 0 14px; }
th, td { border: 1px solid #d5d9e0; padding: 4px 9px; text-align: left; vertical-align: top; }
th { background: #eef1f5; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr:nth-child(even) td { background: #fafbfc; }
table.classic td, table.classic th { font-size: 14.5px; padding: 6px 12px; }
td.slower { color: #9b1c1c; font-weight: 600; }
td.faster { color: #22543d; font-weight: 600; }
figure { margin: 10px 0 22px; }
figure img { max-width: 100%; height: auto; border: 1px solid #e3e6eb; }
figcaption { color: #4a5568; font-size: 14px; margin-top: 4px; max-width: 980px; }
pre { background: #f4f5f7; padding: 8px 10px; overflow-x: auto; font-size: 12.5px;
      max-height: 420px; }
code { font-size: 13px; }
details { margin: 6px 0 12px; }
summary { cursor: pointer; color: #2457a6; }
dl.kv { display: grid; grid-template-columns: max-content 1fr; gap: 3px 14px; font-size: 14px; }
dl.kv dt { font-weight: 600; } dl.kv dd { margin: 0; }
"""


def _esc(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _header(name: str) -> str:
    """Long column names may wrap after an underscore, never before a short unit (``_s``)."""
    parts = str(name).split("_")
    if len(name) <= 12 or len(parts) < 2:
        return _esc(name)
    if len(parts[-1]) <= 2:
        parts[-2:] = [f"{parts[-2]}_{parts[-1]}"]
    return "_<wbr>".join(_esc(p) for p in parts)


def _is_num_col(col: str, rows: list[dict]) -> bool:
    vals = [r.get(col) for r in rows if r.get(col) is not None]
    return bool(vals) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals)


def html_table(
    rows: list[dict],
    cols: Sequence[str] | None = None,
    headers: dict[str, str] | None = None,
    fold: bool = False,
) -> str:
    """A plain table; numbers right-aligned and formatted by their column's unit suffix.

    ``fold``: columns with one value in every row (or none at all) move to a line above the
    table, so a wide table keeps only the columns that tell rows apart.
    """
    if not rows:
        return "<p class='note'>(no rows)</p>"
    cols = list(cols or rows[0].keys())
    headers = headers or {}
    prefix = ""
    if fold and len(rows) > 1:
        same = [c for c in cols if len({fmt_value(c, r.get(c)) for r in rows}) == 1]
        empty = [c for c in same if rows[0].get(c) is None]
        const = [c for c in same if c not in empty]
        cols = [c for c in cols if c not in same]
        notes = []
        if const:
            notes.append(
                "same in every row: "
                + ", ".join(f"{headers.get(c, c)} = {fmt_value(c, rows[0].get(c))}" for c in const)
            )
        if empty:
            notes.append("not recorded: " + ", ".join(headers.get(c, c) for c in empty))
        prefix = "".join(f"<p class='note'>{_esc(n)}</p>" for n in notes)
        if not cols:
            return prefix
    numeric = {c: _is_num_col(c, rows) for c in cols}
    head = "".join(f"<th>{_header(headers.get(c, c))}</th>" for c in cols)
    body = []
    for r in rows:
        cells = "".join(
            f"<td class='num'>{_esc(fmt_value(c, r.get(c)))}</td>"
            if numeric[c]
            else f"<td>{_esc(fmt_value(c, r.get(c)))}</td>"
            for c in cols
        )
        body.append(f"<tr>{cells}</tr>")
    return (
        f"{prefix}<div class='scroll'><table><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _sorted(rows: list[dict], link_order: Sequence[str]) -> list[dict]:
    return sorted(rows, key=lambda r: variant_sort_key(r, link_order))


def _missing(text: str) -> str:
    return f"<div class='missing'>{_esc(text)}</div>"


def _ratio_cell(s: dict | None, single_run: bool = False) -> str:
    """``1.29× [1.21–1.35]``, red when the interval lies above 1, green below.

    ``single_run``: one side had one usable run, so the interval is a point and says nothing
    about spread; the ratio is shown uncoloured, marked "no CI".
    """
    if s is None or s.get("slowdown") is None:
        return "<td class='num'>–</td>"
    if single_run:
        return f"<td class='num'>{s['slowdown']:.2f}× (1 run, no CI)</td>"
    lo, hi = s.get("ci_low"), s.get("ci_high")
    cls = "num"
    if lo is not None and lo > 1:
        cls += " slower"
    elif hi is not None and hi < 1:
        cls += " faster"
    interval = f" [{lo:.2f}–{hi:.2f}]" if lo is not None and hi is not None else ""
    return f"<td class='{cls}'>{s['slowdown']:.2f}×{_esc(interval)}</td>"


def classic_tables(data: ReportData) -> str:
    """The perf_hardware table ("NVLink Y: 101 s / N: 131 s"), per step and with intervals.

    One table per strategy, DDP first (the page measured DDP; its claim is about ZeRO). Rows:
    grad_accum (and placement, offload, bucket when they vary); columns: step time on each link,
    then each link's ratio to the baseline.
    """
    if not data.variants:
        return _missing("No variant figures: the sweep stored no runs.")
    base = data.baseline_link
    links = [x for x in data.link_order if any(v["link"] == x for v in data.variants)]
    others = [x for x in links if x != base]
    sens = {
        (s["strategy"], s["offload"], s["grad_accum"], s["bucket_mb"], s["placement"], s["link"]): s
        for s in data.sensitivity
    }
    strategies = sorted(
        {v["strategy"] for v in data.variants}, key=lambda s: _order_index(s, STRATEGY_ORDER)
    )
    out = []
    if len(links) < 2:
        out.append(
            _missing(
                f"Only one link ({', '.join(links) or 'none'}) was measured, so there is no "
                'link comparison: add a second link (e.g. no_p2p: {NCCL_P2P_DISABLE: "1"}).'
            )
        )
    for strategy in strategies:
        vs = [v for v in data.variants if v["strategy"] == strategy]
        vary = varying(vs, ("offload", "bucket_mb", "placement"))
        row_keys = sorted(
            {(v["offload"], v["bucket_mb"], v["placement"], v["grad_accum"]) for v in vs},
            key=lambda k: (_order_index(k[0], OFFLOAD_ORDER), k[1], k[2], k[3]),
        )
        cell = {
            (v["offload"], v["bucket_mb"], v["placement"], v["grad_accum"], v["link"]): v
            for v in vs
        }
        head = [c for c in ("offload", "bucket_mb", "placement") if c in vary]
        head += ["grad_accum"]
        head += [f"{x}{' (baseline)' if x == base else ''}: time / step [95% CI]" for x in links]
        head += [f"{x} ÷ {base}" for x in others]
        trs = []
        for off, bucket, placement, ga in row_keys:
            extra = {"offload": off, "bucket_mb": bucket, "placement": placement}
            tds = [
                f"<td>{_esc(extra[c])}</td>"
                for c in ("offload", "bucket_mb", "placement")
                if c in vary
            ]
            tds.append(f"<td class='num'>{ga}</td>")
            for x in links:
                v = cell.get((off, bucket, placement, ga, x))
                if v is None:
                    tds.append("<td class='num'>not run</td>")
                    continue
                used = (v.get("n_runs") or 0) - (v.get("n_excluded") or 0)
                med = v["median_step_time_s"]
                # one run has no spread to bootstrap: say so rather than print [x–x]
                text = fmt_time_ci(
                    med, *((None, None) if used < 2 else (v["ci_low_s"], v["ci_high_s"]))
                )
                notes = [f"{used} of {v['n_runs']} runs"] if v.get("n_excluded") else []
                if used == 1:
                    notes.append("1 run, no CI" if not notes else "no CI")
                if med is None:
                    text, notes = "no ok run", notes[:1]
                if notes:
                    text += f" ({', '.join(notes)})"
                tds.append(f"<td class='num'>{_esc(text)}</td>")
            for x in others:
                pair = [cell.get((off, bucket, placement, ga, y)) for y in (x, base)]
                single = any(
                    v is not None and (v.get("n_runs") or 0) - (v.get("n_excluded") or 0) < 2
                    for v in pair
                )
                tds.append(_ratio_cell(sens.get((strategy, off, ga, bucket, placement, x)), single))
            trs.append(f"<tr>{''.join(tds)}</tr>")
        ths = "".join(f"<th>{_esc(h)}</th>" for h in head)
        title = "DDP" if strategy == "ddp" else strategy.upper().replace("ZERO", "ZeRO-")
        v0 = vs[0]
        fixed = (
            [f"offload {v0['offload']}"]
            if "offload" not in vary and v0["offload"] != "none"
            else []
        )
        fixed += [f"bucket {v0['bucket_mb']} MB"] if "bucket_mb" not in vary else []
        fixed += [f"placement {v0['placement']}"] if "placement" not in vary else []
        sub = f" <small>({_esc(', '.join(fixed))})</small>" if fixed else ""
        out.append(
            f"<h3>{_esc(title)}{sub}</h3><div class='scroll'><table class='classic'>"
            f"<thead><tr>{ths}</tr></thead><tbody>{''.join(trs)}</tbody></table></div>"
        )
    out.append(
        "<p class='note'>Time per optimizer step: median over repeats of each run's median step "
        "(slowest rank, warmup excluded), with a 95% percentile-bootstrap interval. Ratios in "
        "red: the interval lies above 1 (the link is slower beyond the spread); green: below 1."
        " Failed and throttled runs are excluded and counted.</p>"
    )
    return "".join(out)


def _figure_html(f: FigureResult) -> str:
    if f.png is None:
        return f"<h3>{_esc(f.title)}</h3>" + _missing(f.note)
    b64 = base64.b64encode(f.png).decode("ascii")
    return (
        f"<h3>{_esc(f.title)}</h3><figure><img alt='{_esc(f.title)}' "
        f"src='data:image/png;base64,{b64}'><figcaption>{_esc(f.note)} "
        f"<code>{_esc(f.name)}</code></figcaption></figure>"
    )


def _attention(data: ReportData) -> list[str]:
    """One line per thing that should make a reader doubt a figure."""
    runs = data.runs
    lines = []
    if not runs:
        lines.append("No runs stored for this sweep: nothing was measured.")
    failed = [r for r in runs if r.get("status") != "ok"]
    if failed:
        lines.append(f"{len(failed)} of {len(runs)} run(s) failed (listed below).")
    throttled = [r for r in runs if r.get("throttled")]
    if throttled:
        lines.append(f"{len(throttled)} run(s) throttled: kept, excluded from figures.")
    hot = [r for r in runs if r.get("hot") and not r.get("throttled")]
    if hot:
        lines.append(f"{len(hot)} run(s) ran hot (not throttled).")
    mismatch = [r for r in runs if r.get("link_check") == "mismatch"]
    if mismatch:
        lines.append(
            f"{len(mismatch)} run(s) with a link mismatch: NCCL's transport does not match the "
            "link's name, so they do not measure what the link says."
        )
    if data.sweep.get("status") not in ("ok", None):
        lines.append(f"Sweep status: {data.sweep.get('status')}.")
    if data.sweep.get("git_dirty"):
        lines.append(
            "The code had uncommitted changes (git_dirty): the git sha alone does not reproduce it."
        )
    if data.bench_failures:
        lines.append(f"{len(data.bench_failures)} link microbenchmark op(s) did not run ok.")
    return lines


def _run_list(rows: list[dict], cols: Sequence[str], empty: str) -> str:
    return html_table(rows, cols) if rows else f"<p class='note'>{_esc(empty)}</p>"


def _telemetry_absent(runs: list[dict]) -> bool:
    return any(str(r.get("telemetry") or "absent").startswith("absent") for r in runs)


def _attention_html(data: ReportData) -> str:
    runs = data.runs
    no_throttle = "No run was throttled" + (
        " (GPU telemetry absent on some or all runs: see provenance)."
        if _telemetry_absent(runs)
        else "."
    )
    parts = [
        "<h3>Failed runs</h3>",
        _failed_runs_html(runs),
        "<h3>Throttled runs</h3>",
        _run_list(
            [r for r in runs if r.get("throttled")],
            ("seq", "strategy", "offload", "grad_accum", "link", "placement", "repeat",
             "max_temp_c", "mean_power_w", "min_sm_clock_mhz", "telemetry"),
            no_throttle,
        ),
        "<h3>Link-mismatch runs</h3>",
        _run_list(
            [r for r in runs if r.get("link_check") == "mismatch"],
            ("seq", "strategy", "grad_accum", "link", "link_env", "link_class",
             "effective_transport", "nccl_version"),
            "No run with link_check = mismatch.",
        ),
    ]  # fmt: skip
    if data.bench_failures:
        parts += [
            "<h3>Link microbenchmark ops that did not run ok</h3>",
            html_table(data.bench_failures),
        ]
    return "".join(parts)


def _failed_runs_html(runs: list[dict]) -> str:
    failed = [r for r in runs if r.get("status") != "ok"]
    if not failed:
        return "<p class='note'>No run failed.</p>"
    vary = varying(runs)
    trs = []
    for r in failed:
        err = (r.get("error") or "").strip()
        line = first_line(err) or "(no error text stored)"
        full = (
            f"<details><summary>full error</summary><pre>{_esc(err)}</pre></details>"
            if err and err != line
            else ""
        )
        trs.append(
            f"<tr><td class='num'>{_esc(r.get('seq'))}</td>"
            f"<td>{_esc(variant_label(r, vary))}</td>"
            f"<td class='num'>{_esc(r.get('repeat'))}</td><td>{_esc(r.get('status'))}</td>"
            f"<td><code>{_esc(line)}</code>{full}</td></tr>"
        )
    return (
        "<div class='scroll'><table><thead><tr><th>seq</th><th>variant</th><th>repeat</th>"
        f"<th>status</th><th>error (first line)</th></tr></thead><tbody>{''.join(trs)}"
        "</tbody></table></div>"
    )


def _distinct(runs: list[dict], cols: Sequence[str]) -> list[dict]:
    out = []
    for c in cols:
        counts = Counter(fmt_value(c, r.get(c)) for r in runs)
        out.append(
            {"column": c, "values (runs)": "; ".join(f"{v} ({n})" for v, n in counts.most_common())}
        )
    return out


def _link_matrix(rows: list[dict]) -> str:
    """gpu_links rows of one node as a matrix, like ``nvidia-smi topo -m``."""
    gpus = sorted({r["gpu_a"] for r in rows} | {r["gpu_b"] for r in rows}, key=_natural)
    cell = {(r["gpu_a"], r["gpu_b"]): r["link"] for r in rows}
    head = "".join(f"<th>{_esc(g)}</th>" for g in gpus)
    trs = "".join(
        f"<tr><th>{_esc(a)}</th>"
        + "".join(f"<td>{_esc('X' if a == b else cell.get((a, b), '–'))}</td>" for b in gpus)
        + "</tr>"
        for a in gpus
    )
    return f"<table><thead><tr><th></th>{head}</tr></thead><tbody>{trs}</tbody></table>"


def _natural(s: str) -> tuple:
    digits = "".join(ch for ch in str(s) if ch.isdigit())
    return (str(s).rstrip("0123456789"), int(digits) if digits else -1, str(s))


def _provenance_html(data: ReportData) -> str:
    s = data.sweep
    kv = [
        ("sweep_id", s.get("sweep_id")),
        ("name", s.get("name")),
        ("status", s.get("status")),
        ("started_at", fmt_value("started_at", s.get("started_at"))),
        ("finished_at", fmt_value("finished_at", s.get("finished_at"))),
        ("git_sha", s.get("git_sha")),
        ("git_dirty", fmt_value("git_dirty", s.get("git_dirty"))),
        ("ray_address", s.get("ray_address")),
        ("driver_host", s.get("driver_host")),
        ("n_runs_planned", s.get("n_runs_planned")),
        ("topology_status", s.get("topology_status")),
    ]
    parts = ["<dl class='kv'>"]
    parts += [f"<dt>{_esc(k)}</dt><dd>{_esc('–' if v is None else v)}</dd>" for k, v in kv]
    parts.append("</dl>")
    parts.append("<h3>Versions</h3>")
    parts.append(
        html_table([{"package": k, "version": v} for k, v in sorted(data.versions.items())])
        if data.versions
        else _missing("No versions were recorded for this sweep.")
    )
    parts.append(
        "<h3>Sweep file (spec)</h3><details><summary>show the validated spec</summary>"
        f"<pre>{_esc(json.dumps(data.spec, indent=2, sort_keys=False))}</pre></details>"
    )
    parts.append("<h3>What the runs actually used</h3>")
    parts.append(
        html_table(
            _distinct(
                data.runs,
                (
                    "backend",
                    "data_source",
                    "tokenizer",
                    "effective_transport",
                    "link_class",
                    "link_check",
                    "nccl_version",
                    "gpu_visibility",
                    "telemetry",
                ),
            )
        )
        if data.runs
        else _missing("No runs stored for this sweep.")
    )
    parts.append("<h3>Topology</h3>")
    if not data.nodes:
        parts.append(_missing("No topology was recorded for this sweep (nodes table is empty)."))
    else:
        cols = [c for c in data.nodes[0] if c not in ("sweep_id", "topo_text")]
        parts.append(html_table(data.nodes, cols, fold=len(data.nodes) > 2))
        for n in data.nodes:
            links = [r for r in data.gpu_links if r["node"] == n["node"]]
            parts.append(f"<p><b>{_esc(n['node'])}</b></p>")
            if links:
                parts.append(_link_matrix(links))
            if n.get("topo_text"):
                parts.append(
                    "<details><summary>nvidia-smi topo -m</summary>"
                    f"<pre>{_esc(n['topo_text'])}</pre></details>"
                )
            if not links and not n.get("topo_text"):
                parts.append("<p class='note'>No GPU topology on this node.</p>")
    if data.gpus:
        cols = [c for c in data.gpus[0] if c != "sweep_id"]
        parts.append("<h3>GPUs</h3>" + html_table(data.gpus, cols, fold=True))
    else:
        parts.append("<p class='note'>No GPUs were inventoried (CPU-only, or NVML absent).</p>")
    return "".join(parts)


VARIANT_COLS = (
    "strategy", "offload", "grad_accum", "bucket_mb", "link", "placement", "n_runs",
    "n_excluded", "median_step_time_s", "ci_low_s", "ci_high_s", "samples_per_s",
    "tokens_per_s", "comm_bytes_per_step", "expected_comm_bytes_per_step",
    "predicted_comm_s_per_step", "peak_mem_bytes",
)  # fmt: skip
SENS_COLS = (
    "strategy", "offload", "grad_accum", "bucket_mb", "placement", "link", "baseline_link",
    "slowdown", "ci_low", "ci_high",
)  # fmt: skip
RUN_COLS = (
    "seq", "strategy", "offload", "grad_accum", "bucket_mb", "link", "placement", "repeat",
    "status", "n_steps", "median_step_time_s", "startup_s", "effective_transport", "link_check",
    "throttled", "max_temp_c", "min_sm_clock_mhz", "comm_bytes_per_step", "peak_mem_bytes",
)  # fmt: skip


def render_html(data: ReportData, figures: Sequence[FigureResult]) -> str:
    """The whole report as one self-contained HTML string."""
    s = data.sweep
    runs = data.runs
    spec = data.spec
    n_ok = sum(1 for r in runs if r.get("status") == "ok")
    title = f"linksweep report: {s.get('name') or ''} ({s.get('sweep_id')})"
    meta = (
        f"{fmt_value('started_at', s.get('started_at'))} · status {s.get('status') or '–'} · "
        f"model {spec.get('model', '–')} · {spec.get('precision', '–')} · world_size "
        f"{spec.get('world_size', '–')} · seq_len {spec.get('seq_len', '–')} · micro_batch "
        f"{spec.get('micro_batch_size', '–')} · {spec.get('steps', '–')} timed + "
        f"{spec.get('warmup_steps', '–')} warmup steps · baseline link "
        f"{data.baseline_link or '–'} · runs: {n_ok} ok of {len(runs)}"
        f" · git {(s.get('git_sha') or '–')[:12]}{' (dirty)' if s.get('git_dirty') else ''}"
    )
    attention = _attention(data)
    if attention:
        box = (
            "<div class='warn'><b>Read with care</b><ul>"
            + "".join(f"<li>{_esc(x)}</li>" for x in attention)
            + "</ul></div>"
        )
    else:
        throttle = (
            "throttling not checked (no GPU telemetry)"
            if _telemetry_absent(runs)
            else "none throttled"
        )
        box = f"<div class='ok'>All {len(runs)} runs ok; {throttle}; no link mismatch.</div>"

    links_env = spec.get("links") or {}
    link_lines = "".join(
        f"<li><b>{_esc(name)}</b>: <code>{_esc(' '.join(f'{k}={v}' for k, v in env.items()) or '(no env change)')}</code></li>"
        for name, env in links_env.items()
    )
    sections = [
        ("classic", "Time per step by link (the classic table)",
         (f"<ul class='note'>{link_lines}</ul>" if link_lines else "") + classic_tables(data)),
        ("figures", "Figures", "".join(_figure_html(f) for f in figures)),
        ("variants", "Variant summary",
         "<p class='note'>view <code>variant_summary</code>: one row per variant.</p>"
         + (html_table(_sorted(data.variants, data.link_order), VARIANT_COLS, fold=True)
            if data.variants
            else _missing("No variants: the sweep stored no runs."))),
        ("sensitivity", "Link sensitivity",
         "<p class='note'>view <code>link_sensitivity</code>: slowdown = median step time on "
         "the link ÷ on the baseline link, 95% bootstrap interval.</p>"
         + (html_table(_sorted(data.sensitivity, data.link_order), SENS_COLS, fold=True)
            if data.sensitivity else _missing(
             "No link sensitivity rows: there is only one link, or no variant has ok runs on "
             "both the link and the baseline."))),
        ("attention", "Runs needing attention", _attention_html(data)),
        ("runs", "All runs",
         f"<details><summary>{len(runs)} run(s), in execution order</summary>"
         + html_table(runs, [c for c in RUN_COLS if not runs or c in runs[0]], fold=True)
         + "</details>" if runs else _missing("No runs stored for this sweep.")),
        ("provenance", "Provenance", _provenance_html(data)),
    ]  # fmt: skip
    nav = "".join(f"<a href='#{sid}'>{_esc(t)}</a>" for sid, t, _ in sections)
    body = "".join(f"<h2 id='{sid}'>{_esc(t)}</h2>{content}" for sid, t, content in sections)
    generated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{_esc(title)}</title><style>{CSS}</style></head><body><main>"
        f"<h1>{_esc(title)}</h1><p class='meta'>{_esc(meta)}</p>{box}<nav>{nav}</nav>{body}"
        f"<p class='note'>Generated {generated} by <code>linksweep report</code>. "
        "Every number here is a query away: see the views in orchestrator/store.py.</p>"
        "</main></body></html>\n"
    )


# --------------------------------------------------------------------------------------------
# Commands.


def report_command(db: str, sweep_id: str | None, out_dir: str) -> int:
    """``linksweep report``: write report.html and the figures into ``out_dir``.

    Exit 0 on success (also for a sweep with nothing to plot: the HTML says what is missing);
    2 when the database or the sweep does not exist or cannot be read, or out_dir is not writable.
    """
    if not os.path.exists(db):
        _err(f"--db {db} does not exist; run a sweep first (linksweep run SWEEP.yaml --db {db})")
        return EXIT_BAD_INPUT
    try:
        data = load_report_data(db, sweep_id)
    except (StoreError, ReportError) as exc:
        _err(str(exc))
        return EXIT_BAD_INPUT
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        _err(f"--out {out_dir}: cannot create the folder ({exc.strerror})")
        return EXIT_BAD_INPUT
    if not os.access(out_dir, os.W_OK):
        _err(f"--out {out_dir}: folder is not writable")
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
    from orchestrator.store import export_all

    if fmt not in EXPORT_FORMATS:
        _err(f"--format {fmt!r} is not supported; allowed: {', '.join(EXPORT_FORMATS)}")
        return EXIT_BAD_INPUT
    if not os.path.exists(db):
        _err(f"--db {db} does not exist; run a sweep first (linksweep run SWEEP.yaml --db {db})")
        return EXIT_BAD_INPUT
    try:
        read_query(db, "SELECT 1")  # refuses a foreign or locked database with a clear message
        os.makedirs(out_dir, exist_ok=True)
        if not os.access(out_dir, os.W_OK):
            raise OSError(13, "not writable")
    except StoreError as exc:
        _err(str(exc))
        return EXIT_BAD_INPUT
    except OSError as exc:
        _err(f"{out_dir}: cannot write there ({exc.strerror or exc})")
        return EXIT_BAD_INPUT
    try:
        written = export_all(db, out_dir, fmt)
    except StoreError as exc:
        _err(str(exc))
        return EXIT_BAD_INPUT
    print(f"exported {len(written)} tables and views from {db} as {fmt}:")
    for path in written:
        print(f"  {path}")
    return EXIT_OK


__all__ = [
    "FIGURES",
    "ReportData",
    "ReportError",
    "build_figures",
    "export_command",
    "load_report_data",
    "render_html",
    "report_command",
]
