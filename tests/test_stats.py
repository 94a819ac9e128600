"""Unit tests for orchestrator.stats: known values and hand-enumerated bootstrap cases."""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.stats import (
    bootstrap_median_ci,
    bootstrap_ratio_ci,
    median,
    percentile,
    run_figure,
)


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
