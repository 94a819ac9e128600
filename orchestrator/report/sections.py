"""The report's HTML sections: the classic link table, the runs needing attention, provenance.

Each takes ``ReportData`` (plain rows) and returns an HTML fragment. Pure string functions.
A run that failed the accumulation check (``runs.accum_check``) is a line in the "Read with
care" box and a table under the runs needing attention (``accumulation_html``); a sweep whose
runs all passed gets neither.
May import: reading, accumulation, findings, fmt, labels, markup,
orchestrator.analysis.flavours.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from orchestrator.analysis.flavours import GA, LINK, STRATEGY, fixed_words
from orchestrator.analysis.flavours import title as strategy_title
from orchestrator.report.accumulation import accumulation_failures, accumulation_lines
from orchestrator.report.findings import interval_note, interval_words, labelled, throttling
from orchestrator.report.fmt import first_text_line, fmt_time_ci, fmt_value
from orchestrator.report.labels import (
    GROUP_KEY,
    VARIANT_KEY,
    variant_label,
    variant_sort_key,
    varying,
)
from orchestrator.report.markup import esc, html_table, missing

if TYPE_CHECKING:
    from orchestrator.report.reading import ReportData


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
    return f"<td class='{cls}'>{s['slowdown']:.2f}×{esc(interval)}</td>"


ROW_COLUMNS = tuple(k for k in GROUP_KEY if k not in (STRATEGY, GA))
"""The variant columns that name a classic table's row (beside grad_accum) when they vary:
every key of the group but the strategy (the table's) and grad_accum (a column of its own)."""


def _row_key(row: dict) -> tuple:
    return tuple(row.get(k) for k in ROW_COLUMNS)


def classic_tables(data: ReportData) -> str:
    """The perf_hardware table ("NVLink Y: 101 s / N: 131 s"), per step and with intervals.

    One table per strategy, in the catalog's order (DDP first: the page measured DDP; its claim
    is about ZeRO). Rows: grad_accum (and each other key that varies: offload, bucket, a
    flavour, placement, ...); columns: step time on each link, then each link's ratio to the
    baseline.
    """
    if not data.variants:
        return missing("No variant figures: the sweep stored no runs.")
    links = [x for x in data.link_order if any(v[LINK] == x for v in data.variants)]
    sens = {(s[STRATEGY], _row_key(s), s[GA], s[LINK]): s for s in data.sensitivity}
    strategies = list(dict.fromkeys(v[STRATEGY] for v in sorted(data.variants, key=_display_order)))
    out = []
    if len(links) < 2:
        out.append(
            missing(
                f"Only one link ({', '.join(links) or 'none'}) was measured, so there is no "
                'link comparison: add a second link (e.g. no_p2p: {NCCL_P2P_DISABLE: "1"}).'
            )
        )
    out += [_strategy_table(data, strategy, links, sens) for strategy in strategies]
    out.append(
        "<p class='note'>Time per optimizer step: median over repeats of each run's median step "
        "(slowest rank, warmup excluded). "
        + esc(interval_note())
        + " Ratios in red: the interval lies above 1 (the link is slower beyond the spread); "
        "green: below 1. Failed and throttled runs are excluded and counted.</p>"
    )
    return "".join(out)


def _display_order(row: dict) -> tuple:
    return variant_sort_key(row, [])


def _strategy_table(data: ReportData, strategy: str, links: list[str], sens: dict) -> str:
    """One strategy's classic table: a row per (its varying keys, grad_accum), a time column
    per link, a ratio column per link other than the baseline."""
    base = data.baseline_link
    vs = sorted((v for v in data.variants if v[STRATEGY] == strategy), key=_display_order)
    vary = varying(vs, ROW_COLUMNS)
    first: dict[tuple, dict] = {}  # a row of the table per (row key, grad_accum), in order
    for v in vs:
        first.setdefault((_row_key(v), v[GA]), v)
    cells = {(_row_key(v), v[GA], v[LINK]): v for v in vs}
    shown = [c for c in ROW_COLUMNS if c in vary]
    brackets = interval_words(vs)
    head = [
        *shown,
        "grad_accum",
        *(
            f"{labelled(data, x)}{' (baseline)' if x == base else ''}: time / step [{brackets}]"
            for x in links
        ),
        *(f"{x} ÷ {base}" for x in links if x != base),
    ]
    trs = [_classic_row(strategy, v, shown, links, base, cells, sens) for v in first.values()]
    ths = "".join(f"<th>{esc(h)}</th>" for h in head)
    fixed = fixed_settings(vs, vary)
    sub = f" <small>({esc(', '.join(fixed))})</small>" if fixed else ""
    return (
        f"<h3>{esc(strategy_title(strategy))}{sub}</h3><div class='scroll'><table class='classic'>"
        f"<thead><tr>{ths}</tr></thead><tbody>{''.join(trs)}</tbody></table></div>"
    )


def _classic_row(
    strategy: str,
    v: dict,
    shown: list[str],
    links: list[str],
    base: str | None,
    cells: dict[tuple, dict],
    sens: dict,
) -> str:
    """One row (``v``: its first variant): its varying columns, grad_accum, the time on each
    link, the ratio of each link other than the baseline (uncoloured, "no CI", where a side
    rests on a single run)."""
    key, ga = _row_key(v), v[GA]
    tds = [f"<td>{esc(v.get(c))}</td>" for c in shown]
    tds.append(f"<td class='num'>{ga}</td>")
    tds += [time_cell(cells.get((key, ga, x))) for x in links]
    for x in links:
        if x == base:
            continue
        pair = [cells.get((key, ga, y)) for y in (x, base)]
        single = any(p is not None and _usable_runs(p) < 2 for p in pair)
        tds.append(_ratio_cell(sens.get((strategy, key, ga, x)), single))
    return f"<tr>{''.join(tds)}</tr>"


def _usable_runs(v: dict) -> int:
    """A variant's runs that count: ok and not throttled."""
    return (v.get("n_runs") or 0) - (v.get("n_excluded") or 0)


def time_cell(v: dict | None) -> str:
    """A variant's median time per step with its interval and, where runs were excluded or one
    run is left, how many it rests on; ``not run`` where the variant has no figures."""
    if v is None:
        return "<td class='num'>not run</td>"
    used = _usable_runs(v)
    med = v["median_step_time_s"]
    # one run has no spread to bootstrap: say so rather than print [x–x]
    text = fmt_time_ci(med, *((None, None) if used < 2 else (v["ci_low_s"], v["ci_high_s"])))
    notes = [f"{used} of {v['n_runs']} runs"] if v.get("n_excluded") else []
    if used == 1:
        notes.append("1 run, no CI" if not notes else "no CI")
    if med is None:
        text, notes = "no ok run", notes[:1]
    if notes:
        text += f" ({', '.join(notes)})"
    return f"<td class='num'>{esc(text)}</td>"


def fixed_settings(vs: list[dict], vary: set[str]) -> list[str]:
    """What every variant of a strategy's table shares, worth a word under its title: each key
    that does not vary and applies, where the strategy's name would name it or it is not the
    strategy's default (``flavours.fixed_words``: ``offload cpu``, ``bucket 25 MB``, ``overlap
    off``, ``bf16 gradients``, ``reshard``, ``sync each``), then what it sent (by collective and
    dtype: bf16 DDP and bf16 ZeRO differ)."""
    fixed = fixed_words(vs[0], vary)
    sent = dict.fromkeys(v["comm_dtypes"] for v in vs if v.get("comm_dtypes"))
    fixed += [f"sent {' or '.join(sent)}"] if sent else []
    return fixed


def attention(data: ReportData) -> list[str]:
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
    lines += [x.strip() for x in accumulation_lines(runs)]
    lines += straggler_lines(runs)
    return lines


def straggler_lines(runs: list[dict]) -> list[str]:
    """A line where the traces named a straggler in some runs (``runs.straggler_rank``): their
    step times hold the others' wait for it, not the link alone."""
    named = [r for r in runs if r.get("straggler_rank") is not None]
    if not named:
        return []
    ranks = sorted({r["straggler_rank"] for r in named})
    return [
        f"{len(named)} traced run(s) had a straggler (rank {', '.join(map(str, ranks))}): the "
        "other ranks waited for it, so those runs' step times hold the wait as well as the "
        "link (section: waiting for peers vs moving bytes)."
    ]


def _run_list(rows: list[dict], cols: Sequence[str], empty: str) -> str:
    return html_table(rows, cols) if rows else f"<p class='note'>{esc(empty)}</p>"


def key_columns(runs: list[dict]) -> list[str]:
    """The variant-key columns of a list of runs: strategy, grad_accum and link always, and
    every other key that varies among the sweep's runs, in variant-key order."""
    shown = varying(runs) | {STRATEGY, GA, LINK}
    return [k for k in VARIANT_KEY if k in shown]


def attention_html(data: ReportData) -> str:
    runs = data.runs
    no_throttle = f"Throttling: {throttling(runs)}."
    keys = key_columns(runs)
    parts = [
        "<h3>Failed runs</h3>",
        _failed_runs_html(runs),
        "<h3>Throttled runs</h3>",
        _run_list(
            [r for r in runs if r.get("throttled")],
            ("seq", *keys, "repeat", "max_temp_c", "mean_power_w", "min_sm_clock_mhz",
             "telemetry"),
            no_throttle,
        ),
        "<h3>Link-mismatch runs</h3>",
        _run_list(
            [r for r in runs if r.get("link_check") == "mismatch"],
            ("seq", *keys, "link_env", "link_class", "effective_transport", "nccl_version"),
            "No run with link_check = mismatch.",
        ),
    ]  # fmt: skip
    if data.bench_failures:
        parts += [
            "<h3>Link microbenchmark ops that did not run ok</h3>",
            html_table(data.bench_failures),
        ]
    parts.append(accumulation_html(runs))
    return "".join(parts)


def accumulation_html(runs: list[dict]) -> str:
    """The runs that failed the accumulation check, one row per variant and verdict: what their
    non-final micro-batches sent against what the strategy and its grad_sync promise (bytes by
    op per optimizer step, rank 0). Empty when none failed."""
    failures = accumulation_failures(runs)
    if not failures:
        return ""
    trs = "".join(
        f"<tr><td>{esc(f.variant)}</td><td class='num'>{f.grad_accum}</td>"
        f"<td>{esc(', '.join(f.links))}</td><td>{esc(f.detail)}</td>"
        f"<td><code>{esc(', '.join(f.run_ids))}</code></td></tr>"
        for f in failures
    )
    return (
        "<h3>Accumulation check failures</h3><p class='note'>Column <code>accum_check</code>: "
        "per optimizer step, the bytes by collective that the non-final micro-batches of an "
        "accumulation window sent (<code>non_final_bytes</code>) against what the strategy and "
        "its grad_sync promise (<code>promised_non_final_bytes</code>). A failed run does not "
        "measure the flavour it is named for.</p><div class='scroll'><table><thead><tr>"
        "<th>strategy (flavour)</th><th>grad_accum</th><th>link</th>"
        "<th>sent vs promised (non-final micro-batches)</th><th>run ids</th></tr></thead>"
        f"<tbody>{trs}</tbody></table></div>"
    )


def _failed_runs_html(runs: list[dict]) -> str:
    failed = [r for r in runs if r.get("status") != "ok"]
    if not failed:
        return "<p class='note'>No run failed.</p>"
    vary = varying(runs)
    trs = []
    for r in failed:
        err = (r.get("error") or "").strip()
        line = first_text_line(err) or "(no error text stored)"
        full = (
            f"<details><summary>full error</summary><pre>{esc(err)}</pre></details>"
            if err and err != line
            else ""
        )
        trs.append(
            f"<tr><td class='num'>{esc(r.get('seq'))}</td>"
            f"<td>{esc(variant_label(r, vary))}</td>"
            f"<td class='num'>{esc(r.get('repeat'))}</td><td>{esc(r.get('status'))}</td>"
            f"<td><code>{esc(line)}</code>{full}</td></tr>"
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
    head = "".join(f"<th>{esc(g)}</th>" for g in gpus)
    trs = "".join(
        f"<tr><th>{esc(a)}</th>"
        + "".join(f"<td>{esc('X' if a == b else cell.get((a, b), '–'))}</td>" for b in gpus)
        + "</tr>"
        for a in gpus
    )
    return f"<table><thead><tr><th></th>{head}</tr></thead><tbody>{trs}</tbody></table>"


def _natural(s: str) -> tuple:
    digits = "".join(ch for ch in str(s) if ch.isdigit())
    return (str(s).rstrip("0123456789"), int(digits) if digits else -1, str(s))


def provenance_html(data: ReportData) -> str:
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
    parts += [f"<dt>{esc(k)}</dt><dd>{esc('–' if v is None else v)}</dd>" for k, v in kv]
    parts.append("</dl>")
    parts.append("<h3>Versions</h3>")
    parts.append(
        html_table([{"package": k, "version": v} for k, v in sorted(data.versions.items())])
        if data.versions
        else missing("No versions were recorded for this sweep.")
    )
    parts.append(
        "<h3>Sweep file (spec)</h3><details><summary>show the validated spec</summary>"
        f"<pre>{esc(json.dumps(data.spec, indent=2, sort_keys=False))}</pre></details>"
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
        else missing("No runs stored for this sweep.")
    )
    parts.append("<h3>Topology</h3>")
    if not data.nodes:
        parts.append(missing("No topology was recorded for this sweep (nodes table is empty)."))
    else:
        cols = [c for c in data.nodes[0] if c not in ("sweep_id", "topo_text")]
        parts.append(html_table(data.nodes, cols, fold=len(data.nodes) > 2))
        for n in data.nodes:
            links = [r for r in data.gpu_links if r["node"] == n["node"]]
            parts.append(f"<p><b>{esc(n['node'])}</b></p>")
            if links:
                parts.append(_link_matrix(links))
            if n.get("topo_text"):
                parts.append(
                    "<details><summary>nvidia-smi topo -m</summary>"
                    f"<pre>{esc(n['topo_text'])}</pre></details>"
                )
            if not links and not n.get("topo_text"):
                parts.append("<p class='note'>No GPU topology on this node.</p>")
    if data.gpus:
        cols = [c for c in data.gpus[0] if c != "sweep_id"]
        parts.append("<h3>GPUs</h3>" + html_table(data.gpus, cols, fold=True))
    else:
        parts.append("<p class='note'>No GPUs were inventoried (CPU-only, or NVML absent).</p>")
    return "".join(parts)
