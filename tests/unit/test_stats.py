"""Unit tests for orchestrator.analysis.stats: known values, hand-enumerated bootstrap cases, and the
figures as stored (run -> variant -> slowdown)."""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.analysis.stats import (
    INTERVAL_LABELS,
    MEDIAN_COLUMNS,
    MIN_RUNS_FOR_CI,
    RUN_FIGURE_COLUMNS,
    bootstrap_median_ci,
    bootstrap_ratio_ci,
    included,
    median,
    percentile,
    ratio_interval,
    run_figure,
    run_figures,
    variant_and_sensitivity_rows,
    variant_interval,
)
from orchestrator.sweep.planner import Variant
from workloads.contract import StepRecord


def test_median_known_values():
    assert median([3, 1, 2]) == 2.0
    assert median([4, 1, 3, 2]) == 2.5
    assert median([7.5]) == 7.5


@pytest.mark.parametrize("bad", [[], ()])
def test_median_empty_raises(bad):
    with pytest.raises(ValueError, match="empty"):
        median(bad)


def test_median_rejects_nan():
    with pytest.raises(ValueError, match="NaN"):
        median([1.0, float("nan")])


def test_percentile_matches_linear_interpolation():
    xs = [10.0, 20.0, 30.0, 40.0]
    # position = q/100 * (n-1): q=50 -> 1.5 -> between 20 and 30
    assert percentile(xs, 50) == 25.0
    assert percentile(xs, 0) == 10.0
    assert percentile(xs, 100) == 40.0
    # q=10 -> position 0.3 -> 10 + 0.3 * 10
    assert percentile(xs, 10) == pytest.approx(13.0)
    assert percentile(xs, 37.5) == pytest.approx(float(np.percentile(xs, 37.5)))


def test_percentile_bad_q():
    with pytest.raises(ValueError, match="q must be"):
        percentile([1.0], 101)


def test_bootstrap_constant_sample_is_degenerate():
    assert bootstrap_median_ci([2.5] * 7) == (2.5, 2.5)


def test_bootstrap_single_sample():
    assert bootstrap_median_ci([4.0]) == (4.0, 4.0)


def test_bootstrap_contains_median_within_range():
    xs = [1.02, 0.98, 1.10, 1.05, 0.99, 1.30, 1.01]
    low, high = bootstrap_median_ci(xs)
    assert min(xs) <= low <= median(xs) <= high <= max(xs)


def test_bootstrap_reproducible_with_seed():
    xs = [1.0, 2.0, 4.0, 8.0, 16.0, 3.0]
    a = bootstrap_median_ci(xs, seed=7)
    b = bootstrap_median_ci(xs, seed=7)
    assert a == b
    # A different seed may give a different interval; it must still be a valid interval.
    c = bootstrap_median_ci(xs, seed=8)
    assert min(xs) <= c[0] <= c[1] <= max(xs)


def test_bootstrap_n2_enumerated():
    """n=2: a resample is (a,a), (a,b), (b,a) or (b,b), so its median is a, (a+b)/2 or b
    with probabilities 1/4, 1/2, 1/4. The 2.5% and 97.5% percentiles are a and b.

    Expected values computed independently by enumerating all 4 equally likely resamples.
    """
    a, b = 1.0, 3.0
    outcomes = [median(list(pair)) for pair in [(a, a), (a, b), (b, a), (b, b)]]
    assert sorted(outcomes) == [a, (a + b) / 2, (a + b) / 2, b]
    low, high = bootstrap_median_ci([a, b], n_resamples=4000, seed=0)
    assert (low, high) == (a, b)
    # At 40% confidence the 30th and 70th percentiles of that distribution both fall on
    # the middle value (mass 1/2 between cumulative 1/4 and 3/4).
    low, high = bootstrap_median_ci([a, b], confidence=0.4, n_resamples=4000, seed=0)
    assert (low, high) == ((a + b) / 2, (a + b) / 2)


