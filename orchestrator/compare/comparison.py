"""Two sweeps compared: which variants got slower, which slowdowns grew, beyond the noise.

Pure: facts in (``SweepFacts``: one sweep's rows, as ``orchestrator/store/snapshot.py`` reads
them), a ``Comparison`` out (``comparison_json`` is the stable JSON of ``linksweep compare``).

What is compared, per matched variant (``stats.VARIANT_KEY``, every axis of the catalog; links
by name or ``link_map``). The key holds the flavour (``grad_sync``, ``reshard_after_forward``),
so two FSDP2 flavours are two variants, never matched to each other nor pooled. A run stored
without an axis (a database from before the axis, or a NULL) is its strategy's default
(``flavours.with_flavour``, which is ``catalog.filled``: DDP ``last``, FSDP2 ``each`` with
reshard, ZeRO ``n/a``), so an old DDP or ZeRO sweep still matches a new one that ran the
defaults.

- ``variants``: the run figures (``runs.median_step_time_s``, one number per run) of the runs that
  count (``stats.included``); ratio candidate / baseline of their medians.
- ``slowdowns``: each run on a link divided by the median of the same group's runs on the
  sweep's baseline link, in its own sweep (runs that measure a link: ``stats.link_measurement``);
  ratio of the two sweeps' medians of those. A ratio within one sweep cancels drift of the
  machine between the sweeps, which a step time does not.
- ``throughput``: tokens/s and MFU (where stored) per run; higher is better.
- ``linkbench``: busbw per link x placement x collective x message size x source x in-place,
  the median of the timed iterations, their range as the spread.

The test (``verdict``), honest at small n (docs/compare.md has the reasoning):

- the ratio's interval is ``stats.ratio_interval``: the range of run-pair ratios below
  ``stats.MIN_RUNS_FOR_CI`` runs a side, else the 95% bootstrap interval of the ratio of medians;
- with ``MIN_RUNS_FOR_CI`` (5) or more runs a side: the exact two-sided Mann-Whitney U test
  (``mann_whitney_p``: the permutation distribution of the rank sum, ties as midranks) at
  ``ALPHA``; below that only "the ranges of the runs do not overlap";
- ``slower`` / ``faster`` only when the ratio lies beyond ``threshold`` (``|ratio - 1| >
  threshold``) AND the test says the two sides differ; else ``no change``; ``not comparable``
  when a side has no figure. A regression is a variant ``slower`` or a slowdown ``slower``
  (grew); ``regressions`` counts them and ``linksweep compare`` exits 1 when there is one.

May import: fingerprint, orchestrator.analysis.flavours, orchestrator.analysis.stats, numpy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchestrator.analysis.flavours import with_flavour
from orchestrator.analysis.stats import (
    MIN_RUNS_FOR_CI,
    VARIANT_KEY,
    included,
    link_measurement,
    median,
    ratio_interval,
)
from orchestrator.compare.fingerprint import diff_fingerprints, fingerprint, workload_mismatch

ALPHA = 0.05
"""Significance level of the Mann-Whitney test (two-sided). With 5 runs a side the smallest
exact p-value is 2/252 = 0.0079, so the test can speak from 5 runs on."""
DEFAULT_THRESHOLD = 0.05
SLOWER, FASTER, NO_CHANGE, NOT_COMPARABLE = "slower", "faster", "no change", "not comparable"
TEST_MANN_WHITNEY = "mann-whitney"
TEST_RANGES = "ranges"
THROUGHPUT_FIGURES = ("tokens_per_s", "mfu")
LINKBENCH_KEY = ("link", "placement", "collective", "msg_bytes", "source", "in_place")


class CompareError(ValueError):
    """Bad input to a comparison: the message names the argument and what is allowed."""


def parse_threshold(text: str) -> float:
    """``5%`` or ``0.05`` -> 0.05. CompareError unless 0 < threshold < 1."""
    s = str(text).strip()
    try:
        value = float(s[:-1]) / 100.0 if s.endswith("%") else float(s)
    except ValueError:
        raise CompareError(
            f"--threshold {text!r}: not a number; give a percentage (5%) or a fraction (0.05)"
        ) from None
    if not 0.0 < value < 1.0 or value != value:
        raise CompareError(
            f"--threshold {text!r}: must lie between 0% and 100% exclusive, e.g. 5% or 0.05"
        )
    return value


def parse_link_map(items: Sequence[str] | None) -> dict[str, str]:
    """``["old=new", ...]`` -> {old: new}: a baseline link named ``old`` is the candidate's
    ``new``. CompareError on a malformed item or an old name given twice."""
    out: dict[str, str] = {}
    for item in items or ():
        old, sep, new = item.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise CompareError(
                f"--link-map {item!r}: expected OLD=NEW (baseline link=candidate link)"
            )
        if old.strip() in out:
            raise CompareError(f"--link-map: link {old.strip()!r} is mapped twice")
        out[old.strip()] = new.strip()
    return out


# --- the test ---------------------------------------------------------------------------------


def _midranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..N of ``values``, ties given the mean of the ranks they span."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(values.size, dtype=np.float64)
    sorted_vals = values[order]
    i = 0
    while i < values.size:
        j = i
        while j + 1 < values.size and sorted_vals[j + 1] == sorted_vals[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def mann_whitney_p(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Exact two-sided p-value of the Mann-Whitney U (Wilcoxon rank-sum) test of ``xs`` vs
    ``ys``: the share of all C(N, n) ways to split the pooled values into groups of these sizes
    whose rank sum lies at least as far from its mean as the observed one. Ties get midranks and
    the distribution is that of the midranks themselves (exact conditional test), computed by
    counting subsets per rank sum (doubled ranks are integers). No normal approximation."""
    x = np.asarray(list(xs), dtype=np.float64)
    y = np.asarray(list(ys), dtype=np.float64)
    if x.size == 0 or y.size == 0:
        raise ValueError("mann_whitney_p needs at least one value on each side")
    pooled = np.concatenate([x, y])
    doubled = np.rint(2.0 * _midranks(pooled)).astype(np.int64)
    n, total = x.size, int(doubled.sum())
    observed = int(doubled[: x.size].sum())
    counts = np.zeros((n + 1, total + 1), dtype=np.float64)
    counts[0, 0] = 1.0
    for i, r in enumerate(doubled):
        for k in range(min(n, i + 1), 0, -1):  # descending: each value used once per subset
            counts[k, r:] += counts[k - 1, : total + 1 - r]
    dist = counts[n]
    mean = n * total / pooled.size
    sums = np.arange(total + 1)
    extreme = np.abs(sums - mean) >= abs(observed - mean) - 1e-9
    return float(min(1.0, dist[extreme].sum() / dist.sum()))


