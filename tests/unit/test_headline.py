"""The headline's sentences and table, from synthetic view rows (no database)."""

from __future__ import annotations

import pytest

from orchestrator.analysis.headline import NO_DIFFERENCE, build_headline, extra_vs_predicted
from orchestrator.analysis.links import describe_links, link_label

KEY = {"offload": "none", "bucket_mb": 25, "placement": "spread"}


def _sens(strategy, ga, slowdown, lo, hi, kind="range", link="slow"):
    return KEY | {
        "strategy": strategy,
        "grad_accum": ga,
        "link": link,
        "baseline_link": "fast",
        "slowdown": slowdown,
        "ci_low": lo,
        "ci_high": hi,
        "interval_kind": kind,
    }


def _var(strategy, ga, link, nbytes, med=1.0, pred=None):
    return KEY | {
        "strategy": strategy,
        "grad_accum": ga,
        "link": link,
        "comm_bytes_per_step": nbytes,
        "median_step_time_s": med,
        "predicted_comm_s_per_step": pred,
    }


VARIANTS = [
    _var("ddp", 1, "fast", 13.5e6),
    _var("ddp", 8, "fast", 13.5e6),
    _var("zero3", 1, "fast", 27.1e6),
    _var("zero3", 8, "fast", 216.5e6),
]
OVERVIEW = [
    {"link": "fast", "kind": "emulated", "rate": None, "rated_gbps": None,
     "measured_busbw_gbps": 0.21},
    {"link": "slow", "kind": "emulated", "rate": "500mbit", "rated_gbps": 0.0625,
     "measured_busbw_gbps": 0.0601},
]  # fmt: skip


def test_zero3_hurt_most_and_more_with_grad_accum():
    sens = [
        _sens("ddp", 1, 1.91, 1.60, 2.00),
        _sens("ddp", 8, 1.19, 1.10, 1.30),
        _sens("zero3", 1, 2.29, 2.10, 2.40),
        _sens("zero3", 8, 3.15, 2.90, 3.40),
    ]
    h = build_headline(sens, VARIANTS, OVERVIEW, ["fast", "slow"])
    (link,) = h.links
    first = link.sentences[0]
    assert first.startswith(
        "On slow (tc 500mbit = 0.0625 GB/s; measured busbw 0.0601 GB/s), ZeRO-3 is hurt most, "
        "and more as grad_accum grows: its steps take 2.29× as long as on fast at grad_accum 1 "
        "and 3.15× at 8; DDP's take 1.91× at grad_accum 1 and 1.19× at 8 (falling)."
    )
    assert NO_DIFFERENCE not in " ".join(link.sentences)
    assert link.sentences[-1] == (
        "Why: measured traffic per optimizer step per rank: DDP 13.5 MB at every grad_accum; "
        "ZeRO-3 27.1 MB at grad_accum 1, 216 MB at 8."
    )
    # the compact table: strategy x grad_accum -> slowdown with its interval
    assert list(link.cells) == ["DDP", "ZeRO-3"] and link.grad_accums == [1, 8]
    assert link.cells["ZeRO-3"][8].text() == "3.15× [2.90–3.40]"
    assert link.interval_label == "range of runs"
    assert any("repeats: 5 or more" in n for n in h.notes)


def test_ddp_hurt_most():
    sens = [
        _sens("ddp", 1, 3.0, 2.8, 3.2, "bootstrap95"),
        _sens("ddp", 8, 2.9, 2.7, 3.1, "bootstrap95"),
        _sens("zero3", 1, 1.5, 1.3, 1.7, "bootstrap95"),
        _sens("zero3", 8, 1.4, 1.2, 1.6, "bootstrap95"),
    ]
    h = build_headline(sens, VARIANTS, (), ["fast", "slow"])
    (link,) = h.links
    assert link.sentences[0].startswith(
        "On slow, DDP is hurt most, about as much at every grad_accum (within the spread): "
        "its steps take 3.00× as long as on fast at grad_accum 1 and 2.90× at 8; "
        "ZeRO-3's take 1.50× at grad_accum 1 and 1.40× at 8."
    )
    assert link.interval_label == "95% bootstrap CI" and h.notes == []