def test_bootstrap_n3_enumerated_exactly():
    """n=3 sample [1, 2, 10]: enumerate all 27 resamples for the exact distribution of the
    resample median, and check the bootstrap (many resamples) lands on its 2.5%/97.5% values."""
    xs = [1.0, 2.0, 10.0]
    import itertools

    meds = sorted(median(list(r)) for r in itertools.product(xs, repeat=3))
    # P(median = 1) = P(at least two 1s) = 7/27 > 2.5%, same for 10: interval is (1, 10).
    assert meds.count(1.0) == 7 and meds.count(10.0) == 7
    low, high = bootstrap_median_ci(xs, n_resamples=5000, seed=1)
    assert (low, high) == (1.0, 10.0)


def test_bootstrap_bad_args():
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_median_ci([1.0, 2.0], confidence=1.0)
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap_median_ci([1.0, 2.0], n_resamples=0)
    with pytest.raises(ValueError, match="empty"):
        bootstrap_median_ci([])


def test_ratio_identical_groups():
    xs = [1.0, 1.1, 0.9, 1.05, 0.95]
    ratio, low, high = bootstrap_ratio_ci(xs, xs)
    assert ratio == 1.0
    assert low <= 1.0 <= high


def test_ratio_constant_groups_exact():
    ratio, low, high = bootstrap_ratio_ci([3.0] * 4, [2.0] * 5)
    assert (ratio, low, high) == (1.5, 1.5, 1.5)


def test_ratio_of_medians_and_reproducible():
    num = [1.3, 1.31, 1.29, 1.35, 1.28]
    den = [1.0, 1.02, 0.99, 1.01, 1.0]
    ratio, low, high = bootstrap_ratio_ci(num, den, seed=3)
    assert ratio == pytest.approx(1.3 / 1.0)
    assert low <= ratio <= high
    # bounded by the extreme ratios any resample could produce
    assert min(num) / max(den) <= low and high <= max(num) / min(den)
    assert bootstrap_ratio_ci(num, den, seed=3) == (ratio, low, high)


def test_ratio_n1_groups():
    assert bootstrap_ratio_ci([2.0], [4.0]) == (0.5, 0.5, 0.5)


def test_ratio_zero_denominator():
    with pytest.raises(ValueError, match="den_xs"):
        bootstrap_ratio_ci([1.0], [0.0, 0.0])


def test_run_figure_max_then_median():
    times = {
        0: [1.0, 2.0, 3.0],
        1: [1.5, 1.0, 5.0],
    }
    # per-step max: [1.5, 2.0, 5.0] -> median 2.0
    assert run_figure(times) == 2.0


def test_run_figure_single_rank():
    assert run_figure({0: [0.3, 0.1, 0.2, 0.4]}) == pytest.approx(0.25)


def test_run_figure_rejects_ragged_and_empty():
    with pytest.raises(ValueError, match="different numbers of steps"):
        run_figure({0: [1.0, 2.0], 1: [1.0]})
    with pytest.raises(ValueError, match="empty"):
        run_figure({})
    with pytest.raises(ValueError, match="empty"):
        run_figure({0: []})


# --------------------------------------------------------------------------------------------
# run_figures: a run's stored figures from its ranks' timed steps


def _steps(times, samples=2, tokens=64):
    return [StepRecord(i, False, t, samples, tokens, 1.0) for i, t in enumerate(times)]


def test_run_figures_max_over_ranks_median_over_steps():
    figures = run_figures({0: _steps([1.0, 2.0, 3.0, 4.0]), 1: _steps([1.5, 1.0, 5.0, 2.0])})
    # slowest rank per step: [1.5, 2.0, 5.0, 4.0]
    assert figures["n_steps"] == 4
    assert figures["median_step_time_s"] == 3.0
    assert figures["p10_step_time_s"] == pytest.approx(1.5 + 0.3 * 0.5)  # position 0.3
    assert figures["p90_step_time_s"] == pytest.approx(4.0 + 0.7 * 1.0)  # position 2.7
    # throughput: every rank's samples over the summed per-step max times (12.5 s)
    assert figures["samples_per_s"] == pytest.approx(2 * 4 * 2 / 12.5)
    assert figures["tokens_per_s"] == pytest.approx(2 * 4 * 64 / 12.5)
    assert set(figures) == set(RUN_FIGURE_COLUMNS)


