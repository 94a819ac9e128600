"""Unit tests for orchestrator.analysis.linkmodel: the fit on synthetic runs with known compute_s and
exposure, the bootstrap intervals, leave-one-link-out, degenerate input, the projection."""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.analysis.linkmodel import (
    QUALITIES,
    LinkPoint,
    bracket,
    extrapolation,
    fit_group,
    fit_points,
    link_model_rows,
    parse_bandwidths,
    project,
    project_sweep,
)
from orchestrator.analysis.stats import GROUP_KEY
from orchestrator.sweep.planner import Variant

# ZeRO-3 at grad_accum 8, bucket 25 MB, spread; every other key column as the planner stores it
GROUP = {
    k: v for k, v in Variant("zero3", 8, "-", "spread", bucket_mb=25).axes.items() if k != "link"
}
COMM_S = {"r50": 4.0, "r100": 2.0, "r300": 0.667, "r1g": 0.2}  # predicted comm per step


def _runs(compute_s, exposure, noise=0.0, repeats=3, comm=COMM_S, seed=1, **extra):
    """Synthetic run rows: step = compute + exposure x comm, times (1 + noise x N(0,1))."""
    rng = np.random.default_rng(seed)
    out = []
    for link, x in comm.items():
        for _ in range(repeats):
            x_run = x * (1 + 0.01 * noise * rng.standard_normal())
            y = (compute_s + exposure * x) * (1 + noise * rng.standard_normal())
            out.append(GROUP | {"link": link, "status": "ok", "throttled": False,
                                "median_step_time_s": y, "predicted_comm_s_per_step": x_run}
                       | extra)  # fmt: skip
    return out


def test_exact_data_recovers_compute_and_exposure():
    fit = fit_group(_runs(0.5, 0.8))
    assert fit.compute_s == pytest.approx(0.5)
    assert fit.exposure == pytest.approx(0.8)
    assert fit.residual_s == pytest.approx(0.0, abs=1e-12)
    assert (fit.quality, fit.n_links, fit.n_runs, fit.n_excluded) == ("ok", 4, 12, 0)
    assert fit.exposure_ci == pytest.approx((0.8, 0.8))


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
@pytest.mark.parametrize(("compute_s", "exposure"), [(0.3, 1.0), (1.2, 0.35), (0.05, 0.6)])
def test_noisy_data_is_recovered_within_the_intervals(compute_s, exposure, seed):
    fit = fit_group(_runs(compute_s, exposure, noise=0.02, repeats=5, seed=seed), seed=seed)
    lo, hi = fit.exposure_ci
    assert lo <= exposure <= hi
    assert lo < fit.exposure < hi  # noisy data: a real interval, not a point
    clo, chi = fit.compute_ci
    assert clo <= compute_s <= chi
    assert fit.quality == "ok"


def test_intervals_are_reproducible_and_widen_with_noise():
    quiet = fit_group(_runs(0.5, 0.8, noise=0.01, repeats=4))
    again = fit_group(_runs(0.5, 0.8, noise=0.01, repeats=4))
    noisy = fit_group(_runs(0.5, 0.8, noise=0.05, repeats=4))
    assert quiet.exposure_ci == again.exposure_ci
    width = lambda f: f.exposure_ci[1] - f.exposure_ci[0]  # noqa: E731
    assert width(noisy) > 2 * width(quiet)


def test_hidden_communication_gives_exposure_zero_not_negative():
    # Step time falls as the link gets slower (noise): constrained to exposure 0.
    runs = _runs(1.0, 0.0)
    for r in runs:
        r["median_step_time_s"] -= 0.01 * r["predicted_comm_s_per_step"]
    fit = fit_group(runs)
    assert fit.exposure == 0.0
    assert fit.compute_s == pytest.approx(np.mean([1 - 0.01 * x for x in COMM_S.values()]))
    assert "clamped" in fit.note


def test_one_link_is_under_determined_without_exception():
    fit = fit_group(_runs(0.5, 0.8, comm={"r100": 2.0}))
    assert (fit.quality, fit.compute_s, fit.exposure, fit.n_links) == (
        "under_determined", None, None, 1)  # fmt: skip
    assert "needs 2" in fit.note


