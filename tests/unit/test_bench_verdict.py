"""bench_overhead's verdict on the step ratio: decided on an interval, not on one trial's luck."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "bench_overhead.py"
_spec = importlib.util.spec_from_file_location("bench_overhead", _PATH)
bench_overhead = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_overhead)
verdict = bench_overhead.verdict


def test_ratios_close_to_one_are_within_even_with_one_disturbed_trial():
    decision, (low, high) = verdict([1.01, 0.99, 1.02, 1.00, 0.98, 1.03, 1.30])
    assert decision == "within"
    assert 0.95 <= low <= high <= 1.05


def test_ratios_clearly_above_the_band_are_outside():
    decision, (low, _) = verdict([1.20, 1.15, 1.25, 1.18, 1.22])
    assert decision == "outside" and low > 1.05


def test_spread_straddling_the_band_is_undecided():
    assert verdict([0.97, 1.15, 0.99, 1.12, 1.04, 1.14, 0.96])[0] == "undecided"


@pytest.mark.parametrize("n", [0, 1, 4])
def test_fewer_than_five_trials_are_undecided(n):
    assert verdict([1.0] * n)[0] == "undecided"


def test_summarize_carries_the_verdict():
    trials = [
        {
            "linksweep": {"median_step_time_s": 1.0 + d, "startup_s": 0.2,
                          "first_run_startup_s": 5.0, "wall_s": 30.0},
            "torchrun": {"median_step_time_s": 1.0, "startup_s": 5.0, "wall_s": 13.0},
        }
        for d in (0.0, 0.01, -0.01, 0.02, 0.0)
    ]  # fmt: skip
    s = bench_overhead.summarize(trials)["linksweep"]
    assert s["verdict"] == "within" and s["n_pairs"] == 5
    assert s["median_trial_ratio"] == pytest.approx(1.0)


def test_summarize_decides_on_the_10th_percentile_step_too():
    """One trial with a long disturbance moves its median a lot and its p10 little; the p10
    comparison carries its own verdict, and trials without the figure give none."""

    def arm(med, p10):
        return {"median_step_time_s": med, "p10_step_time_s": p10, "startup_s": 0.2,
                "first_run_startup_s": 5.0, "wall_s": 30.0}  # fmt: skip

    trials = [
        {"linksweep": arm(1.0 + d, 0.9 + d / 10), "torchrun": arm(1.0, 0.9)}
        for d in (0.0, 0.2, -0.15, 0.12, 0.01, -0.1)
    ]
    s = bench_overhead.summarize(trials)["linksweep"]
    assert s["verdict"] == "undecided"
    assert s["p10_verdict"] == "within"
    assert s["p10_trial_ratio_range"][1] == pytest.approx(0.92 / 0.9)
    del trials[0]["torchrun"]["p10_step_time_s"]
    assert "p10_verdict" not in bench_overhead.summarize(trials)["linksweep"]
