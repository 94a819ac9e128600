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

**Which interval is stored** (``variant_interval``, ``ratio_interval``; the kind goes in the
``interval_kind`` column next to the numbers):

- fewer than ``MIN_RUNS_FOR_CI`` (5) included runs on a side: ``range``, the min and max of the
  runs (for a slowdown: the smallest and largest ratio of any run on the link to any run on the
  baseline). Below 5 the percentile bootstrap of the median collapses onto that range anyway
  (at n=2 it returns exactly the two runs), so calling it a "95% CI" would overstate what a
  handful of repeats can say; the report and ``linksweep run`` print "range of n runs" and
  suggest more repeats. A t-interval on log step times was considered and not used: it is an
  interval of the geometric mean, not of the median the figures report, and at n=2 its t
  quantile (12.7) makes it as wide as it is uninformative.
- ``MIN_RUNS_FOR_CI`` or more: ``bootstrap95``, the 95% percentile-bootstrap interval above.

May import: numpy, workloads.catalog.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from workloads import catalog

__all__ = [
    "INTERVAL_BOOTSTRAP",
    "INTERVAL_RANGE",
    "MIN_RUNS_FOR_CI",
    "bootstrap_median_ci",
    "bootstrap_ratio_ci",
    "included",
    "link_measurement",
    "median",
    "percentile",
    "ratio_interval",
    "rehearsal",
    "rehearsal_variants",
    "run_figure",
    "variant_interval",
]

MIN_RUNS_FOR_CI = 5
"""Below this many included runs per variant, intervals are the range of the runs."""
INTERVAL_RANGE = "range"
INTERVAL_BOOTSTRAP = "bootstrap95"
INTERVAL_LABELS = {
    INTERVAL_RANGE: "range of runs",
    INTERVAL_BOOTSTRAP: "95% bootstrap CI",
}
"""How each ``interval_kind`` is written in tables and text."""


def included(run: Mapping) -> bool:
    """Does a run count in figures? Finished ok and not throttled. Failed and throttled runs
    stay stored and are counted as excluded (``n_excluded``), never silently dropped.

    The same rule as SQL: ``orchestrator.store.queries.included_run_sql``.
    """
    return run.get("status") == "ok" and not run.get("throttled")


REHEARSAL_LINK_CLASS = "shared-gpu"
"""``runs.link_class`` of the one-GPU rehearsal (``ranks_per_gpu: 2``)."""


def rehearsal(run: Mapping) -> bool:
    """Is a run the one-GPU rehearsal: two ranks sharing one GPU (``ranks_per_gpu`` above 1,
    stored with link class ``shared-gpu``)? Such a run checks the NCCL path (init, transports,
    collectives, telemetry) on one GPU; its two ranks talk through one device's memory, so its
    step time says nothing about any link, whatever the link's env."""
    return run.get("link_class") == REHEARSAL_LINK_CLASS or (run.get("ranks_per_gpu") or 1) > 1


def link_measurement(run: Mapping) -> bool:
    """Does a run count as a measurement of its link? Included (``included``) and not a
    rehearsal (``rehearsal``). The one rule for everything that compares links: slowdowns
    (``variant_and_sensitivity_rows``), the link model's points (``linkmodel.link_points``),
    the measured extra step time per link (``headline.extra_vs_predicted``). A rehearsal's
    runs still count in their own variant's figures, which the report labels as a rehearsal."""
    return included(run) and not rehearsal(run)


def rehearsal_variants(runs: Iterable[Mapping]) -> set[tuple]:
    """The ``VARIANT_KEY`` tuples of the variants whose runs are rehearsals (``rehearsal``):
    for rows that carry a variant but not its runs (``variant_summary``)."""
    return {tuple(r.get(k) for k in VARIANT_KEY) for r in runs if rehearsal(r)}


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


def variant_interval(xs: Sequence[float], seed: int = 0) -> tuple[float, float, str]:
    """``(low, high, kind)`` for the median of a variant's run figures: the range of the runs
    below ``MIN_RUNS_FOR_CI`` runs, else the 95% percentile-bootstrap interval (module doc)."""
    arr = _as_array(xs)
    if arr.size < MIN_RUNS_FOR_CI:
        return (float(arr.min()), float(arr.max()), INTERVAL_RANGE)
    low, high = bootstrap_median_ci(arr, seed=seed)
    return (low, high, INTERVAL_BOOTSTRAP)


