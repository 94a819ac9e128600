"""The link model: how much of a variant's communication its step cannot hide, and what another
link would cost. Pure: run rows in, rows and numbers out (no Ray, no DuckDB, no files).
One job: the link model (its fit, its leave-one-link-out check, its projections), which share
the fit's points and bootstrap replicates.

For one variant group (``stats.GROUP_KEY``: every axis of the catalog but the link, the flavour
included: ``grad_sync`` and ``reshard_after_forward``, so two FSDP2 flavours are two fits, never
one)
measured on two or more links, fit

    step_time(link) = compute_s + exposure x predicted_comm_s(link)

``predicted_comm_s(link)`` is the run's ``predicted_comm_s_per_step``: its measured collectives
(comms logger / DDP comm hook) priced at the link microbenchmark's bandwidth for each op and
message size (``comm_model.predict_comm_s``). ``compute_s`` is the step time on an infinitely
fast link; ``exposure`` is the fraction of the communication the step does not hide (1: all of
it exposed, 0: all of it overlapped with compute).

Method
------
- Points: one per link, the median over the link's runs that measure it
  (``stats.link_measurement``: ok, not throttled, not the one-GPU rehearsal) of the run figure
  (``median_step_time_s``) and of ``predicted_comm_s_per_step``.
  One point per link weights every link the same however many repeats it has, and the median
  is robust to one odd run, like every other figure in linksweep.
- Line: ordinary least squares through those points, with exposure constrained to >= 0 (a
  negative slope would mean a slower link makes the step faster: noise, not physics; the
  constrained optimum is then exposure 0 and compute_s the mean step time). Exposure is not
  capped at 1: above 1 means training moves its bytes slower than the microbenchmark did
  (contention with compute, many small messages), which is worth seeing.
- Intervals: percentile bootstrap over runs, stratified by link (each replicate resamples each
  link's runs with replacement, recomputes the link medians and refits), 2000 replicates, fixed
  seed: reproducible, as ``stats.bootstrap_median_ci``. With 2 repeats per link the interval is
  rough (a statement of spread, not a coverage guarantee).
- Residual: root mean square of the link points' deviation from the line, in seconds and
  relative to the measured step time. With exactly two links the line passes through both
  points, so the residual says nothing; the leave-one-link-out check needs three or more.
- Quality (``QUALITIES``, one flag, the first that applies): ``no_prediction`` (no run has a
  predicted communication time: the sweep had no link microbenchmark), ``under_determined``
  (fewer than two links with included runs, or links that all predict the same communication
  time), ``no_communication`` (every link predicts 0 s: one rank, nothing crosses a link;
  compute_s is then the median step time and exposure is NULL), ``poor_fit`` (relative residual
  above ``POOR_FIT_REL``), ``runs_excluded`` (a good fit, but failed or throttled runs were left
  out; ``n_excluded`` says how many), ``ok``. ``note`` says the same in words.

Assumptions (stated in docs/link-model.md): compute_s does not depend on the link; the exposed share of
communication is the same on every link (in truth overlap hides a fixed window of compute, so
exposure drifts toward 1 on slow links and toward 0 on fast ones: the line is a secant over the
measured range, and far outside it a projection is an extrapolation); the microbenchmark's
bandwidth per op and size is what training gets.

Projection (``project``): for a hypothetical link of bus bandwidth B GB/s, the predicted
communication time is scaled from the measured link whose bus bandwidth is nearest to B (log
scale): ``x(B) = x(link) x busbw(link) / B``, i.e. each op and message size keeps the
efficiency (fraction of the link's bus bandwidth) it had on that link. A link's bus bandwidth is
its all_reduce busbw at the largest measured message, the figure nccl-tests users quote (small
messages can beat a shaped link's rate inside its burst). The step time is
``compute_s + exposure x x(B)``, its interval from the same bootstrap replicates (compute_s and
exposure are correlated, so their marginal intervals cannot be combined), and the slowdown is
against the measured median step time on the fastest measured link (highest bus bandwidth).

Extrapolation and the interval of a prediction (``bracket``): the line is a secant over the
measured links, and its bootstrap interval covers only the runs' noise. A prediction (a
projection, or a left-out link) for a communication time outside the fitted links' range is an
*extrapolation*: ``extrapolation`` = how far outside, as a ratio (``x / x_max`` beyond the
slowest fitted link, ``x_min / x`` beyond the fastest; 1 inside), and every output that carries
a prediction carries it. Two close links extrapolated to one four times slower amplify their
noise (seen: +950% for a left-out link). So the interval of every prediction is the bootstrap
interval joined with what monotonicity alone allows, whatever the line says: a link between two
measured ones costs between their runs' step times; one slower than every measured link costs at
least the slowest one's and at most that plus its extra communication fully exposed (at the
exposure's upper bound where that is above 1); one faster, at most the fastest one's, and at
least 0: how much of a faster link's communication a step hides is not in the runs of slower
links (seen: a left-out faster link 0.1 s under the next one's step, where the microbenchmark
priced their difference at 0.027 s). Each
bound is widened by the noise the runs show (the largest spread of one link's runs). The model
promises that interval, not the point: the leave-one-out check stores whether the measured step
time fell inside it (``covered``), and tests/integration/test_link_model_emulated.py asserts it.

``project_sweep`` groups a sweep's runs itself: there a run row without an axis (NULL or
missing) reads as its strategy's default (``flavours.with_flavour``: ``catalog.filled``), so it
joins that group rather than forming its own (or failing to sort against the others).
``link_model_rows`` takes one group as its caller selected it (``sweep/execute.py``, by the
stored key, which the planner and the migrations always fill) and keeps its key as given.

May import: flavours, stats, numpy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from orchestrator.analysis.flavours import with_flavour
from orchestrator.analysis.stats import GROUP_KEY, link_measurement

__all__ = [
    "CONFIDENCE",
    "N_RESAMPLES",
    "POOR_FIT_REL",
    "QUALITIES",
    "Fit",
    "LinkPoint",
    "Projection",
    "bracket",
    "extrapolation",
    "fit_group",
    "fit_points",
    "link_model_rows",
    "link_points",
    "parse_bandwidths",
    "project",
    "project_sweep",
]

N_RESAMPLES = 2000
CONFIDENCE = 0.95
POOR_FIT_REL = 0.10  # rms residual above 10% of the step time: the line does not describe it
QUALITIES = (
    "no_prediction",
    "under_determined",
    "no_communication",
    "poor_fit",
    "runs_excluded",
    "ok",
)


@dataclass(frozen=True)
class LinkPoint:
    """One link's included runs: (predicted_comm_s, step_time_s) per run, and its medians."""

    link: str
    comm_s: tuple[float, ...]
    step_s: tuple[float, ...]
    spread_s: tuple[float, ...] = ()
    """Per run, the spread of its own step times (``p90_step_time_s - p10_step_time_s``) where
    stored: the noise one run shows, when a link has one run and its runs show none."""

    @property
    def x(self) -> float:
        return float(np.median(self.comm_s))

    @property
    def y(self) -> float:
        return float(np.median(self.step_s))


