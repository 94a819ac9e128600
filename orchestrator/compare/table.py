"""``linksweep compare`` as text: a terminal table, or markdown for a CI comment (a short verdict
line, then a table). Pure: a ``compare.Comparison`` in, a string out.

The strategy column names the flavour (``flavours.flavoured_strategy``): ``fsdp (reshard, sync
each)``, ``hsdp (no reshard, sync replicate_last)``, ``ddp (sync each)``; plain ``ddp`` and
``zero3`` where there is none to name. The flavour axes (``flavours.FLAVOUR_KEYS``: ``grad_sync``
and ``reshard_after_forward``) then need no columns of their own. Every other key is a column
where it varies (``stats.varying``), headed by its catalog label (``ga``, ``bucket``, ``grads``);
the unmatched tables show every key that varies among the variants, as stored, and
``--format json`` keeps every key.

May import: comparison, orchestrator.analysis.flavours, orchestrator.analysis.stats, orchestrator.ui,
workloads.catalog.
"""

from __future__ import annotations

from typing import Any

from orchestrator.analysis.flavours import LINK, STRATEGY, flavour_axes, flavoured_strategy
from orchestrator.analysis.stats import VARIANT_KEY, varying
from orchestrator.compare.comparison import FASTER, NO_CHANGE, SLOWER, Comparison
from orchestrator.ui import fmt_cell, format_table
from workloads import catalog


def short(name: str) -> str:
    """A key column's head: the axis's label in the catalog (``ga``, ``bucket``, ``sync``)."""
    axis = catalog.AXES.get(name)
    return axis.short if axis is not None else name


FIGURE_TITLES = {
    "median_step_time_s": "median step time (s)",
    "slowdown": "slowdown vs the sweep's baseline link",
    "tokens_per_s": "tokens/s",
    "mfu": "MFU",
}


def _pct(threshold: float) -> str:
    return f"{threshold * 100:g}%"


def key_columns(c: Comparison) -> list[str]:
    """The variant-key columns worth printing: those that vary, and always strategy and link;
    never the flavour keys, which the strategy column names."""
    keys = [r["key"] for r in (*c.variants, *c.slowdowns)]
    shown = (varying(keys) | {STRATEGY, LINK}) - set(flavour_axes())
    return [k for k in VARIANT_KEY if k in shown]


def unmatched_columns(c: Comparison) -> list[str]:
    """The key columns of the unmatched tables: strategy and link, and every key that varies
    among all the variants compared (matched or not), flavours included (as stored)."""
    keys = [r["key"] for r in (*c.variants, *c.slowdowns)]
    keys += [*c.unmatched["baseline_only"], *c.unmatched["candidate_only"]]
    shown = varying(keys) | {STRATEGY, LINK}
    return [k for k in VARIANT_KEY if k in shown]


def _key_cell(key: dict, name: str) -> Any:
    return flavoured_strategy(key) if name == STRATEGY else key.get(name)


def verdict_line(c: Comparison) -> str:
    """One sentence: the gate's verdict and why."""
    slower_v = sum(r["verdict"] == SLOWER for r in c.variants)
    slower_s = sum(r["verdict"] == SLOWER for r in c.slowdowns)
    faster = sum(r["verdict"] == FASTER for r in (*c.variants, *c.slowdowns))
    same = sum(r["verdict"] == NO_CHANGE for r in c.variants)
    t = _pct(c.threshold)
    if c.regressions:
        head = f"REGRESSION: {c.regressions} beyond {t} and the noise"
        why = f"{slower_v} variant(s) slower, {slower_s} slowdown(s) grew"
    else:
        head = f"No regression beyond {t}"
        why = f"{same} of {len(c.variants)} variant(s) no change"
    if faster:
        why += f", {faster} faster"
    return (
        f"{head} ({why}); candidate {c.candidate['sweep_id']} vs baseline {c.baseline['sweep_id']}"
    )


def _interval(r: dict) -> str:
    if r.get("ratio") is None:
        return ""
    return f"{r['ratio']:.3f} [{r['ratio_low']:.3f}-{r['ratio_high']:.3f}]"


def _p(r: dict) -> str:
    if r.get("test") == "mann-whitney":
        return f"U p={r['p_value']:.3g}"
    return "ranges" if r.get("test") else ""


def figure_rows(c: Comparison, rows: list[dict], keys: list[str]) -> tuple[list[str], list]:
    cols = [short(k) for k in keys] + [
        "baseline", "candidate", "ratio [interval]", "n", "test", "verdict",
    ]  # fmt: skip
    out = []
    for r in rows:
        out.append(
            tuple(_key_cell(r["key"], k) for k in keys)
            + (
                _num(r["baseline_median_s"]),
                _num(r["candidate_median_s"]),
                _interval(r),
                f"{r['n_baseline']}/{r['n_candidate']}",
                _p(r),
                r["verdict"],
            )
        )
    return cols, out


def _num(v: Any) -> str:
    return "" if v is None else fmt_cell(float(v), 4)