def test_nothing_differs_beyond_the_spread():
    sens = [
        _sens("ddp", 1, 1.02, 0.95, 1.10),
        _sens("ddp", 8, 0.99, 0.90, 1.08),
        _sens("zero3", 1, 1.05, 0.97, 1.12),
        _sens("zero3", 8, 1.01, 0.93, 1.09),
    ]
    (link,) = build_headline(sens, VARIANTS, (), ["fast", "slow"]).links
    assert link.sentences == [
        f"On slow, {NO_DIFFERENCE}: no strategy is slower than on fast beyond the spread of its "
        "runs (every interval includes 1; slowdowns 0.99×–1.05×)."
    ]


def test_slower_but_strategies_overlap():
    sens = [
        _sens("ddp", 1, 2.0, 1.5, 2.5),
        _sens("zero3", 1, 2.2, 1.8, 2.6),
    ]
    (link,) = build_headline(sens, VARIANTS, (), ["fast", "slow"]).links
    assert f"the strategies show {NO_DIFFERENCE}" in link.sentences[0]
    assert "hurt most" not in " ".join(link.sentences)


def test_partial_separation_names_the_tied_grad_accum():
    sens = [
        _sens("ddp", 1, 2.0, 1.5, 2.5),
        _sens("ddp", 8, 1.2, 1.1, 1.3),
        _sens("zero3", 1, 2.2, 1.8, 2.6),
        _sens("zero3", 8, 3.1, 2.9, 3.3),
    ]
    (link,) = build_headline(sens, VARIANTS, (), ["fast", "slow"]).links
    assert "ZeRO-3 is hurt most" in link.sentences[0]
    assert link.sentences[1] == f"At grad_accum 1 the strategies show {NO_DIFFERENCE}."


def test_no_slowdowns_no_headline():
    assert build_headline([], VARIANTS).empty


def test_extra_vs_predicted():
    variants = [
        _var("zero3", 8, "fast", 1, med=0.5, pred=0.02),
        _var("zero3", 8, "slow", 1, med=3.55, pred=2.80),
        _var("ddp", 8, "slow", 1, med=1.0, pred=None),
        _var("ddp", 8, "fast", 1, med=0.8, pred=None),
    ]
    rows = extra_vs_predicted(variants, "fast")
    assert [(r["strategy"], r["link"]) for r in rows] == [("ddp", "slow"), ("zero3", "slow")]
    z = rows[1]
    assert z["measured_extra_s"] == pytest.approx(3.05)
    assert z["predicted_extra_s"] == pytest.approx(2.78)
    assert z["ratio"] == pytest.approx(3.05 / 2.78)
    assert rows[0]["predicted_extra_s"] is None and rows[0]["ratio"] is None


def test_emulated_link_described_with_its_tc_rate():
    emulated = {
        "ls-fast": {"link": "fast", "rate": None, "delay": None, "rated_gbps": None},
        "ls-slow": {"link": "slow", "rate": "500mbit", "delay": "1ms", "rated_gbps": 0.0625},
    }
    links = {
        "fast": {"GLOO_SOCKET_IFNAME": "ls-fast"},
        "slow": {"GLOO_SOCKET_IFNAME": "ls-slow"},
        "no_p2p": {"NCCL_P2P_DISABLE": "1"},
    }
    rows = {r["link"]: r for r in describe_links(links, emulated, "s1")}
    slow = rows["slow"]
    assert (slow["kind"], slow["interface"], slow["rate"], slow["delay"]) == (
        "emulated", "ls-slow", "500mbit", "1ms"
    )  # fmt: skip
    assert slow["rated_gbps"] == 0.0625 and "tc rate 500mbit" in slow["description"]
    assert rows["fast"]["rate"] is None and "unshaped" in rows["fast"]["description"]
    assert rows["no_p2p"]["kind"] == "nccl" and "P2P off" in rows["no_p2p"]["description"]
    shown = link_label("slow", slow | {"measured_busbw_gbps": 0.0601})
    assert shown == "slow (tc 500mbit = 0.0625 GB/s; +1ms; measured busbw 0.0601 GB/s)"
    assert link_label("fast", rows["fast"]) == "fast (unshaped)"
    assert link_label("x", None) == "x"


