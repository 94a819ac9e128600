"""The pure parts of ``linksweep compare`` (orchestrator/compare/comparison.py, fingerprint.py): the exact
Mann-Whitney test against brute-force enumeration, verdicts at small and large n with planted run
figures, matching (unmatched variants, --link-map), slowdowns cancelling drift, the workload check
and the fingerprint diff.
"""

from __future__ import annotations

import itertools

import pytest

from orchestrator.analysis.stats import VARIANT_KEY
from orchestrator.compare.comparison import (
    FASTER,
    NO_CHANGE,
    NOT_COMPARABLE,
    SLOWER,
    CompareError,
    SweepFacts,
    compare_figures,
    compare_sweeps,
    comparison_json,
    mann_whitney_p,
    parse_link_map,
    parse_threshold,
)
from orchestrator.compare.fingerprint import diff_fingerprints, fingerprint, workload_mismatch
from orchestrator.compare.table import render_markdown, render_table
from workloads import catalog


def _brute_force_p(xs, ys) -> float:
    """Two-sided permutation p of the rank sum, by listing every split (midranks for ties)."""
    pooled = sorted(xs + ys)
    rank = {v: (pooled.index(v) + len(pooled) - pooled[::-1].index(v) + 1) / 2 for v in pooled}
    ranks = [rank[v] for v in xs + ys]
    n, total = len(xs), sum(ranks)
    mean = n * total / len(ranks)
    observed = abs(sum(ranks[:n]) - mean)
    splits = list(itertools.combinations(range(len(ranks)), n))
    extreme = sum(abs(sum(ranks[i] for i in s) - mean) >= observed - 1e-9 for s in splits)
    return extreme / len(splits)


def test_mann_whitney_separated_five_a_side_is_two_of_252():
    assert mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    assert mann_whitney_p([6, 7, 8, 9, 10], [1, 2, 3, 4, 5]) == pytest.approx(2 / 252)


@pytest.mark.parametrize(
    "xs, ys",
    [
        ([1.0, 2.0, 3.5, 4.0, 9.0], [2.5, 3.0, 5.0, 6.0, 7.0, 8.0]),
        ([1.0, 2.0, 2.0, 3.0, 5.0], [2.0, 3.0, 3.0, 4.0, 6.0]),  # ties across the sides
        ([0.2, 0.21, 0.19], [0.25, 0.26, 0.2, 0.3]),
        ([1.0, 1.0, 1.0], [1.0, 1.0]),  # all tied: no evidence at all
    ],
)
def test_mann_whitney_equals_enumeration(xs, ys):
    assert mann_whitney_p(xs, ys) == pytest.approx(_brute_force_p(xs, ys))


def test_mann_whitney_identical_samples_give_one():
    assert mann_whitney_p([1, 2, 3, 4, 5], [1, 2, 3, 4, 5]) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "text, value", [("5%", 0.05), ("0.05", 0.05), (" 30% ", 0.3), ("12.5%", 0.125)]
)
def test_parse_threshold(text, value):
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["abc", "0", "0%", "100%", "1.5", "-5%", "nan"])
def test_parse_threshold_refuses(text):
    with pytest.raises(CompareError, match="--threshold"):
        parse_threshold(text)


def test_parse_link_map():
    assert parse_link_map(["eth=ib", " slow = slower "]) == {"eth": "ib", "slow": "slower"}
    for bad in (["eth"], ["=ib"], ["eth="], ["a=b", "a=c"]):
        with pytest.raises(CompareError, match="--link-map"):
            parse_link_map(bad)


# --- verdicts with planted run figures --------------------------------------------------------


def test_small_n_slower_needs_ranges_apart_and_the_threshold():
    r = compare_figures([1.00, 1.02, 0.98], [1.20, 1.22, 1.18], 0.05)
    assert (r["verdict"], r["test"], r["p_value"]) == (SLOWER, "ranges", None)
    assert r["ratio"] == pytest.approx(1.2)
    assert (r["ratio_low"], r["ratio_high"]) == pytest.approx((1.18 / 1.02, 1.22 / 0.98))
    # beyond the threshold but the runs overlap: noise, not a change
    assert compare_figures([1.0, 1.5, 0.9], [1.2, 1.3, 1.0], 0.05)["verdict"] == NO_CHANGE
    # apart, but within the threshold
    assert compare_figures([1.00, 1.01], [1.03, 1.04], 0.05)["verdict"] == NO_CHANGE
    assert compare_figures([1.2, 1.21], [1.0, 1.01], 0.05)["verdict"] == FASTER


def test_large_n_uses_mann_whitney():
    base = [1.00, 1.03, 0.97, 1.05, 0.99, 1.02]
    cand = [1.12, 1.08, 1.15, 1.04, 1.10, 1.13]  # overlapping ranges, clearly shifted
    r = compare_figures(base, cand, 0.05)
    assert r["test"] == "mann-whitney" and r["p_value"] < 0.05
    assert r["verdict"] == SLOWER and r["interval_kind"] == "bootstrap95"
    mixed = compare_figures(base, [1.01, 0.98, 1.10, 0.96, 1.2, 0.99], 0.05)
    assert mixed["test"] == "mann-whitney" and mixed["verdict"] == NO_CHANGE