def shown_linkbench(c: Comparison) -> list[dict]:
    """The busbw rows a person reads: per link x placement x collective x source x in-place the
    largest message size (where a link's rate shows; small messages measure latency), and every
    size whose verdict is a change. ``--format json`` has every size."""
    group = ("link", "placement", "collective", "source", "in_place")
    largest: dict[tuple, int] = {}
    for r in c.linkbench:
        g = tuple(r[k] for k in group)
        largest[g] = max(largest.get(g, r["msg_bytes"]), r["msg_bytes"])
    return [
        r
        for r in c.linkbench
        if r["msg_bytes"] == largest[tuple(r[k] for k in group)] or r["verdict"] in (SLOWER, FASTER)
    ]


def linkbench_rows(c: Comparison) -> tuple[list[str], list]:
    cols = ["link", "placement", "collective", "msg_bytes", "source", "in_place",
            "baseline GB/s", "candidate GB/s", "ratio", "verdict"]  # fmt: skip
    rows = [
        (r["link"], r["placement"], r["collective"], r["msg_bytes"], r["source"],
         r["in_place"], _num(r["baseline_busbw_gbps"]), _num(r["candidate_busbw_gbps"]),
         "" if r["ratio"] is None else f"{r['ratio']:.3f}", r["verdict"])
        for r in shown_linkbench(c)
    ]  # fmt: skip
    return cols, rows


def _sections(c: Comparison) -> list[tuple[str, list[str], list]]:
    """(title, columns, rows) of every part, in the order printed."""
    keys = key_columns(c)
    parts = []
    if c.fingerprint:
        parts.append(
            (
                "What differs between the sweeps (fingerprint)",
                ["field", "baseline", "candidate"],
                [(d["field"], d["baseline"], d["candidate"]) for d in c.fingerprint],
            )
        )
    for title, rows in (
        ("Variants: median step time (s), candidate / baseline", c.variants),
        ("Slowdowns (each link / the sweep's baseline link): candidate / baseline", c.slowdowns),
    ):
        parts.append((title, *figure_rows(c, rows, keys)))
    for fig in ("tokens_per_s", "mfu"):
        rows = [r for r in c.throughput if r["figure"] == fig]
        if rows:
            parts.append(
                (
                    f"Throughput: {FIGURE_TITLES[fig]} (higher is better)",
                    *figure_rows(c, rows, keys),
                )
            )
    if c.linkbench:
        parts.append(
            (
                "Link microbenchmark: busbw, candidate / baseline (largest message, and every size "
                "that changed; all sizes in --format json)",
                *linkbench_rows(c),
            )
        )
    unmatched = unmatched_columns(c)
    for side, title in (("baseline_only", "baseline"), ("candidate_only", "candidate")):
        only = c.unmatched[side]
        if only:
            parts.append(
                (
                    f"Unmatched: variants only in the {title}",
                    [short(k) for k in unmatched],
                    [tuple(k.get(x) for x in unmatched) for k in only],
                )
            )
    return parts


def render_fingerprint(c: Comparison) -> str:
    """What differs in the environment and the workload, alone (a refused comparison)."""
    rows = [(d["field"], d["baseline"], d["candidate"]) for d in c.fingerprint]
    return "\n".join(format_table(["field", "baseline", "candidate"], rows, title="What differs"))


def render_table(c: Comparison) -> str:
    """The terminal text: what differs first, then each figure's table, the verdict last."""
    lines = [
        f"baseline  {c.baseline['sweep_id']} ({c.baseline['db']})",
        f"candidate {c.candidate['sweep_id']} ({c.candidate['db']})",
        f"threshold {_pct(c.threshold)}; test: Mann-Whitney U (alpha {c.alpha:g}) with 5+ runs a "
        "side, else the ranges of the runs must not overlap",
        "",
    ]
    for title, cols, rows in _sections(c):
        lines += format_table(cols, rows, title=title)
        lines.append("")
    lines.append(verdict_line(c))
    return "\n".join(lines)


def _md_cell(v: Any) -> str:
    return "" if v is None else str(v).replace("|", "\\|")


def _md_table(cols: list[str], rows: list) -> list[str]:
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(_md_cell(v) for v in r) + " |" for r in rows]
    return out


def render_markdown(c: Comparison) -> str:
    """A CI comment: the verdict in bold, then the variants and slowdowns in one table, then what
    else differs (fingerprint, unmatched), each as a short table."""
    icon = "❌" if c.regressions else "✅"
    lines = [f"{icon} **{verdict_line(c)}**", ""]
    keys = key_columns(c)
    cols, rows = figure_rows(c, [*c.variants, *c.slowdowns], keys)
    figures = [r["figure"] for r in (*c.variants, *c.slowdowns)]
    lines += _md_table(["figure", *cols], [(f, *r) for f, r in zip(figures, rows, strict=True)])
    for title, cols, rows in _sections(c):
        if title.startswith(("Variants", "Slowdowns")):
            continue
        lines += ["", f"**{title}**", ""] + _md_table(cols, rows)
    lines += [
        "",
        f"Threshold {_pct(c.threshold)}; ratio = candidate / baseline with its interval "
        "(range of run-pair ratios below 5 runs a side, else 95% bootstrap); verdict slower/faster "
        f"only beyond the threshold and when Mann-Whitney U (alpha {c.alpha:g}, 5+ runs a side) "
        "or non-overlapping ranges (fewer runs) say the sides differ.",
    ]
    return "\n".join(lines)