def compare_figures(
    baseline: Sequence[float],
    candidate: Sequence[float],
    threshold: float,
    higher_is_better: bool = False,
    alpha: float = ALPHA,
    seed: int = 0,
) -> dict[str, Any]:
    """One figure on both sides: medians, ratio candidate/baseline with its interval, the test,
    the verdict (module doc). ``higher_is_better`` (throughput, busbw): a ratio below 1 is
    ``slower``."""
    b = [float(v) for v in baseline if v is not None]
    c = [float(v) for v in candidate if v is not None]
    out: dict[str, Any] = {
        "baseline_median_s": median(b) if b else None,
        "candidate_median_s": median(c) if c else None,
        "ratio": None,
        "ratio_low": None,
        "ratio_high": None,
        "interval_kind": None,
        "n_baseline": len(b),
        "n_candidate": len(c),
        "test": None,
        "p_value": None,
        "verdict": NOT_COMPARABLE,
    }
    if not b or not c or min(b) <= 0.0:
        return out
    ratio, low, high, kind = ratio_interval(c, b, seed=seed)
    out.update(ratio=ratio, ratio_low=low, ratio_high=high, interval_kind=kind)
    if min(len(b), len(c)) >= MIN_RUNS_FOR_CI:
        p = mann_whitney_p(c, b)
        out.update(test=TEST_MANN_WHITNEY, p_value=p)
        differ = p < alpha
    else:
        out["test"] = TEST_RANGES
        differ = min(c) > max(b) or max(c) < min(b)
    up, down = ratio > 1.0 + threshold, ratio < 1.0 - threshold
    if differ and (up or down):
        worse = down if higher_is_better else up
        out["verdict"] = SLOWER if worse else FASTER
    else:
        out["verdict"] = NO_CHANGE
    return out


# --- the sweeps -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepFacts:
    """One sweep's stored rows that a comparison reads (``orchestrator/store/snapshot.py``)."""

    db: str
    sweep: Mapping[str, Any]
    runs: Sequence[Mapping[str, Any]]
    linkbench: Sequence[Mapping[str, Any]] = ()
    nodes: Sequence[Mapping[str, Any]] = ()
    gpus: Sequence[Mapping[str, Any]] = ()
    gpu_links: Sequence[Mapping[str, Any]] = ()
    link_descriptions: Sequence[Mapping[str, Any]] = ()
    spec: Mapping[str, Any] = field(default_factory=dict)

    @property
    def sweep_id(self) -> str:
        return str(self.sweep["sweep_id"])

    @property
    def baseline_link(self) -> str | None:
        """The link slowdowns are against: the spec's ``baseline_link``, else its first link,
        else the first link the runs name."""
        if self.spec.get("baseline_link"):
            return str(self.spec["baseline_link"])
        links = self.spec.get("links")
        if isinstance(links, Mapping) and links:
            return str(next(iter(links)))
        return next((str(r["link"]) for r in self.runs if r.get("link")), None)

    @property
    def links(self) -> set[str]:
        return {str(r["link"]) for r in self.runs if r.get("link") is not None}


