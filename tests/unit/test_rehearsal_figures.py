"""The one-GPU rehearsal (``ranks_per_gpu: 2``, link class ``shared-gpu``) is never shown as a
link measurement: one rule (``stats.link_measurement``) keeps its runs out of slowdowns, the
link model and the headline's link claims, and the report says what they are."""

from __future__ import annotations

import pytest

from orchestrator import report
from orchestrator.analysis.headline import build_headline, extra_vs_predicted
from orchestrator.analysis.linkmodel import fit_group, link_model_rows
from orchestrator.analysis.stats import (
    VARIANT_KEY,
    included,
    link_measurement,
    rehearsal,
    rehearsal_variants,
    variant_and_sensitivity_rows,
)
from orchestrator.report.findings import headline_html, rehearsal_html
from orchestrator.report.linkmodel_view import plot_link_model
from orchestrator.store import Q

GROUP = {"strategy": "ddp", "offload": "none", "grad_accum": 1, "bucket_mb": 25,
         "overlap_comm": "default", "grad_compression": "none", "powersgd_rank": 0,
         "placement": "pack"}  # fmt: skip
SHARED = {"link_class": "shared-gpu", "ranks_per_gpu": 2}
ONE_PER_GPU = {"link_class": "NV12", "ranks_per_gpu": 1}
COMM_S = {"default": 0.1, "no_p2p": 0.4, "no_nvls": 0.2}  # predicted comm per step, by link


def _run(link: str, med: float, seq: int = 1, **extra) -> dict:
    return GROUP | {
        "seq": seq, "link": link, "repeat": 1, "status": "ok", "throttled": False,
        "median_step_time_s": med, "peak_mem_bytes": 100, "samples_per_s": 10.0,
        "tokens_per_s": 320.0, "comm_bytes_per_step": 1000, "expected_comm_bytes_per_step": 1000,
        "predicted_comm_s_per_step": COMM_S[link], "achieved_tflops_per_gpu": None, "mfu": None,
        "backend": "nccl", "telemetry": "ok",
    } | extra  # fmt: skip


def _sweep(**extra) -> list[dict]:
    """Two repeats on each link: step = 0.5 + 1.0 x predicted comm (a clean line)."""
    return [
        _run(link, 0.5 + x + 0.01 * rep, seq=2 * i + rep, **extra)
        for i, (link, x) in enumerate(COMM_S.items())
        for rep in (0, 1)
    ]


@pytest.mark.parametrize(
    ("extra", "measures"),
    [
        (ONE_PER_GPU, True),
        ({}, True),  # a row stored before v4 (no link_class, no ranks_per_gpu): one rank per GPU
        ({"link_class": "NET", "ranks_per_gpu": None}, True),
        (SHARED, False),
        ({"link_class": "shared-gpu"}, False),  # either fact alone marks it
        ({"ranks_per_gpu": 2}, False),
        (ONE_PER_GPU | {"status": "failed"}, False),
        (ONE_PER_GPU | {"throttled": True}, False),
    ],
)
def test_link_measurement_is_included_and_not_the_rehearsal(extra, measures):
    run = _run("default", 1.0) | extra
    assert link_measurement(run) is measures
    assert rehearsal(run) is (
        run.get("link_class") == "shared-gpu" or (run.get("ranks_per_gpu") or 1) > 1
    )
    assert not link_measurement(run) or included(run)  # a stricter rule than included, never looser


def test_rehearsal_runs_get_variant_figures_but_no_slowdown():
    variants, sens = variant_and_sensitivity_rows("s", _sweep(**SHARED), "default", 0)
    assert len(variants) == 3
    assert all(v["median_step_time_s"] is not None and v["n_excluded"] == 0 for v in variants)
    assert sens == []
    # The same runs, one rank per GPU: a slowdown per non-baseline link.
    _, sens = variant_and_sensitivity_rows("s", _sweep(**ONE_PER_GPU), "default", 0)
    assert sorted(s["link"] for s in sens) == ["no_nvls", "no_p2p"]
    assert all(s["slowdown"] > 1 for s in sens)