def test_throughput_lower_is_slower_and_missing_is_not_comparable():
    r = compare_figures([100, 101, 99], [80, 81, 79], 0.05, higher_is_better=True)
    assert r["verdict"] == SLOWER
    assert compare_figures([], [1.0], 0.05)["verdict"] == NOT_COMPARABLE
    assert compare_figures([1.0, None], [None], 0.05)["n_candidate"] == 0


# --- sweeps -----------------------------------------------------------------------------------

WORK = {"model": "gpt2-tiny", "precision": "fp32", "seq_len": 64, "micro_batch_size": 2,
        "world_size": 2}  # fmt: skip


def _facts(sid, times: dict, scale=1.0, links=("fast", "slow"), work=WORK, versions=None):
    """Three runs per (strategy, link) with step time ``times[(strategy, link index)]``."""
    runs = []
    for (strategy, i), t in times.items():
        for j in (0.99, 1.0, 1.01):
            runs.append(
                {"strategy": strategy, "offload": "none", "grad_accum": 1, "bucket_mb": 0,
                 "overlap_comm": "default", "link": links[i], "placement": "spread",
                 "grad_compression": catalog.default("grad_compression", strategy),
                 "powersgd_rank": 0,
                 "status": "ok", "throttled": False, "median_step_time_s": t * j * scale,
                 "tokens_per_s": 100 / (t * j * scale), "mfu": None, "ranks_per_gpu": 1,
                 "link_class": "NET"} | work
            )  # fmt: skip
    return SweepFacts(
        db=f"{sid}.duckdb",
        sweep={"sweep_id": sid, "versions": versions or {"torch": "2.5.1"}},
        runs=runs,
        spec={"links": {name: {} for name in links}},
    )


TIMES = {("ddp", 0): 0.2, ("ddp", 1): 0.4, ("zero3", 0): 0.3, ("zero3", 1): 0.9}


def test_drift_moves_step_times_not_slowdowns():
    """Every run 15% slower (the machine drifted): variants slower, slowdowns unchanged."""
    c = compare_sweeps(_facts("a", TIMES), _facts("b", TIMES, scale=1.15), 0.05)
    assert {r["verdict"] for r in c.variants} == {SLOWER}
    assert {r["verdict"] for r in c.slowdowns} == {NO_CHANGE}
    assert [r["ratio"] for r in c.slowdowns] == pytest.approx([1.0, 1.0])
    assert c.regressions == 4


def test_unmatched_variants_are_listed():
    cand = dict(TIMES) | {("zero2", 0): 0.25}
    del cand[("ddp", 1)]
    c = compare_sweeps(_facts("a", TIMES), _facts("b", cand), 0.05)
    assert [k["strategy"] + "/" + k["link"] for k in c.unmatched["baseline_only"]] == ["ddp/slow"]
    assert [k["strategy"] for k in c.unmatched["candidate_only"]] == ["zero2"]
    assert len(c.variants) == 3 and set(c.unmatched["baseline_only"][0]) == set(VARIANT_KEY)


def test_link_map_matches_renamed_links():
    base = _facts("a", TIMES, links=("tcp", "eth"))
    cand = _facts("b", TIMES, links=("tcp", "ib"))
    unmapped = compare_sweeps(base, cand, 0.05)
    assert len(unmapped.variants) == 2 and len(unmapped.unmatched["baseline_only"]) == 2
    c = compare_sweeps(base, cand, 0.05, {"eth": "ib"})
    assert sorted(r["key"]["link"] for r in c.variants) == ["ib", "ib", "tcp", "tcp"]
    assert {r["verdict"] for r in c.variants + c.slowdowns} == {NO_CHANGE}
    assert c.unmatched == {"baseline_only": [], "candidate_only": []}
    with pytest.raises(CompareError, match="no link 'nope'"):
        compare_sweeps(base, cand, 0.05, {"eth": "nope"})
    with pytest.raises(CompareError, match="baseline sweep a has no link 'ib'"):
        compare_sweeps(base, cand, 0.05, {"ib": "ib"})


def test_workload_mismatch_names_the_fields():
    other = WORK | {"precision": "bf16", "world_size": 4}
    c = compare_sweeps(_facts("a", TIMES), _facts("b", TIMES, work=other), 0.05)
    assert [(w["field"], w["baseline"], w["candidate"]) for w in c.workload] == [
        ("precision", "fp32", "bf16"), ("world_size", "2", "4"),
    ]  # fmt: skip
    assert workload_mismatch(_facts("a", TIMES).runs, _facts("b", TIMES).runs) == []