def _key(run: Mapping, link_map: Mapping[str, str] | None = None) -> tuple:
    """The run's ``VARIANT_KEY`` values, flavour included (a missing one: the default)."""
    run = with_flavour(run)
    key = tuple(run.get(k) for k in VARIANT_KEY)
    if link_map:
        at = VARIANT_KEY.index("link")
        key = key[:at] + (link_map.get(key[at], key[at]),) + key[at + 1 :]
    return key


def _key_dict(key: tuple) -> dict[str, Any]:
    return dict(zip(VARIANT_KEY, key, strict=True))


def _figures(runs, link_map, column: str, rule) -> dict[tuple, list[float]]:
    """Per variant key: ``column`` of the runs that pass ``rule`` (None values skipped; every
    variant seen gets a list, so one whose runs all failed is matched and not comparable)."""
    out: dict[tuple, list[float]] = {}
    for r in runs:
        xs = out.setdefault(_key(r, link_map), [])
        if rule(r) and r.get(column) is not None:
            xs.append(float(r[column]))
    return out


def _normalised(runs, link_map, baseline_link: str | None) -> dict[tuple, list[float]]:
    """Per variant key on a non-baseline link: each run's figure over the median of its group's
    runs on ``baseline_link`` in the same sweep (both link measurements)."""
    figures = _figures(runs, None, "median_step_time_s", link_measurement)
    at = VARIANT_KEY.index("link")
    out: dict[tuple, list[float]] = {}
    for key, xs in figures.items():
        if key[at] == baseline_link:
            continue
        base = figures.get(key[:at] + (baseline_link,) + key[at + 1 :])
        if not base or median(base) <= 0:
            continue
        mapped = _key(_key_dict(key), link_map)
        out[mapped] = [x / median(base) for x in xs]
    return out


def _row(key: tuple, figure: str, result: dict) -> dict[str, Any]:
    return {"key": _key_dict(key), "figure": figure} | result


def _matched(base: dict, cand: dict, figure: str, threshold: float, higher=False) -> list:
    return [
        _row(key, figure, compare_figures(base[key], cand[key], threshold, higher))
        for key in sorted(set(base) & set(cand), key=_sort_key)
    ]


def _sort_key(key: tuple) -> tuple:
    """Numbers in numeric order (message sizes, grad_accum), None last."""
    number = (int, float)
    return tuple(
        (v is None, 0, v, "") if isinstance(v, number) else (v is None, 1, 0, str(v)) for v in key
    )


def check_link_map(link_map: Mapping[str, str], base: SweepFacts, cand: SweepFacts) -> None:
    """CompareError when ``link_map`` names a link the baseline or the candidate lacks."""
    for old, new in link_map.items():
        if old not in base.links:
            known = ", ".join(sorted(base.links)) or "none"
            raise CompareError(
                f"--link-map {old}={new}: the baseline sweep {base.sweep_id} has no link "
                f"{old!r}; its links: {known}"
            )
        if new not in cand.links:
            known = ", ".join(sorted(cand.links)) or "none"
            raise CompareError(
                f"--link-map {old}={new}: the candidate sweep {cand.sweep_id} has no link "
                f"{new!r}; its links: {known}"
            )


def _linkbench(rows, link_map) -> dict[tuple, list[float]]:
    out: dict[tuple, list[float]] = {}
    for r in rows:
        link = link_map.get(r["link"], r["link"]) if link_map else r["link"]
        key = (link, *(r.get(k) for k in LINKBENCH_KEY[1:]))
        out.setdefault(key, []).extend(float(v) for v in (r.get("busbw_gbps") or []) if v)
    return out


def compare_linkbench(base: SweepFacts, cand: SweepFacts, threshold: float, link_map) -> list:
    """busbw per ``LINKBENCH_KEY``: medians over iterations, ``slower``/``faster`` when the ratio
    is beyond ``threshold`` and the ranges of the iterations do not overlap."""
    b, c = _linkbench(base.linkbench, link_map), _linkbench(cand.linkbench, None)
    rows = []
    for key in sorted(set(b) & set(c), key=_sort_key):
        res = compare_figures(b[key], c[key], threshold, higher_is_better=True)
        if res["test"] == TEST_MANN_WHITNEY:  # iterations of one run are not independent runs
            res = _ranges_only(b[key], c[key], res, threshold)
        rows.append(
            dict(zip(LINKBENCH_KEY, key, strict=True))
            | {
                "baseline_busbw_gbps": res["baseline_median_s"],
                "candidate_busbw_gbps": res["candidate_median_s"],
                "ratio": res["ratio"],
                "ratio_low": res["ratio_low"],
                "ratio_high": res["ratio_high"],
                "n_baseline": res["n_baseline"],
                "n_candidate": res["n_candidate"],
                "verdict": res["verdict"],
            }
        )
    return rows