@dataclass(frozen=True)
class Fit:
    """The fitted line of one variant group, with bootstrap replicates (not stored)."""

    compute_s: float | None
    exposure: float | None
    compute_ci: tuple[float, float] | None
    exposure_ci: tuple[float, float] | None
    n_links: int
    n_runs: int
    n_excluded: int
    residual_s: float | None
    residual_rel: float | None
    quality: str
    note: str
    points: tuple[LinkPoint, ...] = ()
    boot_compute: np.ndarray | None = None  # (n_resamples,)
    boot_exposure: np.ndarray | None = None  # (n_resamples,)
    boot_step: np.ndarray | None = None  # (n_resamples, n_links): resampled link medians


def _line(xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least squares ``y = c + e x`` with ``e >= 0``, along the last axis (vectorised over
    bootstrap replicates). Where the x's do not spread, e = 0 and c = mean(y)."""
    xm = xs.mean(axis=-1, keepdims=True)
    ym = ys.mean(axis=-1, keepdims=True)
    sxx = ((xs - xm) ** 2).sum(axis=-1)
    sxy = ((xs - xm) * (ys - ym)).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.where(sxx > 0, sxy / np.where(sxx > 0, sxx, 1.0), 0.0)
    e = np.maximum(e, 0.0)
    c = ym[..., 0] - e * xm[..., 0]
    return c, e


def link_points(runs: Sequence[Mapping]) -> tuple[list[LinkPoint], int, int]:
    """(points, n_runs, n_excluded) from one group's run rows (``link``, ``status``,
    ``throttled``, ``median_step_time_s``, ``predicted_comm_s_per_step``, ``link_class``,
    ``ranks_per_gpu``). A run counts when it measures its link (``stats.link_measurement``:
    included, and not the one-GPU rehearsal) and has both figures; the rest are counted as
    excluded."""
    by_link: dict[str, list[tuple[float, float, float]]] = {}
    excluded = 0
    for r in runs:
        x, y = r.get("predicted_comm_s_per_step"), r.get("median_step_time_s")
        if not link_measurement(r) or x is None or y is None or not (math.isfinite(x + y)):
            excluded += 1
            continue
        p10, p90 = r.get("p10_step_time_s"), r.get("p90_step_time_s")
        spread = p90 - p10 if p10 is not None and p90 is not None else 0.0
        by_link.setdefault(r["link"], []).append((float(x), float(y), float(spread)))
    points = [
        LinkPoint(link, *(tuple(run[i] for run in xys) for i in range(3)))
        for link, xys in by_link.items()
    ]
    return points, len(runs), excluded


def _percentile_ci(values: np.ndarray) -> tuple[float, float]:
    alpha = (1.0 - CONFIDENCE) / 2.0
    lo, hi = np.percentile(values, [100.0 * alpha, 100.0 * (1.0 - alpha)])
    return float(lo), float(hi)


def fit_points(
    points: Sequence[LinkPoint],
    n_runs: int | None = None,
    n_excluded: int = 0,
    seed: int = 0,
    n_resamples: int = N_RESAMPLES,
    no_prediction: bool = False,
) -> Fit:
    """Fit the line through ``points`` (one per link) with bootstrap intervals; never raises
    on degenerate input: it says what is wrong in ``quality`` and ``note``."""
    points = tuple(sorted(points, key=lambda p: p.x))
    n_used = sum(len(p.step_s) for p in points)
    n_runs = n_used + n_excluded if n_runs is None else n_runs
    base = dict(n_links=len(points), n_runs=n_runs, n_excluded=n_excluded, points=points)
    why = "failed, throttled, one-GPU rehearsal or no figure"
    excl = f"; {n_excluded} run(s) excluded ({why})" if n_excluded else ""
    if no_prediction:
        return Fit(None, None, None, None, residual_s=None, residual_rel=None,
                   quality="no_prediction",
                   note="no predicted communication time: the sweep has no link "
                        "microbenchmark (grid.linkbench: true)" + excl, **base)  # fmt: skip
    xs = np.array([p.x for p in points])
    if len(points) >= 1 and np.all(xs == 0.0):
        compute = float(np.median([y for p in points for y in p.step_s]))
        return Fit(compute, None, None, None, residual_s=None, residual_rel=None,
                   quality="no_communication",
                   note="every link predicts 0 s of communication (nothing crosses a link): "
                        "compute_s is the median step time, exposure undefined" + excl,
                   **base)  # fmt: skip
    if len(points) < 2 or np.ptp(xs) == 0.0:
        why = (
            f"{len(points)} link(s) with included runs; the fit needs 2 or more"
            if len(points) < 2
            else "every link predicts the same communication time: slope undefined"
        )
        return Fit(None, None, None, None, residual_s=None, residual_rel=None,
                   quality="under_determined", note=why + excl, **base)  # fmt: skip
    ys = np.array([p.y for p in points])
    c, e = _line(xs, ys)
    c, e = float(c), float(e)
    resid = ys - (c + e * xs)
    residual_s = float(np.sqrt(np.mean(resid**2)))
    residual_rel = float(np.sqrt(np.mean((resid / ys) ** 2)))
    # Bootstrap: each link's runs resampled with replacement, link medians, refit.
    rng = np.random.default_rng(seed)
    bx = np.empty((n_resamples, len(points)))
    by = np.empty((n_resamples, len(points)))
    for j, p in enumerate(points):
        idx = rng.integers(0, len(p.step_s), size=(n_resamples, len(p.step_s)))
        bx[:, j] = np.median(np.asarray(p.comm_s)[idx], axis=1)
        by[:, j] = np.median(np.asarray(p.step_s)[idx], axis=1)
    bc, be = _line(bx, by)
    if residual_rel > POOR_FIT_REL:
        quality = "poor_fit"
        note = f"rms residual {residual_rel:.0%} of the step time (> {POOR_FIT_REL:.0%})"
    elif n_excluded:
        quality, note = "runs_excluded", "fit ok"
    else:
        quality, note = "ok", "fit ok"
    if len(points) == 2:
        note += "; 2 links: the line passes through both, no residual or leave-one-out check"
    if e == 0.0:
        note += "; least-squares slope was negative, exposure clamped to 0"
    return Fit(
        compute_s=c,
        exposure=e,
        compute_ci=_percentile_ci(bc),
        exposure_ci=_percentile_ci(be),
        residual_s=residual_s,
        residual_rel=residual_rel,
        quality=quality,
        note=note + excl,
        boot_compute=bc,
        boot_exposure=be,
        boot_step=by,
        **base,
    )


def fit_group(runs: Sequence[Mapping], seed: int = 0, n_resamples: int = N_RESAMPLES) -> Fit:
    """The fit of one variant group from its stored run rows (every link)."""
    points, n_runs, n_excluded = link_points(runs)
    no_prediction = bool(runs) and all(r.get("predicted_comm_s_per_step") is None for r in runs)
    return fit_points(points, n_runs, n_excluded, seed, n_resamples, no_prediction)


def extrapolation(points: Sequence[LinkPoint], x: float) -> float:
    """How far ``x`` (a communication time) lies outside the points' range, as a ratio: 1 inside,
    ``x / x_max`` above it, ``x_min / x`` below it (inf for 0 below a positive range). Pure."""
    lo, hi = min(p.x for p in points), max(p.x for p in points)
    if x > hi:
        return x / hi if hi > 0 else math.inf
    if x < lo:
        return lo / x if x > 0 else math.inf
    return 1.0


def bracket(points: Sequence[LinkPoint], x: float, exposure_high: float) -> tuple[float, float]:
    """The step times monotonicity allows at communication time ``x`` (module docstring),
    widened by the noise the runs show: the largest spread of one link's runs, or of one run's
    own step times (p10 to p90). ``exposure_high``: the exposure's upper bound, the slope beyond
    the slowest link where it is above 1. Pure."""
    points = sorted(points, key=lambda p: p.x)
    noise = max(max(p.step_s) - min(p.step_s) for p in points)
    noise = max([noise, *(s for p in points for s in p.spread_s)])
    below = [p for p in points if p.x <= x]
    above = [p for p in points if p.x >= x]
    slope = max(1.0, exposure_high)
    if below and above:  # inside: between the neighbours' runs
        return min(below[-1].step_s) - noise, max(above[0].step_s) + noise
    if below:  # slower than every measured link
        last = below[-1]
        return min(last.step_s) - noise, max(last.step_s) + noise + slope * (x - last.x)
    # Faster than every measured link: at most the fastest one's step time; from below nothing
    # measured bounds it (how much of a faster link's communication the step hides is not in
    # the runs of slower links: seen, a left-out faster link 0.1 s under the slower one's step
    # where the microbenchmark priced the difference at 0.027 s).
    return 0.0, max(above[0].step_s) + noise


def _joined(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    return min(a[0], b[0]), max(a[1], b[1])


def _loo_rows(fit: Fit, key: dict, seed: int = 0, n_resamples: int = N_RESAMPLES) -> list[dict]:
    """Leave-one-link-out: each link's step time predicted by the line through the others, with
    the prediction's interval (bootstrap of the others' fit joined with :func:`bracket`), how
    far it extrapolates, and whether the measured step time fell inside the interval."""
    out = []
    for p in fit.points:
        others = [q for q in fit.points if q is not p]
        pred = ci = extra = None
        if len(others) >= 2 and np.ptp([q.x for q in others]) > 0:
            sub = fit_points(others, seed=seed, n_resamples=n_resamples)
            pred = sub.compute_s + sub.exposure * p.x
            boot = _percentile_ci(sub.boot_compute + sub.boot_exposure * p.x)
            ci = _joined(boot, bracket(others, p.x, sub.exposure_ci[1]))
            extra = extrapolation(others, p.x)
        out.append(
            key
            | {
                "link": p.link,
                "n_runs": len(p.step_s),
                "predicted_comm_s": p.x,
                "measured_step_s": p.y,
                "predicted_step_s": pred,
                "rel_error": None if pred is None else (pred - p.y) / p.y,
                "n_links_fit": len(others),
                "predicted_step_ci_low_s": None if ci is None else ci[0],
                "predicted_step_ci_high_s": None if ci is None else ci[1],
                "extrapolation": extra,
                "covered": None if ci is None else bool(ci[0] <= p.y <= ci[1]),
            }
        )
    return out


def link_model_rows(
    sweep_id: str, runs: Sequence[Mapping], seed: int = 0, n_resamples: int = N_RESAMPLES
) -> tuple[list[dict], list[dict]]:
    """``link_model`` (one row) and ``link_model_check`` (one row per link with included runs)
    rows for the runs of ONE variant group (``GROUP_KEY`` columns, every link). No runs: none."""
    if not runs:
        return [], []
    key = {"sweep_id": sweep_id} | {k: runs[0].get(k) for k in GROUP_KEY}
    fit = fit_group(runs, seed, n_resamples)
    ci_c = fit.compute_ci or (None, None)
    ci_e = fit.exposure_ci or (None, None)
    model = key | {
        "n_links": fit.n_links,
        "n_runs": fit.n_runs,
        "n_excluded": fit.n_excluded,
        "compute_s": fit.compute_s,
        "compute_ci_low_s": ci_c[0],
        "compute_ci_high_s": ci_c[1],
        "exposure": fit.exposure,
        "exposure_ci_low": ci_e[0],
        "exposure_ci_high": ci_e[1],
        "residual_s": fit.residual_s,
        "residual_rel": fit.residual_rel,
        "quality": fit.quality,
        "note": fit.note,
    }
    return [model], _loo_rows(fit, key, seed, n_resamples)


# --------------------------------------------------------------------------------------------
# Projection to links that were not measured


@dataclass(frozen=True)
class Projection:
    bandwidth_gbps: float
    reference_link: str  # the measured link whose per-op efficiency is assumed
    predicted_comm_s: float
    step_s: float
    step_ci: tuple[float, float]
    fastest_link: str
    slowdown: float
    slowdown_ci: tuple[float, float]
    extrapolation: float  # 1 inside the fitted links' range (:func:`extrapolation`)


def parse_bandwidths(text: str) -> list[float]:
    """``"1,10,100"`` -> [1.0, 10.0, 100.0]. ValueError naming ``--bandwidth-gbps`` otherwise."""
    allowed = "a comma-separated list of positive numbers in GB/s, e.g. 1,10,100"
    values = []
    for part in (text or "").split(","):
        try:
            v = float(part.strip())
        except ValueError:
            raise ValueError(
                f"--bandwidth-gbps: {part.strip()!r} is not a number; {allowed}"
            ) from None
        if not math.isfinite(v) or v <= 0:
            raise ValueError(f"--bandwidth-gbps: {part.strip()!r} must be > 0; {allowed}")
        values.append(v)
    return values


def project(fit: Fit, link_busbw: Mapping[str, float], bandwidths: Sequence[float]) -> list:
    """Projections of one fit to hypothetical links (see the module docstring). Empty when the
    fit has no line or no measured link has a bus bandwidth."""
    if fit.exposure is None or fit.boot_step is None:
        return []
    measured = [(j, p) for j, p in enumerate(fit.points) if link_busbw.get(p.link, 0) > 0]
    if not measured:
        return []
    jf, fastest = max(measured, key=lambda jp: link_busbw[jp[1].link])
    out = []
    for bw in bandwidths:
        _, ref = min(measured, key=lambda jp: abs(math.log(link_busbw[jp[1].link] / bw)))
        x = ref.x * link_busbw[ref.link] / bw
        step = fit.compute_s + fit.exposure * x
        boot = fit.boot_compute + fit.boot_exposure * x
        slow = boot / fit.boot_step[:, jf]
        bounds = bracket(fit.points, x, fit.exposure_ci[1])
        out.append(
            Projection(
                bandwidth_gbps=bw,
                reference_link=ref.link,
                predicted_comm_s=x,
                step_s=step,
                step_ci=_joined(_percentile_ci(boot), bounds),
                fastest_link=fastest.link,
                slowdown=step / fastest.y,
                slowdown_ci=_joined(_percentile_ci(slow), tuple(b / fastest.y for b in bounds)),
                extrapolation=extrapolation(fit.points, x),
            )
        )
    return out


PROJECTION_COLUMNS = (
    "reference_link", "predicted_comm_s", "step_s", "step_ci_low_s", "step_ci_high_s",
    "fastest_link", "slowdown", "slowdown_ci_low", "slowdown_ci_high", "extrapolation",
)  # fmt: skip


def project_sweep(
    runs: Sequence[Mapping],
    link_busbw: Mapping[tuple[str, str], float],
    bandwidths: Sequence[float],
    seed: int = 0,
) -> list[dict]:
    """Rows of ``linksweep project``: every variant group of a sweep's runs x every bandwidth.
    ``link_busbw``: (link, placement) -> the link's bus bandwidth in GB/s (``Q.LINK_BUSBW``).
    A group without a line gets one row per bandwidth with the fit's quality and no figures."""
    groups: dict[tuple, list[Mapping]] = {}
    for r in map(with_flavour, runs):
        groups.setdefault(tuple(r.get(k) for k in GROUP_KEY), []).append(r)
    out = []
    for key in sorted(groups):
        fit = fit_group(groups[key], seed)
        placement = key[GROUP_KEY.index("placement")]
        busbw = {link: bw for (link, pl), bw in link_busbw.items() if pl == placement}
        projections = {p.bandwidth_gbps: p for p in project(fit, busbw, bandwidths)}
        for bw in bandwidths:
            p = projections.get(bw)
            row = dict(zip(GROUP_KEY, key, strict=True)) | {
                "bandwidth_gbps": bw,
                "exposure": fit.exposure,
            }
            if p is None:
                # No line (the fit's flag says why), or no measured link bandwidth to scale.
                quality = fit.quality if fit.exposure is None else "no_link_bandwidth"
                out.append(row | dict.fromkeys(PROJECTION_COLUMNS) | {"quality": quality})
                continue
            out.append(
                row
                | {
                    "reference_link": p.reference_link,
                    "predicted_comm_s": p.predicted_comm_s,
                    "step_s": p.step_s,
                    "step_ci_low_s": p.step_ci[0],
                    "step_ci_high_s": p.step_ci[1],
                    "fastest_link": p.fastest_link,
                    "slowdown": p.slowdown,
                    "slowdown_ci_low": p.slowdown_ci[0],
                    "slowdown_ci_high": p.slowdown_ci[1],
                    "extrapolation": p.extrapolation,
                    "quality": fit.quality,
                }
            )
    return out
