"""Statistics of the linksweep measurement protocol.

A *step* is timed on every rank; a *run* is one process group training one variant for N
timed steps; a variant is measured in several *repeats* (runs), interleaved with other
variants. This module turns those numbers into figures:

- ``run_figure``: one number per run. A step finishes when its slowest rank finishes, so each
  step's figure is the max over ranks; the run's figure is the median over its steps (robust to
  the odd slow step: a GC pause, a page fault, a log flush).
- ``median`` / ``percentile``: plain order statistics (``percentile`` interpolates linearly
  between order statistics, as ``numpy.percentile`` does by default).
- ``bootstrap_median_ci``: percentile-bootstrap confidence interval of the median of the
  repeats' figures.
- ``bootstrap_ratio_ci``: ratio of two medians (e.g. slow link / fast link) with a percentile
  bootstrap interval that resamples both groups independently.

Everything is pure and deterministic: the bootstrap draws from ``numpy.random.default_rng(seed)``
so the same inputs and seed give the same interval on every machine.

The percentile bootstrap is the simplest interval that makes no normality assumption; with the
few repeats a sweep can afford (3-10) it is rough, so the interval is a statement of spread, not
a guarantee of coverage. With n repeats the median of a resample can only take a handful of
values, which is why the tests can enumerate the bootstrap distribution for n=2 by hand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

__all__ = [
    "bootstrap_median_ci",
    "bootstrap_ratio_ci",
    "median",
    "percentile",
    "run_figure",
]


def _as_array(xs: Sequence[float], name: str = "xs") -> np.ndarray:
    arr = np.asarray(list(xs), dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a flat sequence of numbers, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty: a statistic of no samples is undefined")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinity: {arr.tolist()}")
    return arr


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


def _check_resamples(n_resamples: int) -> None:
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples!r}")


def median(xs: Sequence[float]) -> float:
    """Median of ``xs`` (mean of the two middle values for even n). ValueError if empty."""
    return float(np.median(_as_array(xs)))


def percentile(xs: Sequence[float], q: float) -> float:
    """``q``-th percentile (0..100) of ``xs`` with linear interpolation (numpy's default)."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"q must be in [0, 100], got {q!r}")
    return float(np.percentile(_as_array(xs), q))


def _bootstrap_medians(arr: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of ``n_resamples`` resamples (with replacement, same size as ``arr``)."""
    idx = rng.integers(0, arr.size, size=(n_resamples, arr.size))
    return np.median(arr[idx], axis=1)


def bootstrap_median_ci(
    xs: Sequence[float],
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap interval ``(low, high)`` for the median of ``xs``.

    Resamples ``xs`` with replacement ``n_resamples`` times, takes each resample's median and
    returns the ``(1-confidence)/2`` and ``(1+confidence)/2`` percentiles of those medians.
    A single sample has no spread to resample: n == 1 returns ``(x, x)``. The interval always
    lies within ``[min(xs), max(xs)]``.
    """
    arr = _as_array(xs)
    _check_confidence(confidence)
    _check_resamples(n_resamples)
    if arr.size == 1:
        x = float(arr[0])
        return (x, x)
    rng = np.random.default_rng(seed)
    medians = _bootstrap_medians(arr, n_resamples, rng)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.percentile(medians, [100.0 * alpha, 100.0 * (1.0 - alpha)])
    return (float(low), float(high))


def bootstrap_ratio_ci(
    num_xs: Sequence[float],
    den_xs: Sequence[float],
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(ratio, low, high)``: median(num)/median(den) with a percentile-bootstrap interval.

    The two groups are independent measurements (different variants), so each bootstrap
    replicate resamples each group on its own, and the interval is taken over the replicate
    ratios. Typical use: ``num`` = step times on the slow link, ``den`` = on the fast link;
    a ratio above 1 with ``low > 1`` means the slow link costs time beyond the spread.
    """
    num = _as_array(num_xs, "num_xs")
    den = _as_array(den_xs, "den_xs")
    _check_confidence(confidence)
    _check_resamples(n_resamples)
    den_median = float(np.median(den))
    if den_median == 0.0:
        raise ValueError("median of den_xs is 0: the ratio is undefined")
    ratio = float(np.median(num)) / den_median
    rng = np.random.default_rng(seed)
    num_medians = _bootstrap_medians(num, n_resamples, rng)
    den_medians = _bootstrap_medians(den, n_resamples, rng)
    if np.any(den_medians == 0.0):
        raise ValueError("a bootstrap resample of den_xs has median 0: the ratio is undefined")
    ratios = num_medians / den_medians
    alpha = (1.0 - confidence) / 2.0
    low, high = np.percentile(ratios, [100.0 * alpha, 100.0 * (1.0 - alpha)])
    return (ratio, float(low), float(high))


def run_figure(step_times_by_rank: Mapping[int, Sequence[float]]) -> float:
    """A run's figure: median over steps of (max over ranks of that step's time).

    ``step_times_by_rank[rank][i]`` is rank's time for timed step i (warmup already excluded).
    Every rank must report the same number of steps: a rank that timed fewer steps than the
    others means the run did not finish cleanly, and silently truncating would hide that.
    """
    if not step_times_by_rank:
        raise ValueError("step_times_by_rank is empty: no rank reported step times")
    lengths = {rank: len(times) for rank, times in step_times_by_rank.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"ranks reported different numbers of steps: {lengths}")
    ranks = sorted(step_times_by_rank)
    table = np.stack([_as_array(step_times_by_rank[r], f"step times of rank {r}") for r in ranks])
    # table has shape (n_ranks, n_steps): the step's figure is its slowest rank.
    per_step = table.max(axis=0)
    return float(np.median(per_step))