def _ranges_only(b: list[float], c: list[float], res: dict, threshold: float) -> dict:
    differ = min(c) > max(b) or max(c) < min(b)
    ratio = res["ratio"]
    if differ and ratio < 1.0 - threshold:
        verdict = SLOWER
    elif differ and ratio > 1.0 + threshold:
        verdict = FASTER
    else:
        verdict = NO_CHANGE
    return res | {"test": TEST_RANGES, "p_value": None, "verdict": verdict}


@dataclass(frozen=True)
class Comparison:
    """What ``linksweep compare`` prints; ``comparison_json`` is its stable JSON."""

    baseline: dict[str, Any]
    candidate: dict[str, Any]
    fingerprint: list[dict[str, Any]]
    workload: list[dict[str, Any]]
    variants: list[dict[str, Any]]
    slowdowns: list[dict[str, Any]]
    throughput: list[dict[str, Any]]
    linkbench: list[dict[str, Any]]
    unmatched: dict[str, list[dict[str, Any]]]
    threshold: float
    alpha: float = ALPHA

    @property
    def regressions(self) -> int:
        return sum(r["verdict"] == SLOWER for r in (*self.variants, *self.slowdowns))


def _side(facts: SweepFacts) -> dict[str, Any]:
    return {
        "sweep_id": facts.sweep_id,
        "db": facts.db,
        "name": facts.sweep.get("name"),
        "started_at": str(facts.sweep.get("started_at") or "") or None,
        "baseline_link": facts.baseline_link,
    }


def compare_sweeps(
    base: SweepFacts,
    cand: SweepFacts,
    threshold: float = DEFAULT_THRESHOLD,
    link_map: Mapping[str, str] | None = None,
) -> Comparison:
    """The whole comparison of ``cand`` against ``base`` (module doc). CompareError when
    ``link_map`` names a link a side lacks."""
    link_map = dict(link_map or {})
    check_link_map(link_map, base, cand)
    step_b = _figures(base.runs, link_map, "median_step_time_s", included)
    step_c = _figures(cand.runs, None, "median_step_time_s", included)
    variants = _matched(step_b, step_c, "median_step_time_s", threshold)
    slow_b = _normalised(base.runs, link_map, base.baseline_link)
    slow_c = _normalised(cand.runs, None, cand.baseline_link)
    mapped_bl = link_map.get(base.baseline_link or "", base.baseline_link)
    if mapped_bl == cand.baseline_link:
        slowdowns = _matched(slow_b, slow_c, "slowdown", threshold)
    else:  # slowdowns against different links say nothing about each other
        slowdowns = [
            _row(k, "slowdown", compare_figures([], [], threshold))
            for k in sorted(set(slow_b) & set(slow_c), key=_sort_key)
        ]
    throughput = []
    for col in THROUGHPUT_FIGURES:
        tb = _figures(base.runs, link_map, col, included)
        tc = _figures(cand.runs, None, col, included)
        keep = {k for k in set(tb) & set(tc) if tb[k] and tc[k]}
        throughput += _matched(
            {k: tb[k] for k in keep}, {k: tc[k] for k in keep}, col, threshold, higher=True
        )
    unmatched = {
        "baseline_only": [_key_dict(k) for k in sorted(set(step_b) - set(step_c), key=_sort_key)],
        "candidate_only": [_key_dict(k) for k in sorted(set(step_c) - set(step_b), key=_sort_key)],
    }
    return Comparison(
        baseline=_side(base),
        candidate=_side(cand),
        fingerprint=diff_fingerprints(fingerprint(base, link_map), fingerprint(cand)),
        workload=workload_mismatch(base.runs, cand.runs),
        variants=variants,
        slowdowns=slowdowns,
        throughput=throughput,
        linkbench=compare_linkbench(base, cand, threshold, link_map),
        unmatched=unmatched,
        threshold=threshold,
    )


def comparison_json(c: Comparison) -> dict[str, Any]:
    """The stable JSON of ``linksweep compare --format json`` (docs/compare.md)."""
    return {
        "baseline": c.baseline,
        "candidate": c.candidate,
        "fingerprint": c.fingerprint,
        "workload_mismatch": c.workload,
        "variants": c.variants,
        "slowdowns": c.slowdowns,
        "throughput": c.throughput,
        "linkbench": c.linkbench,
        "unmatched": c.unmatched,
        "regressions": c.regressions,
        "threshold": c.threshold,
        "alpha": c.alpha,
    }