def test_zero_communication_is_flagged():
    fit = fit_group(_runs(0.5, 0.8, comm={"a": 0.0, "b": 0.0}))
    assert fit.quality == "no_communication"
    assert fit.exposure is None
    assert fit.compute_s == pytest.approx(0.5)


def test_same_prediction_on_every_link_is_under_determined():
    fit = fit_group(_runs(0.5, 0.8, comm={"a": 1.0, "b": 1.0}))
    assert fit.quality == "under_determined" and "same communication" in fit.note


def test_no_link_microbenchmark_is_flagged():
    runs = _runs(0.5, 0.8)
    for r in runs:
        r["predicted_comm_s_per_step"] = None
    fit = fit_group(runs)
    assert fit.quality == "no_prediction" and "linkbench" in fit.note


def test_failed_and_throttled_runs_are_excluded_and_counted():
    runs = _runs(0.5, 0.8)
    runs[0] |= {"status": "failed", "median_step_time_s": None}
    runs[4] |= {"throttled": True, "median_step_time_s": 99.0}  # would wreck the fit
    fit = fit_group(runs)
    assert (fit.n_runs, fit.n_excluded, fit.quality) == (12, 2, "runs_excluded")
    assert fit.exposure == pytest.approx(0.8)
    assert "2 run(s) excluded" in fit.note


def test_all_runs_of_a_link_failed_leaves_the_others():
    runs = [r | {"status": "failed", "median_step_time_s": None} if r["link"] == "r50" else r
            for r in _runs(0.5, 0.8)]  # fmt: skip
    fit = fit_group(runs)
    assert fit.n_links == 3 and fit.exposure == pytest.approx(0.8)


def test_a_curved_relation_is_a_poor_fit():
    # Overlap hides a fixed 1.5 s: step = 1 + max(0, comm - 1.5): a hinge, not a line.
    pts = [LinkPoint(k, (x,), (1 + max(0.0, x - 1.5),)) for k, x in COMM_S.items()]
    fit = fit_points(pts)
    assert fit.quality == "poor_fit" and fit.residual_rel > 0.10


def test_quality_names_are_the_documented_ones():
    assert {fit_group(r).quality for r in (_runs(1, 1), _runs(1, 1, comm={"a": 1}))} <= set(
        QUALITIES
    )


def test_link_model_rows_and_leave_one_link_out():
    runs = _runs(0.5, 0.8)
    runs[-1]["median_step_time_s"] *= 1.2  # one r1g run off: the median moves
    model, check = link_model_rows("s1", runs)
    (m,) = model
    assert {k: m[k] for k in GROUP_KEY} == GROUP and m["sweep_id"] == "s1"
    assert m["n_links"] == 4 and m["exposure"] == pytest.approx(0.8, rel=0.05)
    assert [c["link"] for c in check] == ["r1g", "r300", "r100", "r50"]  # by predicted comm
    for c in check:
        assert c["n_links_fit"] == 3
        assert c["rel_error"] == pytest.approx(
            (c["predicted_step_s"] - c["measured_step_s"]) / c["measured_step_s"])  # fmt: skip
    # Exact data: every left-out link is predicted exactly by the other three.
    _, exact = link_model_rows("s1", _runs(0.5, 0.8))
    assert all(abs(c["rel_error"]) < 1e-9 for c in exact)


def test_leave_one_out_with_two_links_has_no_prediction():
    _, check = link_model_rows("s1", _runs(0.5, 0.8, comm={"a": 1.0, "b": 2.0}))
    assert [c["predicted_step_s"] for c in check] == [None, None]
    assert link_model_rows("s1", []) == ([], [])


def test_extrapolation_is_the_ratio_outside_the_fitted_range():
    pts = [LinkPoint("a", (1.0,), (2.0,)), LinkPoint("b", (2.0,), (3.0,))]
    assert extrapolation(pts, 1.5) == extrapolation(pts, 1.0) == extrapolation(pts, 2.0) == 1.0
    assert extrapolation(pts, 8.0) == pytest.approx(4.0)  # four times slower than the slowest
    assert extrapolation(pts, 0.25) == pytest.approx(4.0)  # four times faster than the fastest