def ratio_interval(
    num_xs: Sequence[float], den_xs: Sequence[float], seed: int = 0
) -> tuple[float, float, float, str]:
    """``(ratio, low, high, kind)``: median(num)/median(den) with the range of the run-pair
    ratios (min(num)/max(den) .. max(num)/min(den)) when either side has fewer than
    ``MIN_RUNS_FOR_CI`` runs, else the bootstrap interval of the ratio of medians."""
    num = _as_array(num_xs, "num_xs")
    den = _as_array(den_xs, "den_xs")
    if min(num.size, den.size) >= MIN_RUNS_FOR_CI:
        return (*bootstrap_ratio_ci(num, den, seed=seed), INTERVAL_BOOTSTRAP)
    if float(den.min()) <= 0.0:
        raise ValueError("den_xs holds a value <= 0: the ratio is undefined")
    ratio = float(np.median(num)) / float(np.median(den))
    low = float(num.min()) / float(den.max())
    high = float(num.max()) / float(den.min())
    return (ratio, low, high, INTERVAL_RANGE)


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


# --------------------------------------------------------------------------------------------
# Figures as stored: run -> variant -> slowdown. Computed here only; the views just select them.

RUN_FIGURE_COLUMNS = (
    "n_steps",
    "median_step_time_s",
    "p10_step_time_s",
    "p90_step_time_s",
    "samples_per_s",
    "tokens_per_s",
)
VARIANT_KEY = catalog.variant_key()
"""The variant key's columns, in the catalog's order (``workloads/catalog.py``: strategy, its
axes, link, placement); an axis a plugin adds is among them."""
GROUP_KEY = tuple(k for k in VARIANT_KEY if k != "link")  # a variant on every link
MEDIAN_COLUMNS = (
    "samples_per_s",
    "tokens_per_s",
    "comm_bytes_per_step",
    "expected_comm_bytes_per_step",
    "predicted_comm_s_per_step",
    "achieved_tflops_per_gpu",
    "mfu",
)


def run_figures(timed_steps_by_rank: Mapping[int, Sequence]) -> dict[str, float | int | None]:
    """A run's stored figures from each rank's timed steps (objects with ``step_time_s``,
    ``samples``, ``tokens``; warmup already excluded), as ``runs`` columns.

    Per step, the slowest rank sets the pace (max over ranks) and samples/tokens add up over
    ranks; the run's figure is the median over steps (``run_figure``), p10/p90 interpolate like
    DuckDB's ``quantile_cont``, throughput is total samples over total step time.
    No steps (a failed run): n_steps 0 and every figure None.
    """
    if not timed_steps_by_rank or not any(timed_steps_by_rank.values()):
        return {"n_steps": 0} | {c: None for c in RUN_FIGURE_COLUMNS[1:]}
    times = {r: [s.step_time_s for s in steps] for r, steps in timed_steps_by_rank.items()}
    figure = run_figure(times)  # checks every rank timed the same steps
    per_step = np.max(np.array(list(times.values()), dtype=np.float64), axis=0)
    total_s = float(per_step.sum())
    samples = sum(s.samples for steps in timed_steps_by_rank.values() for s in steps)
    tokens = sum(s.tokens for steps in timed_steps_by_rank.values() for s in steps)
    return {
        "n_steps": len(per_step),
        "median_step_time_s": figure,
        "p10_step_time_s": percentile(per_step, 10),
        "p90_step_time_s": percentile(per_step, 90),
        "samples_per_s": samples / total_s if total_s > 0 else None,
        "tokens_per_s": tokens / total_s if total_s > 0 else None,
    }


