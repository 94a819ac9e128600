"""The report page: ``render_html(data, figures)`` -> one self-contained HTML string.

Inline CSS, figures as base64 PNG data URIs, no scripts, no fonts, no links outside the file.
Pure string functions. May import ``fmt``, ``markup``, ``sections`` of this package;
``ReportData`` and ``FigureResult`` only for typing.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING

from orchestrator.report.fmt import fmt_value
from orchestrator.report.markup import esc, html_table, missing, sorted_variants
from orchestrator.report.phases import phases_html
from orchestrator.report.sections import (
    attention,
    attention_html,
    classic_tables,
    provenance_html,
    telemetry_absent,
)

if TYPE_CHECKING:
    from orchestrator.report.data import ReportData
    from orchestrator.report.figures import FigureResult

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


def _figure_html(f: FigureResult) -> str:
    if f.png is None:
        return f"<h3>{esc(f.title)}</h3>" + missing(f.note)
    b64 = base64.b64encode(f.png).decode("ascii")
    return (
        f"<h3>{esc(f.title)}</h3><figure><img alt='{esc(f.title)}' "
        f"src='data:image/png;base64,{b64}'><figcaption>{esc(f.note)} "
        f"<code>{esc(f.name)}</code></figcaption></figure>"
    )


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
    doubts = attention(data)
    if doubts:
        box = (
            "<div class='warn'><b>Read with care</b><ul>"
            + "".join(f"<li>{esc(x)}</li>" for x in doubts)
            + "</ul></div>"
        )
    else:
        throttle = (
            "throttling not checked (no GPU telemetry)"
            if telemetry_absent(runs)
            else "none throttled"
        )
        box = f"<div class='ok'>All {len(runs)} runs ok; {throttle}; no link mismatch.</div>"

    links_env = spec.get("links") or {}
    link_lines = "".join(
        f"<li><b>{esc(name)}</b>: <code>{esc(' '.join(f'{k}={v}' for k, v in env.items()) or '(no env change)')}</code></li>"
        for name, env in links_env.items()
    )
    sections = [
        ("classic", "Time per step by link (the classic table)",
         (f"<ul class='note'>{link_lines}</ul>" if link_lines else "") + classic_tables(data)),
        ("figures", "Figures", "".join(_figure_html(f) for f in figures)),
        ("variants", "Variant summary",
         "<p class='note'>view <code>variant_summary</code>: one row per variant.</p>"
         + (html_table(sorted_variants(data.variants, data.link_order), VARIANT_COLS, fold=True)
            if data.variants
            else missing("No variants: the sweep stored no runs."))),
        ("sensitivity", "Link sensitivity",
         "<p class='note'>view <code>link_sensitivity</code>: slowdown = median step time on "
         "the link ÷ on the baseline link, 95% bootstrap interval.</p>"
         + (html_table(sorted_variants(data.sensitivity, data.link_order), SENS_COLS, fold=True)
            if data.sensitivity else missing(
             "No link sensitivity rows: there is only one link, or no variant has ok runs on "
             "both the link and the baseline."))),
        ("phases", "Where a run's seconds go", phases_html(data)),
        ("attention", "Runs needing attention", attention_html(data)),
        ("runs", "All runs",
         f"<details><summary>{len(runs)} run(s), in execution order</summary>"
         + html_table(runs, [c for c in RUN_COLS if not runs or c in runs[0]], fold=True)
         + "</details>" if runs else missing("No runs stored for this sweep.")),
        ("provenance", "Provenance", provenance_html(data)),
    ]  # fmt: skip
    nav = "".join(f"<a href='#{sid}'>{esc(t)}</a>" for sid, t, _ in sections)
    body = "".join(f"<h2 id='{sid}'>{esc(t)}</h2>{content}" for sid, t, content in sections)
    generated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>"
        f"<h1>{esc(title)}</h1><p class='meta'>{esc(meta)}</p>{box}<nav>{nav}</nav>{body}"
        f"<p class='note'>Generated {generated} by <code>linksweep report</code>. "
        "Every number here is a query away: see the views in orchestrator/store/schema.py.</p>"
        "</main></body></html>\n"
    )