def test_the_bracket_is_what_monotonicity_allows_widened_by_the_runs_spread():
    pts = [LinkPoint("fast", (1.0, 1.0), (2.0, 2.2)), LinkPoint("slow", (2.0, 2.0), (3.0, 3.1))]
    noise = 0.2  # the largest spread of one link's runs
    assert bracket(pts, 1.5, 0.5) == pytest.approx((2.0 - noise, 3.1 + noise))  # between them
    # Slower than both: at least the slowest link's runs, at most that plus the extra
    # communication fully exposed (the exposure's upper bound where it is above 1).
    assert bracket(pts, 4.0, 0.5) == pytest.approx((3.0 - noise, 3.1 + noise + 2.0))
    assert bracket(pts, 4.0, 1.5) == pytest.approx((3.0 - noise, 3.1 + noise + 3.0))
    # Faster than both: at most the fastest link's runs; nothing measured bounds it from below.
    assert bracket(pts, 0.5, 0.5) == pytest.approx((0.0, 2.2 + noise))


def test_a_link_measured_once_brings_its_runs_own_step_spread():
    """One run per link shows no spread between runs; its steps' p10 to p90 is the noise then."""
    runs = [GROUP | {"link": k, "status": "ok", "throttled": False, "median_step_time_s": y,
                     "predicted_comm_s_per_step": x, "p10_step_time_s": y - 0.05,
                     "p90_step_time_s": y + 0.25}
            for k, x, y in (("a", 1.0, 2.0), ("b", 2.0, 3.0))]  # fmt: skip
    from orchestrator.analysis.linkmodel import link_points

    points, _, _ = link_points(runs)
    assert [p.spread_s for p in points] == [pytest.approx((0.3,)), pytest.approx((0.3,))]
    assert bracket(points, 1.5, 0.5) == pytest.approx((2.0 - 0.3, 3.0 + 0.3))
    assert bracket([LinkPoint("a", (1.0,), (2.0,))], 1.0, 0.5) == (2.0, 2.0)  # none stored: 0


def test_two_close_noisy_links_extrapolated_far_say_so_and_the_interval_covers_the_truth():
    """What a loaded 2-core machine did to ZeRO-3: two close links whose medians noise pushed
    apart the wrong way gave a slope ten times too steep, and the link four times slower was
    predicted +950%. The prediction is still that far off (a line is a line), but it says it
    extrapolates and its interval holds the measured step time."""
    compute_s, exposure = 1.0, 0.5
    truth = {"r2g": 0.5, "r1g": 1.0, "s500": 4.0}  # predicted comm per step
    runs = []
    for link, x, bump in (("r2g", 0.5, -0.12), ("r1g", 1.0, 0.12), ("s500", 4.0, 0.0)):
        for k in (-0.01, 0.0, 0.01):
            y = compute_s + exposure * x + bump + k
            runs.append(GROUP | {"link": link, "status": "ok", "throttled": False,
                                 "median_step_time_s": y, "predicted_comm_s_per_step": x})  # fmt: skip
    _, check = link_model_rows("s1", runs)
    by_link = {c["link"]: c for c in check}
    far = by_link["s500"]
    assert far["extrapolation"] == pytest.approx(truth["s500"] / truth["r1g"])
    assert far["rel_error"] > 0.5  # the line through two noisy close links is far off ...
    lo, hi = far["predicted_step_ci_low_s"], far["predicted_step_ci_high_s"]
    assert far["covered"] and lo <= far["measured_step_s"] <= hi  # ... and says how far it may be
    assert far["predicted_step_s"] <= hi
    inner = by_link["r1g"]
    assert inner["extrapolation"] == 1.0 and inner["covered"]
    assert by_link["r2g"]["extrapolation"] == pytest.approx(truth["r1g"] / truth["r2g"])
    assert all(c["covered"] for c in check)


def test_a_faster_link_far_under_the_line_is_still_covered():
    """Seen on the emulated cluster (ZeRO-3, r2g left out): the faster link's step 0.1 s under
    the next one's, where the microbenchmark priced their difference at 0.027 s."""
    runs = [GROUP | {"link": k, "status": "ok", "throttled": False, "median_step_time_s": y,
                     "predicted_comm_s_per_step": x, "p10_step_time_s": y - 0.002,
                     "p90_step_time_s": y + 0.002}
            for k, x, y in (("r2g", 0.0725, 0.204), ("r1g", 0.0991, 0.302),
                            ("s500", 0.3223, 0.504))]  # fmt: skip
    _, check = link_model_rows("s1", runs)
    fast = next(c for c in check if c["link"] == "r2g")
    assert fast["extrapolation"] > 1 and fast["covered"], fast


