"""The report page: ``render_html(data, figures)`` -> one self-contained HTML string.

Inline CSS, figures as base64 PNG data URIs, no scripts, no fonts, no links outside the file.
Pure string functions.

May import: predicted, reading, figures, findings, fmt, labels, linkmodel_view, markup,
nccltests_view, phases, sections, wait_view.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING

from orchestrator.report.findings import (
    caveats_html,
    extra_rows,
    headline_html,
    interval_note,
    interval_words,
    links_html,
    rehearsal_html,
    throttling,
)
from orchestrator.report.fmt import fmt_value
from orchestrator.report.labels import VARIANT_KEY
from orchestrator.report.linkmodel_view import link_model_html
from orchestrator.report.markup import esc, html_table, missing, sorted_variants
from orchestrator.report.nccltests_view import beside_html
from orchestrator.report.phases import phases_html
from orchestrator.report.predicted import extra_vs_predicted_html
from orchestrator.report.sections import (
    attention,
    attention_html,
    classic_tables,
    provenance_html,
)
from orchestrator.report.wait_view import wait_html, with_wait

if TYPE_CHECKING:
    from orchestrator.report.figures import FigureResult
    from orchestrator.report.reading import ReportData

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
.headline { background: #eef4fc; border-left: 4px solid #2457a6; padding: 4px 16px 8px;
            margin: 12px 0; }
.headline h2 { border: 0; margin: 8px 0 6px; padding: 0; }
.headline p { margin: 6px 0; max-width: 1080px; font-size: 15.5px; }
.headline caption { caption-side: top; text-align: left; color: #4a5568; font-size: 13.5px; }
.caveat { background: #fff4e0; border-left: 4px solid #dd8a00; padding: 8px 14px;
          margin: 10px 0; max-width: 1080px; }
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
    *VARIANT_KEY, "n_runs", "n_excluded", "median_step_time_s", "ci_low_s", "ci_high_s", "interval_kind",
    "samples_per_s",
    "tokens_per_s", "comm_bytes_per_step", "expected_comm_bytes_per_step",
    "predicted_comm_s_per_step", "peak_mem_bytes", "achieved_tflops_per_gpu", "mfu",
)  # fmt: skip
SENS_COLS = (
    *VARIANT_KEY, "baseline_link", "slowdown", "ci_low", "ci_high", "interval_kind",
)  # fmt: skip
RUN_COLS = (
    "seq", *VARIANT_KEY, "repeat", "status", "n_steps", "median_step_time_s", "startup_s",
    "link_class", "effective_transport", "link_check", "throttled", "max_temp_c", "min_sm_clock_mhz",
    "comm_bytes_per_step", "peak_mem_bytes", "achieved_tflops_per_gpu", "mfu", "peak_source",
    "accum_check",
)  # fmt: skip


def _meta_line(data: ReportData) -> str:
    """The line under the title: when, status, the model and shape, the baseline, runs ok, git."""
    s, spec, runs = data.sweep, data.spec, data.runs
    n_ok = sum(1 for r in runs if r.get("status") == "ok")
    return (
        f"{fmt_value('started_at', s.get('started_at'))} · status {s.get('status') or '–'} · "
        f"model {spec.get('model', '–')} · {spec.get('precision', '–')} · world_size "
        f"{spec.get('world_size', '–')} · seq_len {spec.get('seq_len', '–')} · micro_batch "
        f"{spec.get('micro_batch_size', '–')} · {spec.get('steps', '–')} timed + "
        f"{spec.get('warmup_steps', '–')} warmup steps · baseline link "
        f"{data.baseline_link or '–'} · runs: {n_ok} ok of {len(runs)}"
        f" · git {(s.get('git_sha') or '–')[:12]}{' (dirty)' if s.get('git_dirty') else ''}"
    )


def _attention_box(data: ReportData) -> str:
    """What to read with care, or that every run was ok."""
    doubts = attention(data)
    if doubts:
        return (
            "<div class='warn'><b>Read with care</b><ul>"
            + "".join(f"<li>{esc(x)}</li>" for x in doubts)
            + "</ul></div>"
        )
    return (
        f"<div class='ok'>All {len(data.runs)} runs ok; throttling {throttling(data.runs)}; "
        "no link mismatch.</div>"
    )


TRACE_COLS = (
    *VARIANT_KEY, "n_runs", "measured_exposed_s", "measured_low_s", "measured_high_s",
    "measured_comm_s", "predicted_comm_s", "fitted_exposure", "fitted_exposed_s",
    "fitted_low_s", "fitted_high_s", "measured_transfer_s", "measured_waited_s", "diff_s",
    "fit_quality",
)  # fmt: skip
TRACE_NOTE = (
    "<p class='note'>view <code>trace_exposure</code>: exposed communication per step measured "
    "from the traced steps (per step the slowest rank's communication that no compute covered, "
    "median over steps, median and range over runs; rules in docs/trace-overlap.md) beside the "
    "link model's fitted exposure x the communication time it predicts on the link, and beside "
    "that the measured exposed time's two parts: the transfer (the link moving bytes, what the "
    "fit prices) and the wait for a slower rank (what no link model predicts; section "
    "<a href='#wait'>waiting vs moving</a>). The "
    "traced steps ran after the timed ones and are in no step-time figure; "
    "<code>runs.trace_overhead</code> says what the profiler cost. Drawn per rank in "
    "<code>trace_timeline.png</code>.</p>"
)


COLLECTIVE_COLS = (
    *VARIANT_KEY, "issued_op", "ran_as",
    "group_size", "per_step_n", "per_step_msg_bytes", "busy_s", "exposed_s", "exposed_low_s",
    "exposed_high_s",
)  # fmt: skip
COLLECTIVE_NOTE = (
    "<p class='note'>view <code>trace_collective_exposure</code>: the same traced steps, per "
    "collective: what the strategy called (<code>issued_op</code>), what the transport ran "
    "(gloo runs a reduce_scatter as an all_reduce; NCCL an all_to_all as SendRecv kernels), "
    "bytes and group size from the collective recorder. Two collectives can run at once, so "
    "their busy times can add up to more than the step's communication.</p>"
)


def _traces_html(data: ReportData) -> str:
    rows = with_wait(data.trace_exposure, data.trace_wait)
    out = TRACE_NOTE + html_table(rows, TRACE_COLS, fold=True)
    if data.trace_collectives:
        out += COLLECTIVE_NOTE + html_table(data.trace_collectives, COLLECTIVE_COLS, fold=True)
    return out


def _report_sections(
    data: ReportData,
    figures: Sequence[FigureResult],
    extra_sections: Sequence[tuple[str, str, str]],
) -> list[tuple[str, str, str]]:
    """(id, title, HTML) of every section, in page order."""
    runs = data.runs
    beside = beside_html(data)  # empty unless nccl-tests output was imported into the sweep
    return [
        ("links", "Links: what each one is, rated and measured", links_html(data)
         or missing("The sweep file names no links.")),
        *extra_sections,
        ("classic", "Time per step by link (the classic table)", classic_tables(data)),
        ("predicted", "Measured extra step time vs predicted communication time",
         "<p class='note'>Per variant: how much longer a step takes on the link than on the "
         "baseline (medians), next to how much longer its communication should take at the "
         "link's measured bandwidth. Also drawn in <code>extra_vs_predicted.png</code>.</p>"
         + extra_vs_predicted_html(extra_rows(data))),
        ("figures", "Figures", "".join(_figure_html(f) for f in figures)),
        *([("nccltests", "nccl-tests beside linksweep's busbw", beside)] if beside else []),
        ("variants", "Variant summary",
         "<p class='note'>view <code>variant_summary</code>: one row per variant. ci_low_s, "
         f"ci_high_s: {esc(interval_words(data.variants))}. {esc(interval_note())}</p>"
         + (html_table(sorted_variants(data.variants, data.link_order), VARIANT_COLS, fold=True)
            if data.variants
            else missing("No variants: the sweep stored no runs."))),
        ("sensitivity", "Link sensitivity",
         "<p class='note'>view <code>link_sensitivity</code>: slowdown = median step time on "
         "the link ÷ on the baseline link; ci_low, ci_high: "
         f"{esc(interval_words(data.sensitivity))} (column interval_kind).</p>"
         + (html_table(sorted_variants(data.sensitivity, data.link_order), SENS_COLS, fold=True)
            if data.sensitivity else missing(
             "No link sensitivity rows: there is only one link, or no variant has ok runs on "
             "both the link and the baseline."))),
        ("linkmodel", "Link model (exposure)",
         link_model_html(data.link_model, data.link_model_check)),
        *([("traces", "Measured overlap (traced steps) beside the link model",
            _traces_html(data))]
          if data.trace_exposure else []),
        *([("wait", "Waiting for peers vs moving bytes (traced steps)",
            wait_html(data.trace_wait, data.trace_collective_wait, data.trace_lateness))]
          if data.trace_wait or data.trace_lateness else []),
        ("phases", "Where a run's seconds go", phases_html(data)),
        ("attention", "Runs needing attention", attention_html(data)),
        ("runs", "All runs",
         f"<details><summary>{len(runs)} run(s), in execution order</summary>"
         + html_table(runs, [c for c in RUN_COLS if not runs or c in runs[0]], fold=True)
         + "</details>" if runs else missing("No runs stored for this sweep.")),
        ("provenance", "Provenance", provenance_html(data)),
    ]  # fmt: skip


def render_html(
    data: ReportData,
    figures: Sequence[FigureResult],
    extra_sections: Sequence[tuple[str, str, str]] = (),
) -> str:
    """The whole report as one self-contained HTML string. ``extra_sections``: (id, title,
    HTML) placed after the links, e.g. "Compared with baseline" (``report --baseline``)."""
    s = data.sweep
    title = f"linksweep report: {s.get('name') or ''} ({s.get('sweep_id')})"
    sections = _report_sections(data, figures, extra_sections)
    nav = "".join(f"<a href='#{sid}'>{esc(t)}</a>" for sid, t, _ in sections)
    body = "".join(f"<h2 id='{sid}'>{esc(t)}</h2>{content}" for sid, t, content in sections)
    generated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>"
        f"<h1>{esc(title)}</h1><p class='meta'>{esc(_meta_line(data))}</p>{headline_html(data)}"
        f"{caveats_html(data)}{rehearsal_html(data)}{_attention_box(data)}<nav>{nav}</nav>{body}"
        f"<p class='note'>Generated {generated} by <code>linksweep report</code>. "
        "Every number here is a query away: see the views in docs/schema.md.</p>"
        "</main></body></html>\n"
    )