def test_run_figures_not_mean_of_ranks():
    """Mean or min over ranks, or total over per-rank sums, would give other numbers."""
    figures = run_figures({0: _steps([1.0, 1.0]), 1: _steps([3.0, 1.0])})
    assert figures["median_step_time_s"] == 2.0  # median of [3, 1]
    assert figures["samples_per_s"] == pytest.approx(8 / 4.0)  # 4 steps x 2 samples over 3+1 s


def test_run_figures_of_a_failed_run():
    expected = {"n_steps": 0} | dict.fromkeys(RUN_FIGURE_COLUMNS[1:])
    assert run_figures({}) == expected
    assert run_figures({0: [], 1: []}) == expected


def test_run_figures_ranks_with_different_step_counts_raise():
    with pytest.raises(ValueError, match="different numbers of steps"):
        run_figures({0: _steps([1.0, 2.0]), 1: _steps([1.0])})
    with pytest.raises(ValueError, match="different numbers of steps"):
        run_figures({0: _steps([1.0]), 1: []})


# --------------------------------------------------------------------------------------------
# variant_and_sensitivity_rows: one variant group, every link


# DDP at grad_accum 1, bucket 25 MB: every key column but the link and placement (each run's own),
# as the planner stores it
GROUP = {
    k: v
    for k, v in Variant("ddp", 1, "-", "pack", bucket_mb=25).axes.items()
    if k not in ("link", "placement")
}


def _run(link, med, status="ok", throttled=False, placement="pack", peak=100, sps=10.0, **extra):
    row = GROUP | {
        "link": link,
        "placement": placement,
        "status": status,
        "throttled": throttled,
        "median_step_time_s": med,
        "peak_mem_bytes": peak,
        "samples_per_s": sps,
        "tokens_per_s": None if sps is None else sps * 32,
        "comm_bytes_per_step": 1000,
        "expected_comm_bytes_per_step": 1000,
        "predicted_comm_s_per_step": None,
        "achieved_tflops_per_gpu": None,
        "mfu": None,
    }
    return row | extra


def _group_runs():
    return [
        _run("base", 1.0, sps=20.0, peak=100),
        _run("base", 1.2, sps=None, peak=300),
        _run("base", 1.1, sps=10.0, peak=200, predicted_comm_s_per_step=0.5),
        _run("base", None, status="failed", peak=None, sps=None),
        _run("base", 0.1, throttled=True, peak=999, sps=500.0),  # would move every figure
        _run("slow", 2.0, predicted_comm_s_per_step=0.9),
        _run("slow", 2.4, predicted_comm_s_per_step=1.1),
        _run("slow", 2.2, predicted_comm_s_per_step=1.0),
        _run("dead", None, status="failed"),
        _run("slow", 3.0, placement="spread"),  # no baseline run with spread
    ]


def test_included_rule():
    assert included({"status": "ok", "throttled": None})
    assert included({"status": "ok", "throttled": False})
    assert not included({"status": "ok", "throttled": True})
    assert not included({"status": "failed", "throttled": False})


def test_variant_rows_count_exclusions_and_take_medians():
    variant_rows, _ = variant_and_sensitivity_rows("s", _group_runs(), "base", seed=0)
    by = {(r["link"], r["placement"]): r for r in variant_rows}
    assert set(by) == {("base", "pack"), ("slow", "pack"), ("dead", "pack"), ("slow", "spread")}

    base = by[("base", "pack")]
    assert (base["n_runs"], base["n_excluded"]) == (5, 2)  # the failed and the throttled run
    assert base["median_step_time_s"] == pytest.approx(1.1)
    # 3 included runs < MIN_RUNS_FOR_CI: the interval is the range of the runs, and says so
    assert (base["ci_low_s"], base["ci_high_s"], base["interval_kind"]) == (1.0, 1.2, "range")
    assert base["samples_per_s"] == pytest.approx(15.0)  # median of the present 20 and 10
    assert base["tokens_per_s"] == pytest.approx(15.0 * 32)
    assert base["predicted_comm_s_per_step"] == pytest.approx(0.5)  # the only present value
    assert base["comm_bytes_per_step"] == 1000
    assert base["peak_mem_bytes"] == 300  # max over included runs, not the throttled 999
    assert base["sweep_id"] == "s" and all(base[k] == v for k, v in GROUP.items())

    slow = by[("slow", "pack")]
    assert (slow["n_runs"], slow["n_excluded"], slow["median_step_time_s"]) == (3, 0, 2.2)
    assert slow["predicted_comm_s_per_step"] == pytest.approx(1.0)

    dead = by[("dead", "pack")]
    assert (dead["n_runs"], dead["n_excluded"]) == (1, 1)
    assert all(dead[k] is None for k in ("median_step_time_s", "ci_low_s", "ci_high_s"))
    assert all(dead[c] is None for c in MEDIAN_COLUMNS) and dead["peak_mem_bytes"] is None