def test_exact_data_is_covered_and_a_measurement_outside_the_bracket_is_not():
    _, exact = link_model_rows("s1", _runs(0.5, 0.8))
    assert all(c["covered"] for c in exact)
    assert [c["extrapolation"] > 1 for c in exact] == [True, False, False, True]
    runs = _runs(0.5, 0.8)
    for r in runs:  # r300 three times slower than the line: no monotone story explains it
        if r["link"] == "r300":
            r["median_step_time_s"] *= 3
    _, check = link_model_rows("s1", runs)
    assert {c["link"]: c["covered"] for c in check}["r300"] is False


def test_projection_scales_from_the_nearest_measured_link():
    fit = fit_group(_runs(0.5, 0.8, noise=0.01))
    # Peak bus bandwidth per link (GB/s), like a 50/100/300/1000 Mbit/s tc rate.
    peaks = {"r50": 0.00625, "r100": 0.0125, "r300": 0.0375, "r1g": 0.125}
    (p1, p2) = project(fit, peaks, [0.125, 0.25])
    assert p1.reference_link == "r1g" and p1.fastest_link == "r1g"
    assert p1.predicted_comm_s == pytest.approx(fit.points[0].x)
    assert p2.predicted_comm_s == pytest.approx(p1.predicted_comm_s / 2)
    assert p2.step_s == pytest.approx(fit.compute_s + fit.exposure * p2.predicted_comm_s)
    assert p2.step_ci[0] <= p2.step_s <= p2.step_ci[1]
    assert p2.slowdown < 1 < p1.slowdown + 0.05  # faster than the fastest measured link
    (slow,) = project(fit, peaks, [0.001])
    assert slow.reference_link == "r50" and slow.slowdown > 10
    assert p1.extrapolation == 1.0 and p2.extrapolation == pytest.approx(2.0, rel=0.02)
    assert slow.extrapolation == pytest.approx(6.25, rel=0.02)  # 0.00625 / 0.001
    # Beyond the fitted links the interval reaches what full exposure of the extra bytes costs.
    r50 = next(p for p in fit.points if p.link == "r50")
    assert slow.step_ci[1] >= max(r50.step_s) + (slow.predicted_comm_s - r50.x)
    assert slow.step_ci[0] <= min(r50.step_s)
    assert p2.step_ci[0] == 0.0 and p2.slowdown_ci[0] == 0.0  # faster than every measured link


def test_project_sweep_rows_per_group_and_bandwidth():
    runs = _runs(0.5, 0.8) + [r | {"strategy": "ddp"} for r in _runs(0.5, 0.8, comm={"r100": 2.0})]
    peaks = {(k, "spread"): v for k, v in {"r50": 0.00625, "r100": 0.0125, "r300": 0.0375,
                                            "r1g": 0.125}.items()}  # fmt: skip
    rows = project_sweep(runs, peaks, [1.0, 10.0])
    assert [(r["strategy"], r["bandwidth_gbps"]) for r in rows] == [
        ("ddp", 1.0), ("ddp", 10.0), ("zero3", 1.0), ("zero3", 10.0)]  # fmt: skip
    assert rows[0]["quality"] == "under_determined" and rows[0]["step_s"] is None
    assert rows[3]["step_s"] == pytest.approx(0.5 + 0.8 * 0.2 * 0.125 / 10)
    assert project_sweep(_runs(0.5, 0.8), {}, [1.0])[0]["quality"] == "no_link_bandwidth"


@pytest.mark.parametrize(
    ("text", "match"), [("", "''"), ("1,x", "'x'"), ("0", "> 0"), ("-3", "> 0"), ("nan", "> 0")]
)
def test_parse_bandwidths_names_the_option(text, match):
    with pytest.raises(ValueError, match="--bandwidth-gbps") as e:
        parse_bandwidths(text)
    assert match in str(e.value)
    assert parse_bandwidths(" 1, 10 ,100") == [1.0, 10.0, 100.0]