def test_four_ranks_one_to_a_node_and_two_to_a_node_are_different_workloads():
    spread = WORK | {"world_size": 4, "ranks_per_node": 1}
    paired = WORK | {"world_size": 4, "ranks_per_node": 2}
    c = compare_sweeps(_facts("a", TIMES, work=spread), _facts("b", TIMES, work=paired), 0.05)
    assert [(w["field"], w["baseline"], w["candidate"]) for w in c.workload] == [
        ("ranks_per_node", "1", "2")
    ]


def test_fingerprint_diff_lists_what_differs_only():
    a = _facts("a", TIMES, versions={"torch": "2.5.1", "ray": "2.40.0", "nccl": "2.21.5"})
    b = _facts("b", TIMES, versions={"torch": "2.5.1", "ray": "2.41.0", "nccl": "2.23.4"})
    fa, fb = fingerprint(a), fingerprint(b)
    assert fa["model"] == "gpt2-tiny" and fa["link classes (runs)"] == "NET"
    diff = diff_fingerprints(fa, fb)
    assert [d["field"] for d in diff] == ["version.nccl", "version.ray"]
    assert diff[1] == {"field": "version.ray", "baseline": "2.40.0", "candidate": "2.41.0"}
    assert diff_fingerprints(fa, fa) == []


def test_every_format_says_the_verdict():
    slow = {k: v * (2.0 if k[1] else 1.0) for k, v in TIMES.items()}
    c = compare_sweeps(_facts("a", TIMES), _facts("b", slow), 0.3)
    doc = comparison_json(c)
    assert doc["regressions"] == 4 and doc["threshold"] == 0.3
    for key in ("baseline", "candidate", "fingerprint", "variants", "slowdowns", "throughput",
                "linkbench", "unmatched"):  # fmt: skip
        assert key in doc
    row = doc["variants"][0]
    for key in ("key", "baseline_median_s", "candidate_median_s", "ratio", "ratio_low",
                "ratio_high", "n_baseline", "n_candidate", "test", "p_value", "verdict"):  # fmt: skip
        assert key in row
    table = render_table(c)
    assert table.splitlines()[-1].startswith("REGRESSION: 4 beyond 30%")
    md = render_markdown(c)
    assert md.startswith("❌ **REGRESSION: 4 beyond 30%")
    assert "| slowdown | ddp | slow |" in md


def _bench(link, source, in_place, values, size=1 << 22):
    return {"link": link, "placement": "spread", "collective": "all_reduce", "msg_bytes": size,
            "source": source, "in_place": in_place, "busbw_gbps": values}  # fmt: skip


def test_linkbench_per_source_and_in_place_by_ranges():
    base = _facts("a", TIMES)
    cand = _facts("b", TIMES)
    base = SweepFacts(**{**base.__dict__, "linkbench": [
        _bench("slow", "linksweep", None, [0.060, 0.061, 0.059]),
        _bench("slow", "nccl-tests", False, [0.058]),
        _bench("slow", "nccl-tests", True, [0.057]),
        _bench("fast", "linksweep", None, [0.80, 0.90, 0.70], size=1024),
    ]})  # fmt: skip
    cand = SweepFacts(**{**cand.__dict__, "linkbench": [
        _bench("slow", "linksweep", None, [0.024, 0.025, 0.023]),
        _bench("slow", "nccl-tests", False, [0.0241]),
        _bench("slow", "nccl-tests", True, [0.057]),
        _bench("fast", "linksweep", None, [0.75, 0.95, 0.72], size=1024),
    ]})  # fmt: skip
    rows = {
        (r["link"], r["source"], r["in_place"]): r for r in compare_sweeps(base, cand).linkbench
    }
    assert rows[("slow", "linksweep", None)]["verdict"] == SLOWER
    assert rows[("slow", "linksweep", None)]["ratio"] == pytest.approx(0.024 / 0.060)
    assert rows[("slow", "nccl-tests", False)]["verdict"] == SLOWER
    assert rows[("slow", "nccl-tests", True)]["verdict"] == NO_CHANGE
    assert rows[("fast", "linksweep", None)]["verdict"] == NO_CHANGE  # ranges overlap


def test_slowdowns_against_different_baseline_links_are_not_comparable():
    times = TIMES | {("ddp", 2): 0.3}
    links = ("fast", "slow", "mid")
    base = _facts("a", times, links=links)
    cand = _facts("b", times, links=links)
    spec = {"links": {name: {} for name in links}, "baseline_link": "slow"}
    c = compare_sweeps(base, SweepFacts(**{**cand.__dict__, "spec": spec}), 0.05)
    assert [(r["key"]["link"], r["verdict"]) for r in c.slowdowns] == [("mid", NOT_COMPARABLE)]
    assert {r["verdict"] for r in c.variants} == {NO_CHANGE}
    assert [r["key"]["link"] for r in compare_sweeps(base, cand, 0.05).slowdowns] == [
        "mid", "slow", "slow",
    ]  # fmt: skip