def test_cluster_up_state_gives_each_interface_its_shape():
    from orchestrator.emulated.describe import shapes_by_interface

    state = {
        "plan": {
            "links": [
                {"name": "ctl", "rate": None, "delay": None},
                {"name": "fast", "rate": None, "delay": None},
                {"name": "slow", "rate": "500mbit", "delay": None},
            ]
        }
    }
    shapes = shapes_by_interface(state)
    assert set(shapes) == {"ls-fast", "ls-slow"}  # not ctl, Ray's own link
    assert shapes["ls-slow"]["rated_gbps"] == pytest.approx(0.0625)
    assert shapes["ls-slow"]["rate"] == "500mbit"


def test_quickstart_like_numbers_flag_a_slowdown_within_noise():
    # the shape of a real quickstart database (2 repeats: range intervals)
    sens = [
        _sens("ddp", 1, 1.90, 1.43, 2.71),
        _sens("ddp", 8, 0.98, 0.90, 1.09),
        _sens("zero3", 1, 2.49, 2.02, 3.15),
        _sens("zero3", 8, 2.49, 2.42, 2.55),
    ]
    (link,) = build_headline(sens, VARIANTS, (), ["fast", "slow"]).links
    assert link.sentences[0] == (
        "On slow, ZeRO-3 is hurt most, about as much at every grad_accum (within the spread): "
        "its steps take 2.49× as long as on fast at grad_accum 1 and 2.49× at 8; DDP's take "
        "1.90× at grad_accum 1 and 0.98× at 8 (falling; not slower beyond the spread at 8)."
    )
    assert link.sentences[1] == f"At grad_accum 1 the strategies show {NO_DIFFERENCE}."


def test_run_prints_the_headline_sentences_whole_and_the_interval_kind():
    import io

    from orchestrator.ui import print_headline

    sens = [
        _sens("ddp", 1, 1.91, 1.60, 2.00),
        _sens("ddp", 8, 1.19, 1.10, 1.30),
        _sens("zero3", 1, 2.29, 2.10, 2.40),
        _sens("zero3", 8, 3.15, 2.90, 3.40),
    ]
    h = build_headline(sens, VARIANTS, OVERVIEW, ["fast", "slow"])
    buf = io.StringIO()
    print_headline(h, file=buf)
    text = buf.getvalue()
    lines = text.splitlines()
    assert h.links[0].sentences[0] in lines and h.links[0].sentences[-1] in lines
    assert "slowdown on slow ÷ fast [range of runs]" in text  # not eaten as rich markup
    assert "3.15× [2.90–3.40]" in text and "repeats: 5 or more" in text


def test_single_runs_give_no_finding():
    sens = [_sens("ddp", 1, 1.9, 1.9, 1.9), _sens("zero3", 1, 2.5, 2.5, 2.5)]
    (link,) = build_headline(sens, VARIANTS, (), ["fast", "slow"]).links
    assert link.sentences[0].startswith("On slow, no finding yet: slowdowns DDP 1.90×")
    assert "single runs" in link.sentences[0] and "hurt most" not in link.sentences[0]
    assert link.cells["DDP"][1].text() == "1.90×"