def test_slowdown_only_against_the_baseline_link():
    _, sens_rows = variant_and_sensitivity_rows("s", _group_runs(), "base", seed=0)
    # not the baseline itself, not a link without included runs, not a placement without a
    # baseline run: only slow/pack against base/pack
    assert [(r["link"], r["placement"], r["baseline_link"]) for r in sens_rows] == [
        ("slow", "pack", "base")
    ]
    (row,) = sens_rows
    assert row["slowdown"] == pytest.approx(2.2 / 1.1)
    # 3 runs a side: the range of the run-pair ratios, labelled as such
    assert row["interval_kind"] == "range"
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((2.0 / 1.2, 2.4 / 1.0))
    assert row["ci_low"] <= row["slowdown"] <= row["ci_high"]

    # another baseline flips the ratio; the seed makes the interval reproducible
    _, flipped = variant_and_sensitivity_rows("s", _group_runs(), "slow", seed=0)
    assert [(r["link"], r["placement"]) for r in flipped] == [("base", "pack")]
    assert flipped[0]["slowdown"] == pytest.approx(1.1 / 2.2)
    again = variant_and_sensitivity_rows("s", _group_runs(), "base", seed=0)
    assert again == variant_and_sensitivity_rows("s", _group_runs(), "base", seed=0)


# --------------------------------------------------------------------------------------------
# Interval labelling: the range of the runs below MIN_RUNS_FOR_CI, the bootstrap from there on


def test_min_runs_for_ci_is_five():
    assert MIN_RUNS_FOR_CI == 5


def test_interval_at_n2_is_the_range_of_the_two_runs():
    # the case: DDP fast ga1 with runs 168 and 251 ms
    assert variant_interval([0.251, 0.168]) == (0.168, 0.251, "range")
    ratio, lo, hi, kind = ratio_interval([0.391, 0.411], [0.168, 0.251])
    assert kind == "range"
    assert ratio == pytest.approx(0.401 / 0.2095)
    assert (lo, hi) == pytest.approx((0.391 / 0.251, 0.411 / 0.168))


def test_interval_at_n6_is_the_bootstrap_and_inside_the_range():
    xs = [1.00, 1.31, 1.05, 1.12, 0.97, 1.20]
    lo, hi, kind = variant_interval(xs, seed=3)
    assert kind == "bootstrap95"
    assert (lo, hi) == bootstrap_median_ci(xs, seed=3)
    assert min(xs) <= lo <= median(xs) <= hi <= max(xs)
    assert (lo, hi) != (min(xs), max(xs))  # at n=6 the bootstrap is narrower than the range
    den = [0.5, 0.52, 0.55, 0.49, 0.51, 0.5]
    ratio, rlo, rhi, rkind = ratio_interval(xs, den, seed=3)
    assert rkind == "bootstrap95"
    assert (ratio, rlo, rhi) == bootstrap_ratio_ci(xs, den, seed=3)


def test_ratio_interval_is_a_range_when_either_side_is_small():
    six = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5]
    *_, kind = ratio_interval(six, [0.5, 0.6])
    assert kind == "range"
    *_, kind = ratio_interval([2.0, 2.2], six)
    assert kind == "range"


