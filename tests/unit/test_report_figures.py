"""The report's pure layers, without a database: formatting, figures drawn from plain row
dicts, and the HTML page of a ``ReportData`` built in Python."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from orchestrator import report
from orchestrator.report.draw import figure_png
from orchestrator.report.markup import html_table
from orchestrator.report.plots import (
    MAX_VARIANTS_ONE_PANEL,
    busbw_series_key,
    bytes_by_strategy,
    size_ticks,
    step_panels,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
VARIANT = {"offload": "none", "bucket_mb": 25, "overlap_comm": "default", "placement": "pack"}


def test_cell_formatting_follows_unit_suffixes():
    assert report.fmt_value("median_step_time_s", 0.0908) == "90.8 ms"
    assert report.fmt_value("startup_s", 4.2) == "4.20 s"
    assert report.fmt_value("samples_per_s", 58.83) == "58.83"
    assert report.fmt_value("tokens_per_s", 11283.4) == "11,283"
    assert report.fmt_value("predicted_comm_s_per_step", 0.002) == "2.00 ms"
    assert report.fmt_value("peak_mem_bytes", 9 * 10**9) == "9.00 GB"
    assert report.fmt_value("comm_bytes_per_step", 507_510_000.0) == "508 MB"
    assert report.fmt_value("throttled", True) == "yes"
    assert report.fmt_value("ci_low", None) == "–"
    assert report.fmt_msg_size(2**20) == "1 MiB" and report.fmt_msg_size(4096) == "4 KiB"
    assert report.fmt_time_ci(0.101, 0.0998, 0.103) == "101 ms [99.8–103]"


def test_seconds_and_bytes_pick_a_readable_unit():
    assert report.fmt_seconds(0.0000123) == "12.3 µs"
    assert report.fmt_seconds(1.5) == "1.50 s"
    assert report.fmt_seconds(0) == "0" and report.fmt_seconds(None) == "–"
    assert report.fmt_bytes(999) == "999 B" and report.fmt_bytes(1.5e12) == "1.50 TB"
    assert report.sig3(1234.5) == "1,234" and report.sig3(1.5) == "1.50"
    assert report.fmt_time_ci(0.101, None, None) == "101 ms"
    assert report.fmt_value("started_at", dt.datetime(2025, 1, 1, 12, tzinfo=dt.timezone.utc)) == (
        "2025-01-01 12:00:00 UTC"
    )


@pytest.mark.parametrize(
    ("draw", "reason"),
    [
        (lambda: report.plot_slowdown([], ["default"]), "No link slowdowns"),
        (lambda: report.plot_step_times([], ["default"]), "No timed steps"),
        (lambda: report.plot_bytes_per_step([]), "No communication volume"),
        (lambda: report.plot_busbw([], ["default"]), "No link microbenchmark results"),
    ],
)
def test_a_figure_without_data_is_a_reason(draw, reason):
    fig, note = draw()
    assert fig is None and note.startswith(reason)


def _sensitivity_rows() -> list[dict]:
    return [
        {
            **VARIANT,
            "strategy": strategy,
            "grad_accum": ga,
            "link": "no_p2p",
            "baseline_link": "default",
            "slowdown": slowdown,
            "ci_low": slowdown - 0.05,
            "ci_high": None if ga == 4 else slowdown + 0.05,  # a missing bound draws no bar
            "interval_kind": "bootstrap95" if strategy == "ddp" else "range",
        }
        for strategy, ga, slowdown in (("ddp", 1, 1.5), ("ddp", 4, 1.1), ("zero3", 1, 1.9))
    ]


def test_slowdown_figure_from_rows():
    fig, note = report.plot_slowdown(_sensitivity_rows(), ["default", "no_p2p"])
    assert fig is not None and "bootstrap" in note
    assert "range of the run-pair ratios (fewer than 5 runs a side" in note  # zero3's kind
    (ax,) = fig.axes
    assert ax.get_title() == "link no_p2p vs default"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "4"]
    assert figure_png(fig).startswith(PNG_MAGIC)


def _step_rows(n_variants: int) -> list[dict]:
    rows = []
    for i in range(n_variants):
        strategy = ("ddp", "zero3")[i % 2]
        for step in range(4):
            rows.append(
                {
                    **VARIANT,
                    "strategy": strategy,
                    "grad_compression": "none" if strategy == "ddp" else "n/a",
                    "powersgd_rank": 0,
                    "grad_accum": 1 + i // 4,
                    "link": ("default", "no_p2p")[(i // 2) % 2],
                    "run_id": f"r{i}",
                    "step": step,
                    "step_time_s": 0.05 * (1 + i) * (1 + 0.01 * step),
                }
            )
    return rows


def test_step_time_figure_one_panel_or_one_per_strategy():
    fig, note = report.plot_step_times(_step_rows(4), ["default", "no_p2p"])
    assert len(fig.axes) == 1 and "4 ok run(s) not flagged throttled" in note
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[0] == "ddp ga=1 default"  # strategy first, then grad_accum, then link
    n = MAX_VARIANTS_ONE_PANEL + 2
    fig, _ = report.plot_step_times(_step_rows(n), ["default", "no_p2p"])
    assert sorted(ax.get_title() for ax in fig.axes) == ["ddp", "zero3"]


def test_bytes_figure_uses_ok_runs_only():
    runs = [
        {"status": "ok", "strategy": "ddp", "offload": "none", "grad_accum": ga,
         "comm_bytes_per_step": 5e8, "expected_comm_bytes_per_step": 4.9e8}
        for ga in (1, 4)
    ] + [
        {"status": "failed", "strategy": "zero3", "offload": "none", "grad_accum": 1,
         "comm_bytes_per_step": 1e9, "expected_comm_bytes_per_step": None}
    ]  # fmt: skip
    fig, _ = report.plot_bytes_per_step(runs)
    (ax,) = fig.axes
    assert len(ax.get_lines()) == 2  # ddp measured and expected; the failed zero3 run is out
    assert all(max(line.get_ydata()) == pytest.approx(y) for line, y in zip(
        ax.get_lines(), (490.0, 500.0), strict=True))  # fmt: skip


def test_busbw_figure_one_panel_per_collective():
    rows = [
        {"link": link, "placement": "pack", "backend": "nccl", "world_size": 2,
         "collective": op, "msg_bytes": 2**k, "busbw_gbps": bw * k / 26}
        for link, bw in (("default", 40.0), ("no_p2p", 9.0))
        for op in ("all_gather", "all_reduce")
        for k in range(10, 27, 4)
    ]  # fmt: skip
    fig, _ = report.plot_busbw(rows, ["default", "no_p2p"])
    assert [ax.get_title() for ax in fig.axes] == ["all_reduce", "all_gather"]
    assert "1 MiB" in [t.get_text() for t in fig.axes[0].get_xticklabels()]


def test_step_panels_split_by_strategy_only_above_the_one_panel_limit():
    first = {("d", i): {"strategy": "ddp", "offload": "none"} for i in range(2)}
    first |= {("z", i): {"strategy": "zero3", "offload": "none"} for i in range(2)}
    keys = list(first)
    assert step_panels(keys, first) == ([(None, keys)], 1)
    many = {("d", i): {"strategy": "ddp", "offload": "none"} for i in range(MAX_VARIANTS_ONE_PANEL)}
    many[("z", 0)] = {"strategy": "zero3", "offload": "none"}
    panels, ncols = step_panels(list(many), many)
    assert ncols == 2
    assert [(title, len(ks)) for title, ks in panels] == [
        ("ddp", MAX_VARIANTS_ONE_PANEL),
        ("zero3", 1),
    ]


def test_bytes_are_grouped_by_strategy_and_grad_accum_from_ok_runs_only():
    runs = [
        {"status": "ok", "strategy": "ddp", "offload": "none", "grad_accum": 1,
         "comm_bytes_per_step": 5e8, "expected_comm_bytes_per_step": None},
        {"status": "ok", "strategy": "ddp", "offload": "none", "grad_accum": 1,
         "comm_bytes_per_step": 6e8, "expected_comm_bytes_per_step": 4.9e8},
        {"status": "failed", "strategy": "ddp", "offload": "none", "grad_accum": 4,
         "comm_bytes_per_step": 1e9, "expected_comm_bytes_per_step": 1e9},
    ]  # fmt: skip
    by = bytes_by_strategy(runs)
    assert {s: dict(g) for s, g in by.items()} == {
        "ddp": {1: {"measured": [5e8, 6e8], "expected": [4.9e8]}}
    }


def test_size_ticks_are_powers_of_two_whose_exponents_are_multiples_of_an_even_stride():
    assert size_ticks([2**10, 2**26]) == [2.0**k for k in (12, 16, 20, 24)]  # stride 4
    assert size_ticks([8, 8]) == [8.0]
    assert size_ticks([3, 5]) == [4.0]


def test_busbw_series_name_only_what_varies():
    row = {"link": "eth", "placement": "spread", "backend": "gloo", "world_size": 4}
    assert busbw_series_key(row, set()) == ("eth",)
    assert busbw_series_key(row, {"backend", "world_size"}) == ("eth", "gloo", "n=4")


def _data(**over) -> report.ReportData:
    base = {
        "sweep": {"sweep_id": "s1", "name": "unit", "status": "ok", "git_sha": "abc",
                  "git_dirty": False},
        "spec": {"model": "gpt2", "links": {"default": {}}},
        "versions": {"torch": "2.5.1"},
        "baseline_link": "default",
        "link_order": ["default"],
        "runs": [], "variants": [], "sensitivity": [], "step_times": [], "bandwidth": [],
        "bench_failures": [], "nodes": [], "gpus": [], "gpu_links": [],
    }  # fmt: skip
    return report.ReportData(**(base | over))


def test_build_figures_of_an_empty_sweep_draws_nothing():
    figures = report.build_figures(_data())
    assert [f.name for f in figures] == list(report.FIGURES)
    assert all(f.png is None and f.note for f in figures)


def test_render_html_from_rows():
    run = {
        **VARIANT, "seq": 1, "strategy": "ddp", "grad_accum": 1, "link": "default",
        "repeat": 1, "status": "failed", "error": "ValueError: boom\nTraceback ...",
        "telemetry": "absent: no NVML",
    }  # fmt: skip
    variant = {
        **VARIANT, "strategy": "ddp", "grad_accum": 1, "link": "default", "n_runs": 1,
        "n_excluded": 1, "median_step_time_s": None, "ci_low_s": None, "ci_high_s": None,
    }  # fmt: skip
    data = _data(runs=[run], variants=[variant])
    page = report.render_html(data, report.build_figures(data))
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page.lower()
    assert "linksweep report: unit (s1)" in page
    assert "1 of 1 run(s) failed" in page
    assert "<code>ValueError: boom</code>" in page and "full error" in page
    assert "Only one link (default)" in page
    assert "no ok run (0 of 1 runs)" in page
    assert "Throttling: not checked (no GPU telemetry)." in page
    assert "No topology was recorded" in page
    refs = re.findall(r"""(?:src|href)\s*=\s*['"]([^'"]*)['"]""", page)
    assert refs and all(r.startswith("#") for r in refs)  # no figure drawn, in-page links only


def test_html_table_folds_constant_columns():
    rows = [{"a": 1, "b": "x", "c": None}, {"a": 2, "b": "x", "c": None}]
    table = html_table(rows, fold=True)
    assert "same in every row: b = x" in table and "not recorded: c" in table
    assert "<th>a</th>" in table and "<th>b</th>" not in table
    assert html_table([]) == "<p class='note'>(no rows)</p>"


def test_overlap_is_named_in_labels_only_when_it_varies():
    from orchestrator.report.labels import series_key, variant_label, varying

    rows = [
        {"strategy": "zero3", "grad_accum": 1, "link": "fast", **VARIANT},
        {"strategy": "zero3", "grad_accum": 1, "link": "fast", **VARIANT, "overlap_comm": "false"},
    ]
    vary = varying(rows)
    assert vary == {"overlap_comm"}
    assert [variant_label(r, vary) for r in rows] == [
        "zero3 ga=1 overlap=default fast",
        "zero3 ga=1 overlap=false fast",
    ]
    assert series_key(rows[0], vary) != series_key(rows[1], vary)
    assert "overlap" not in variant_label(rows[0], varying(rows[:1]))


def test_strategy_tables_say_what_each_strategy_sent_and_split_ddp_by_gradient_compression():
    from orchestrator.report.labels import group_label
    from orchestrator.report.sections import classic_tables

    def variant(strategy, compression, link, sent, med):
        return {
            **VARIANT, "strategy": strategy, "grad_accum": 1, "link": link,
            "grad_compression": compression, "powersgd_rank": 0, "n_runs": 2, "n_excluded": 0,
            "median_step_time_s": med, "ci_low_s": med, "ci_high_s": med * 1.1,
            "comm_dtypes": sent,
        }  # fmt: skip

    variants = [
        variant(s, g, link, sent, med)
        for s, g, sent, med in (
            ("ddp", "none", "all_reduce fp32", 1.0),
            ("ddp", "bf16", "all_reduce bf16", 0.8),
            ("zero3", "n/a", "all_gather bf16 + reduce_scatter bf16", 1.5),
        )
        for link in ("fast", "slow")
    ]
    html = classic_tables(_data(variants=variants, link_order=["fast", "slow"]))
    ddp, zero = html.split("<h3>")[1:3]
    assert "sent all_reduce fp32 or all_reduce bf16" in ddp
    assert "<th>grad_compression</th>" in ddp and "<td>bf16</td>" in ddp and "<td>none</td>" in ddp
    assert "sent all_gather bf16 + reduce_scatter bf16" in zero and "grad_compression" not in zero
    vary = {"grad_compression"}
    assert group_label(variants[2], vary) == "ddp ga=1 compress=bf16"
    # where the compression varies, every DDP label names it (its default too); ZeRO has none
    assert group_label(variants[0], vary) == "ddp ga=1 compress=none"
    assert group_label(variants[4], vary) == "zero3 ga=1"


def test_a_time_cell_says_how_many_runs_its_figure_rests_on():
    from orchestrator.report.sections import time_cell

    v = {"n_runs": 3, "n_excluded": 0, "median_step_time_s": 0.101,
         "ci_low_s": 0.1, "ci_high_s": 0.105}  # fmt: skip
    assert time_cell(None) == "<td class='num'>not run</td>"
    assert "[" in time_cell(v) and "runs" not in time_cell(v)
    one_left = time_cell(v | {"n_excluded": 2})
    assert "(1 of 3 runs, no CI)" in one_left and "[" not in one_left
    assert "(1 run, no CI)" in time_cell(v | {"n_runs": 1})
    assert "no ok run (0 of 3 runs)" in time_cell(v | {"n_excluded": 3, "median_step_time_s": None})


def test_fixed_settings_name_what_a_strategy_table_shares():
    from orchestrator.report.sections import fixed_settings, strategy_title

    vs = [
        {**VARIANT, "strategy": "ddp", "overlap_comm": "true", "grad_compression": "bf16",
         "comm_dtypes": "all_reduce bf16"},
        {**VARIANT, "strategy": "ddp", "overlap_comm": "true", "grad_compression": "bf16",
         "comm_dtypes": None},
    ]  # fmt: skip
    # the compression is named beside the strategy (in its name), so it comes first
    assert fixed_settings(vs, set()) == [
        "bf16 gradients",
        "bucket 25 MB",
        "overlap on",
        "sent all_reduce bf16",
    ]
    assert fixed_settings(vs, {"bucket_mb", "overlap_comm", "grad_compression"}) == [
        "sent all_reduce bf16",
    ]
    # a joined axis reads as its phrase here; the default placement and overlap are not named
    zero = {**VARIANT, "strategy": "zero3", "offload": "cpu", "placement": "spread"}
    assert fixed_settings([zero], set()) == ["offload cpu", "bucket 25 MB", "placement spread"]
    assert [strategy_title(s) for s in ("ddp", "zero1", "zero3")] == ["DDP", "ZeRO-1", "ZeRO-3"]