def test_with_overlap_as_an_axis_strategies_are_compared_at_one_overlap_setting():
    """Overlap on vs off of one strategy is not "which strategy is hurt most": each overlap
    setting gets its own sentence, and the table one row per strategy and setting."""

    def sens(strategy, overlap, ga, x, lo, hi):
        return _sens(strategy, ga, x, lo, hi) | {"overlap_comm": overlap}

    rows = [
        sens("ddp", "default", 1, 1.9, 1.4, 2.1), sens("ddp", "default", 8, 1.25, 1.0, 1.4),
        sens("ddp", "false", 1, 2.2, 2.1, 2.4), sens("ddp", "false", 8, 1.28, 1.03, 1.39),
        sens("zero3", "default", 1, 2.65, 2.5, 2.7), sens("zero3", "default", 8, 2.7, 2.4, 3.2),
        sens("zero3", "false", 1, 2.2, 2.0, 2.5), sens("zero3", "false", 8, 3.06, 2.84, 3.14),
    ]  # fmt: skip
    variants = [v | {"overlap_comm": o} for v in VARIANTS for o in ("default", "false")]
    (link,) = build_headline(rows, variants, OVERVIEW, ["fast", "slow"]).links
    default, off = link.sentences[0], link.sentences[1]
    assert "with overlap default, ZeRO-3 is hurt most" in default
    assert "with overlap off, ZeRO-3 is hurt most, and more as grad_accum grows" in off
    assert NO_DIFFERENCE not in default + off  # ZeRO-3 off at 8 clears DDP off at 8
    assert list(link.cells) == [
        "DDP (overlap default)", "DDP (overlap off)",
        "ZeRO-3 (overlap default)", "ZeRO-3 (overlap off)",
    ]  # fmt: skip


def test_why_names_the_collectives_and_dtypes_each_strategy_sent():
    """bf16 DDP all-reduces fp32 gradients unless compressed; bf16 ZeRO sends bf16: the
    sentence that explains a slowdown by bytes says which collectives in which dtype."""
    sens = [
        _sens("ddp", 1, 1.91, 1.60, 2.00) | {"grad_compression": "none"},
        _sens("ddp", 1, 1.40, 1.30, 1.50) | {"grad_compression": "bf16"},
        _sens("zero3", 1, 2.29, 2.10, 2.40) | {"grad_compression": "n/a"},
    ]
    variants = [
        _var("ddp", 1, "fast", 13.5e6)
        | {"grad_compression": "none", "comm_dtypes": "all_reduce fp32"},
        _var("ddp", 1, "fast", 6.75e6)
        | {"grad_compression": "bf16", "comm_dtypes": "all_reduce bf16"},
        _var("zero3", 1, "fast", 27.1e6)
        | {"grad_compression": "n/a", "comm_dtypes": "all_gather bf16 + reduce_scatter bf16"},
    ]
    (link,) = build_headline(sens, variants, OVERVIEW, ["fast", "slow"]).links
    # the compression is named beside the strategy where it is not DDP's default (none)
    assert list(link.cells) == ["DDP", "DDP (bf16 gradients)", "ZeRO-3"]
    assert link.sentences[-1] == (
        "Why: measured traffic per optimizer step per rank: DDP 13.5 MB at "
        "grad_accum 1 (all_reduce fp32); DDP (bf16 gradients) 6.75 MB at grad_accum 1 "
        "(all_reduce bf16); ZeRO-3 27.1 MB at grad_accum 1 (all_gather bf16 + reduce_scatter bf16)."
    )
    # one DDP compression: none in the names, the dtypes still in the sentence
    (one,) = build_headline(
        [sens[0], sens[2]], [variants[0], variants[2]], OVERVIEW, ["fast", "slow"]
    ).links
    assert list(one.cells) == ["DDP", "ZeRO-3"]
    assert (
        "1 (all_reduce fp32); ZeRO-3 27.1 MB at grad_accum 1 (all_gather bf16" in one.sentences[-1]
    )