def _median_or_none(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return median(present) if present else None


def variant_and_sensitivity_rows(
    sweep_id: str, runs: Sequence[Mapping], baseline_link: str, seed: int
) -> tuple[list[dict], list[dict]]:
    """``variant_stats`` and ``sensitivity_stats`` rows for the runs of one variant group (one
    ``GROUP_KEY``, every link), from stored run rows (``VARIANT_KEY`` columns, status,
    throttled, the run figures).

    Variant figure: median of its included runs' figures, with an interval (``variant_interval``:
    range of the runs below ``MIN_RUNS_FOR_CI``, else bootstrap); other columns: medians over
    included runs (peak memory: max). Slowdown: ratio of a link's median to the baseline link's,
    with ``ratio_interval``, from runs that are link measurements only (``link_measurement``:
    a rehearsal's variant gets its figures, never a slowdown). ``interval_kind`` says which.
    Excluded runs are counted.
    """
    by_variant: dict[tuple, list[Mapping]] = {}
    for r in runs:
        by_variant.setdefault(tuple(r.get(k) for k in VARIANT_KEY), []).append(r)
    variant_rows, figures = [], {}
    for key, members in by_variant.items():
        ok = [r for r in members if included(r) and r["median_step_time_s"] is not None]
        xs = [r["median_step_time_s"] for r in ok]
        figures[key] = [r["median_step_time_s"] for r in ok if link_measurement(r)]
        med = lo = hi = kind = None
        if xs:
            med = median(xs)
            lo, hi, kind = variant_interval(xs, seed=seed)
        peaks = [r["peak_mem_bytes"] for r in ok if r["peak_mem_bytes"] is not None]
        variant_rows.append(
            dict(zip(VARIANT_KEY, key, strict=True))
            | {
                "sweep_id": sweep_id,
                "n_runs": len(members),
                "n_excluded": len(members) - len(ok),
                "median_step_time_s": med,
                "ci_low_s": lo,
                "ci_high_s": hi,
                "interval_kind": kind,
            }
            | {c: _median_or_none([r[c] for r in ok]) for c in MEDIAN_COLUMNS}
            | {"peak_mem_bytes": max(peaks) if peaks else None}
        )
    link_at = VARIANT_KEY.index("link")
    sens_rows = []
    for key, xs in figures.items():
        base = figures.get(key[:link_at] + (baseline_link,) + key[link_at + 1 :])
        if key[link_at] == baseline_link or not base or not xs:
            continue
        ratio, lo, hi, kind = ratio_interval(xs, base, seed=seed)
        sens_rows.append(
            {k: v for k, v in zip(VARIANT_KEY, key, strict=True)}
            | {
                "sweep_id": sweep_id,
                "baseline_link": baseline_link,
                "slowdown": ratio,
                "ci_low": lo,
                "ci_high": hi,
                "interval_kind": kind,
            }
        )
    return variant_rows, sens_rows


def implied_axes() -> tuple[str, ...]:
    """The axes whose value a strategy implies unless the grid sets several for it: those whose
    default differs between strategies (``catalog.default``: DDP's sync ``last`` and FSDP2's
    ``each``, DDP's fp32 gradients and ZeRO's ``n/a``, the framework's own bucket and FSDP2's
    none). Read from the catalog at each call, so an axis added since import follows."""
    names = catalog.names()
    return tuple(a for a in catalog.AXES if len({repr(catalog.default(a, s)) for s in names}) > 1)


PER_STRATEGY = implied_axes()
"""``implied_axes()`` at import."""


def varying(rows: Iterable[Mapping[str, Any]], keys: Sequence[str] | None = None) -> set[str]:
    """The keys (default: the catalog's variant key, as it is now) that take more than one value
    over ``rows`` (the rest need no label).
    :data:`PER_STRATEGY` keys vary only where one strategy has several: each framework's own
    default bucket (DDP 25 MiB, DeepSpeed's), DDP's fp32 against ZeRO's ``n/a``, DDP's sync
    ``last`` against FSDP2's ``each`` and ZeRO's ``n/a`` are implied by the strategy's name."""
    rows = list(rows)
    keys = catalog.variant_key() if keys is None else keys
    knobs = implied_axes()
    out = {k for k in keys if k not in knobs and len({r.get(k) for r in rows}) > 1}
    for key in knobs:
        if key not in keys:
            continue
        per_strategy: dict[Any, set] = {}
        for r in rows:
            per_strategy.setdefault(r.get("strategy"), set()).add(r.get(key))
        if any(len(v) > 1 for v in per_strategy.values()):
            out.add(key)
    return out