def test_variant_rows_at_n6_use_the_bootstrap():
    runs = [_run("base", 1.0 + 0.01 * i) for i in range(6)] + [
        _run("slow", 2.0 + 0.02 * i) for i in range(6)
    ]
    variant_rows, (sens,) = variant_and_sensitivity_rows("s", runs, "base", seed=0)
    assert {r["interval_kind"] for r in variant_rows} == {"bootstrap95"}
    assert sens["interval_kind"] == "bootstrap95"
    assert INTERVAL_LABELS[sens["interval_kind"]] == "95% bootstrap CI"
    assert INTERVAL_LABELS["range"] == "range of runs"


def test_overlap_is_part_of_the_variant():
    runs = [
        _run("base", 1.0),
        _run("slow", 2.0),
        _run("base", 1.0, overlap_comm="false", achieved_tflops_per_gpu=0.5),
        _run("slow", 3.0, overlap_comm="false", achieved_tflops_per_gpu=0.25),
    ]
    variant_rows, sens_rows = variant_and_sensitivity_rows("s", runs, "base", seed=0)
    assert len(variant_rows) == 4
    slowdown = {r["overlap_comm"]: r["slowdown"] for r in sens_rows}
    assert slowdown == {"default": pytest.approx(2.0), "false": pytest.approx(3.0)}
    tflops = {(r["overlap_comm"], r["link"]): r["achieved_tflops_per_gpu"] for r in variant_rows}
    assert tflops[("false", "slow")] == 0.25 and tflops[("default", "base")] is None


def test_bucket_varies_only_when_one_strategy_has_several():
    from orchestrator.analysis.stats import varying

    defaults = [
        {"strategy": "ddp", "bucket_mb": 25, "link": "fast"},
        {"strategy": "zero3", "bucket_mb": 2000, "link": "slow"},
    ]
    assert varying(defaults) == {"strategy", "link"}  # each framework's own default: no label
    swept = [*defaults, {"strategy": "ddp", "bucket_mb": 100, "link": "fast"}]
    assert varying(swept, ("bucket_mb",)) == {"bucket_mb"}


def test_grad_compression_varies_only_when_ddp_has_several():
    """DDP's none against ZeRO's n/a is implied by the strategy: no column in compare's table or
    the report's labels (it would add one to every DDP-vs-ZeRO table); none and bf16 DDP do, and
    PowerSGD at two ranks varies the rank too."""
    from orchestrator.analysis.stats import varying

    def row(strategy, **axes):
        return Variant(strategy, 1, "fast", "pack", **axes).axes

    mixed = [row("ddp"), row("zero3")]
    assert (mixed[0]["grad_compression"], mixed[1]["grad_compression"]) == ("none", "n/a")
    assert varying(mixed) == {"strategy"}
    both = [*mixed, row("ddp", grad_compression="bf16")]
    assert varying(both) == {"strategy", "grad_compression"}
    ranks = [row("ddp", grad_compression="powersgd", powersgd_rank=r) for r in (1, 4)]
    assert varying(ranks) == {"powersgd_rank"}
    assert varying([*both, *ranks]) == {"strategy", "grad_compression", "powersgd_rank"}


def test_a_strategys_own_sync_and_reshard_need_no_label():
    """DDP's sync ``last`` beside ZeRO's ``n/a`` and FSDP2's ``each`` is implied by the names;
    two syncs of one strategy are a difference to label."""
    from orchestrator.analysis.stats import varying

    defaults = [
        {"strategy": "ddp", "grad_sync": "last", "reshard_after_forward": "n/a"},
        {"strategy": "zero3", "grad_sync": "n/a", "reshard_after_forward": "n/a"},
        {"strategy": "fsdp", "grad_sync": "each", "reshard_after_forward": "true"},
    ]
    keys = ("strategy", "grad_sync", "reshard_after_forward")
    assert varying(defaults, keys) == {"strategy"}
    both = [*defaults, {"strategy": "ddp", "grad_sync": "each", "reshard_after_forward": "n/a"}]
    assert varying(both, keys) == {"strategy", "grad_sync"}
    flavours = [
        *defaults,
        {"strategy": "fsdp", "grad_sync": "each", "reshard_after_forward": "false"},
    ]
    assert varying(flavours, keys) == {"strategy", "reshard_after_forward"}
