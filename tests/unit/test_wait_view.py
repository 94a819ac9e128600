"""Waiting vs moving in the report, from plain rows: the section (per variant and link, per
collective, each traced run's verdict) and the transfer and wait beside the fitted exposed time
in the measured-vs-fitted table."""

from __future__ import annotations

from orchestrator import report
from orchestrator.report.labels import VARIANT_KEY
from orchestrator.report.sections import straggler_lines
from orchestrator.report.wait_view import verdict_lines, wait_html, with_wait


def _variant(strategy: str, link: str) -> dict:
    return {k: None for k in VARIANT_KEY} | {"strategy": strategy, "grad_accum": 1, "link": link}


WAIT = [
    _variant("ddp", "slow")
    | {"sweep_id": "s1", "n_runs": 2, "exposed_s": 0.24, "waited_s": 0.01, "transfer_s": 0.23,
       "waited_low_s": 0.008, "waited_high_s": 0.012, "uncertainty_s": 1e-4,
       "predicted_comm_s": 0.22, "n_straggler_runs": 0, "straggler_ranks": None},
    _variant("fsdp", "slow")
    | {"sweep_id": "s1", "n_runs": 2, "exposed_s": 3.0, "waited_s": 0.6, "transfer_s": 2.4,
       "waited_low_s": 0.5, "waited_high_s": 0.7, "uncertainty_s": 1e-4,
       "predicted_comm_s": 2.3, "n_straggler_runs": 2, "straggler_ranks": "1"},
]  # fmt: skip
LATENESS = [
    _variant("ddp", "slow")
    | {"run_id": "a", "seq": 1, "rank": r, "instances": 2, "times_last": r, "share_last": r / 2,
       "mean_lateness_s": 1e-4, "max_lateness_s": 1e-4, "lateness_per_step_s": 5e-5 * r,
       "score": 0.001 * r, "straggler": False, "clock_offset_ns": 0, "clock_uncertainty_ns": 50000,
       "straggler_rank": None,
       "straggler_why": "no straggler: the latest rank, 1, costs the others 0.1% of a step"}
    for r in (0, 1)
] + [
    _variant("fsdp", "slow")
    | {"run_id": "b", "seq": 2, "rank": r, "instances": 64, "times_last": 2 * r,
       "share_last": r / 32, "mean_lateness_s": 0.3, "max_lateness_s": 0.31,
       "lateness_per_step_s": 0.3 * r, "score": 0.1 * r, "straggler": r == 1,
       "clock_offset_ns": 0, "clock_uncertainty_ns": 50000, "straggler_rank": 1,
       "straggler_why": "rank 1 was last in 2 of 64 collectives"}
    for r in (0, 1)
]  # fmt: skip


def test_transfer_and_wait_sit_beside_the_fitted_exposed_time():
    exposure = [_variant("fsdp", "slow") | {"measured_exposed_s": 3.0, "fitted_exposed_s": 2.5}]
    exposure.append(_variant("ddp", "fast") | {"measured_exposed_s": 0.03})  # no wait row
    rows = with_wait(exposure, WAIT)
    assert (rows[0]["measured_transfer_s"], rows[0]["measured_waited_s"]) == (2.4, 0.6)
    assert (rows[1]["measured_transfer_s"], rows[1]["measured_waited_s"]) == (None, None)


def test_one_verdict_per_run_in_run_order():
    lines = verdict_lines(LATENESS)
    assert len(lines) == 2
    assert lines[0].startswith("run 1 (ddp") and "no straggler" in lines[0]
    assert lines[1].startswith("run 2 (fsdp") and lines[1].endswith(
        "rank 1 was last in 2 of 64 collectives"
    )


def test_the_section_shows_the_split_the_collectives_and_the_verdicts():
    page = wait_html(
        WAIT, [_variant("fsdp", "slow") | {"op": "all_gather", "waited_s": 0.6}], LATENESS
    )
    assert (
        "<code>trace_wait_summary</code>" in page and "<code>trace_collective_wait</code>" in page
    )
    assert "Most waiting:" in page and "(20%) spent waiting" in page  # fsdp: 0.6 of 3.0
    assert "rank 1 was last in 2 of 64 collectives" in page
    assert "no waited/transfer rows" in wait_html([], [], []).lower()


def test_the_page_has_the_section_only_with_rows():
    base = {
        "sweep": {"sweep_id": "s1", "name": "unit"}, "spec": {}, "versions": {},
        "baseline_link": "slow", "link_order": ["slow"], "runs": [], "variants": [],
        "sensitivity": [], "step_times": [], "bandwidth": [], "bench_failures": [], "nodes": [],
        "gpus": [], "gpu_links": [],
    }  # fmt: skip
    exposure = [_variant("fsdp", "slow") | {"n_runs": 2, "measured_exposed_s": 3.0}]
    page = report.render_html(
        report.ReportData(
            **base, trace_exposure=exposure, trace_wait=WAIT, trace_lateness=LATENESS
        ),
        [],
    )
    assert "id='wait'" in page and "measured_<wbr>transfer_s" in page
    assert "id='wait'" not in report.render_html(report.ReportData(**base), [])


def test_a_named_straggler_is_a_line_to_read_with_care():
    runs = [
        {"seq": 1, "status": "ok", "straggler_rank": None},
        {"seq": 2, "status": "ok", "straggler_rank": 1},
        {"seq": 3, "status": "ok"},  # before the straggler columns
    ]
    [line] = straggler_lines(runs)
    assert line.startswith("1 traced run(s) had a straggler (rank 1)")
    assert straggler_lines(runs[:1] + runs[2:]) == []