def test_a_rehearsal_baseline_makes_no_slowdown_for_real_links_either():
    runs = [r | (SHARED if r["link"] == "default" else ONE_PER_GPU) for r in _sweep()]
    _, sens = variant_and_sensitivity_rows("s", runs, "default", 0)
    assert sens == []


def test_link_model_fits_no_line_through_rehearsal_runs():
    fit = fit_group(_sweep(**SHARED))
    assert (fit.exposure, fit.compute_s, fit.n_links) == (None, None, 0)
    assert fit.quality == "under_determined"
    assert fit.n_excluded == 6 and "one-GPU rehearsal" in fit.note
    (model,), checks = link_model_rows("s", _sweep(**SHARED))
    assert model["exposure"] is None and checks == []
    real = fit_group(_sweep(**ONE_PER_GPU))  # control: the same numbers make a line
    assert real.exposure == pytest.approx(1.0, abs=0.05) and real.quality == "ok"


def test_headline_makes_no_link_claim_from_rehearsal_runs():
    runs = _sweep(**SHARED)
    variants, sens = variant_and_sensitivity_rows("s", runs, "default", 0)
    assert build_headline(sens, variants).empty
    assert extra_vs_predicted(variants, "default", runs) == []
    assert len(extra_vs_predicted(variants, "default")) == 2  # without the runs it could not tell
    keys = rehearsal_variants(runs)
    assert keys == {tuple(v[k] for k in VARIANT_KEY) for v in variants}


def test_link_model_figure_draws_no_rehearsal_dot():
    runs = _sweep(**ONE_PER_GPU)
    runs.append(_run("default", 0.9, seq=99, predicted_comm_s_per_step=0.3, **SHARED))
    models, _ = link_model_rows("s", runs)
    fig, note = plot_link_model(runs, models, list(COMM_S))
    (ax,) = fig.axes
    dots = [
        (line.get_xdata()[0], line.get_ydata()[0]) for line in ax.lines if line.get_marker() == "o"
    ]
    assert len(dots) == 6 and (0.3, 0.9) not in dots
    assert "no one-GPU rehearsal" in note


def _data(runs: list[dict]) -> report.ReportData:
    variants, sens = variant_and_sensitivity_rows("s1", runs, "default", 0)
    return report.ReportData(
        sweep={"sweep_id": "s1", "name": "rehearsal", "status": "ok", "git_sha": "abc"},
        spec={"model": "gpt2", "links": {k: {} for k in COMM_S}, "ranks_per_gpu": 2},
        versions={}, baseline_link="default", link_order=list(COMM_S), runs=runs,
        variants=variants, sensitivity=sens, step_times=[], bandwidth=[], bench_failures=[],
        nodes=[], gpus=[{"gpu_index": 0}], gpu_links=[],
    )  # fmt: skip


def test_report_labels_the_rehearsal_and_claims_nothing_of_links():
    data = _data(_sweep(**SHARED))
    box = rehearsal_html(data)
    assert "A rehearsal of the NCCL path, not a link measurement." in box
    assert "6 of 6 run(s) placed two ranks on one GPU" in box
    assert "No link finding" in headline_html(data)
    page = report.render_html(data, [])
    top = page[page.index("<h1>") : page.index("<nav>")]
    assert "A rehearsal of the NCCL path" in top
    assert "What this sweep found" not in page
    assert "shared-gpu" in page  # every run's link class, in the runs table


def test_report_of_a_sweep_without_rehearsal_has_no_rehearsal_box():
    data = _data(_sweep(**ONE_PER_GPU))
    assert rehearsal_html(data) == ""
    assert "rehearsal" not in headline_html(data)


@pytest.mark.parametrize("query", [Q.VARIANT_GROUP_RUNS, Q.SWEEP_MODEL_RUNS])
def test_the_run_rows_figures_are_computed_from_carry_what_the_rule_reads(query):
    """A list typed twice drifts: the queries whose rows feed ``link_measurement`` select every
    column it reads, else a rehearsal would count as a link measurement without a sound."""
    for column in ("status", "throttled", "link_class", "ranks_per_gpu"):
        assert column in query.sql, (query.name, column)
