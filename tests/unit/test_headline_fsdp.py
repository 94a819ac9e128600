"""The headline with FSDP2 beside DDP and ZeRO-3: each FSDP2 flavour is its own row, named
readably, and the "why" gives each its measured bytes per step (synthetic view rows)."""

from __future__ import annotations

from orchestrator.analysis.headline import build_headline, extra_vs_predicted, strategy_name
from tests.unit.test_headline import OVERVIEW  # the same two links, fast and slow at 500mbit

KEY = {"offload": "none", "bucket_mb": 25, "placement": "spread", "overlap_comm": "default"}
DDP = {"strategy": "ddp", "grad_compression": "none", "powersgd_rank": 0, "grad_sync": "last"}
ZERO3 = {"strategy": "zero3", "grad_compression": "n/a", "powersgd_rank": 0, "grad_sync": "n/a"}
NA = {"grad_compression": "n/a", "powersgd_rank": 0, "reshard_after_forward": "n/a"}
FSDP_EACH = {"strategy": "fsdp", "grad_compression": "n/a", "powersgd_rank": 0, "grad_sync": "each"}
FSDP_EACH |= {"reshard_after_forward": "true"}
FSDP_LAST = {"strategy": "fsdp", "grad_compression": "n/a", "powersgd_rank": 0, "grad_sync": "last"}
FSDP_LAST |= {"reshard_after_forward": "false"}
DDP |= {"reshard_after_forward": "n/a"}
ZERO3 |= {"reshard_after_forward": "n/a"}
PARAM_B = 498e6  # gpt2's parameters in fp32, one full copy


def _sens(variant, ga, slowdown, lo, hi):
    return (
        KEY
        | variant
        | {
            "grad_accum": ga,
            "link": "slow",
            "baseline_link": "fast",
            "slowdown": slowdown,
            "ci_low": lo,
            "ci_high": hi,
            "interval_kind": "range",
        }
    )


def _var(variant, ga, link, measured, expected=None, dtypes=None):
    return (
        KEY
        | variant
        | {
            "grad_accum": ga,
            "link": link,
            "comm_bytes_per_step": measured,
            "expected_comm_bytes_per_step": expected,
            "comm_dtypes": dtypes,
            "median_step_time_s": 1.0,
        }
    )


# Bytes per optimizer step, as measured: DDP one all-reduce per step (no_sync); ZeRO-3 and
# FSDP2 resharding gather twice and reduce-scatter once per micro-batch; FSDP2 without
# resharding gathers once per micro-batch and, with sync last, reduce-scatters on the last only.
MEASURED = {
    ("ddp", 1): PARAM_B, ("ddp", 8): PARAM_B,
    ("zero3", 1): 3 * PARAM_B, ("zero3", 8): 24 * PARAM_B,
    ("each", 1): 3 * PARAM_B, ("each", 8): 24 * PARAM_B,
    ("last", 1): 2 * PARAM_B, ("last", 8): 9 * PARAM_B,
}  # fmt: skip
FLAVOURS = {"ddp": DDP, "zero3": ZERO3, "each": FSDP_EACH, "last": FSDP_LAST}
DTYPES = {
    "ddp": "all_reduce fp32",
    "zero3": "all_gather fp32 + reduce_scatter fp32",
    "each": "all_gather fp32 + reduce_scatter fp32",
    "last": "all_gather fp32 + reduce_scatter fp32",
}
VARIANTS = [
    # the expected bytes differ on purpose: the "why" must read the measured ones
    _var(FLAVOURS[k], ga, link, b, expected=b * 0.5, dtypes=DTYPES[k])
    for (k, ga), b in MEASURED.items()
    for link in ("fast", "slow")
]
SENS = [
    _sens(DDP, 1, 1.91, 1.60, 2.00),
    _sens(DDP, 8, 1.19, 1.10, 1.30),
    _sens(ZERO3, 1, 2.29, 2.10, 2.40),
    _sens(ZERO3, 8, 3.15, 2.90, 3.40),
    _sens(FSDP_EACH, 1, 2.35, 2.20, 2.50),
    _sens(FSDP_EACH, 8, 3.90, 3.60, 4.10),
    _sens(FSDP_LAST, 1, 2.05, 1.95, 2.15),
    _sens(FSDP_LAST, 8, 2.10, 2.00, 2.20),
]


def test_two_fsdp2_flavours_are_two_named_rows():
    (link,) = build_headline(SENS, VARIANTS, OVERVIEW, ["fast", "slow"]).links
    assert list(link.cells) == [
        "DDP",
        "ZeRO-3",
        "FSDP2 (reshard, sync each)",
        "FSDP2 (no reshard, sync last)",
    ]
    assert link.cells["FSDP2 (reshard, sync each)"][8].text() == "3.90× [3.60–4.10]"
    assert link.cells["FSDP2 (no reshard, sync last)"][8].text() == "2.10× [2.00–2.20]"
    assert link.grad_accums == [1, 8]


def test_headline_names_the_most_hurt_fsdp2_flavour_and_its_measured_bytes():
    (link,) = build_headline(SENS, VARIANTS, OVERVIEW, ["fast", "slow"]).links
    assert link.sentences[0].startswith(
        "On slow (tc 500mbit = 0.0625 GB/s; measured busbw 0.0601 GB/s), "
        "FSDP2 (reshard, sync each) is hurt most, and more as grad_accum grows: its steps take "
        "2.35× as long as on fast at grad_accum 1 and 3.90× at 8; DDP's take 1.91× at "
        "grad_accum 1 and 1.19× at 8 (falling); "
    )
    assert (
        "FSDP2 (no reshard, sync last)'s take 2.05× at grad_accum 1 and 2.10× at 8"
        in (link.sentences[0])
    )
    why = link.sentences[-1]
    assert why == (
        "Why: measured traffic per optimizer step per rank: DDP 498 MB at every grad_accum "
        "(all_reduce fp32); ZeRO-3 1,494 MB at grad_accum 1, 11,952 MB at 8 (all_gather fp32 + "
        "reduce_scatter fp32); FSDP2 (reshard, sync each) 1,494 MB at grad_accum 1, 11,952 MB "
        "at 8 (all_gather fp32 + reduce_scatter fp32); FSDP2 (no reshard, sync last) 996 MB at "
        "grad_accum 1, 4,482 MB at 8 (all_gather fp32 + reduce_scatter fp32)."
    )
    # the bytes are the measured ones, each flavour its own
    assert link.bytes_per_step["FSDP2 (reshard, sync each)"] == {1: 3 * PARAM_B, 8: 24 * PARAM_B}
    assert link.bytes_per_step["FSDP2 (no reshard, sync last)"] == {1: 2 * PARAM_B, 8: 9 * PARAM_B}


def test_ddp_hurt_most_among_fsdp2_flavours():
    sens = [
        _sens(DDP, 1, 4.0, 3.8, 4.2),
        _sens(DDP, 8, 3.9, 3.7, 4.1),
        *(s for s in SENS if s["strategy"] != "ddp"),
    ]
    (link,) = build_headline(sens, VARIANTS, (), ["fast", "slow"]).links
    assert link.sentences[0].startswith("On slow, DDP is hurt most")
    assert (
        "FSDP2 (reshard, sync each)'s take 2.35× at grad_accum 1 and 3.90× at 8"
        in (link.sentences[0])
    )


def test_strategy_names():
    assert strategy_name(FSDP_EACH) == "FSDP2 (reshard, sync each)"
    assert strategy_name(FSDP_LAST) == "FSDP2 (no reshard, sync last)"
    hsdp = {"strategy": "hsdp", "grad_sync": "replicate_last", "reshard_after_forward": "true"}
    assert strategy_name(hsdp) == "HSDP (reshard, sync replicate_last)"
    assert strategy_name(DDP) == "DDP"  # DDP's own flavour, as before FSDP2
    assert strategy_name(DDP | {"grad_sync": "each"}) == "DDP (sync each)"
    assert strategy_name(ZERO3) == "ZeRO-3"
    assert (
        strategy_name({"strategy": "zero3", "offload": "cpu"}) == "ZeRO-3+cpu"
    )  # no keys: old rows


def test_ddp_each_and_last_are_two_rows():
    sens = [_sens(DDP, 8, 1.2, 1.1, 1.3), _sens(DDP | {"grad_sync": "each"}, 8, 2.5, 2.3, 2.7)]
    variants = [
        _var(DDP, 8, "fast", PARAM_B),
        _var(DDP | {"grad_sync": "each"}, 8, "fast", 8 * PARAM_B),
    ]
    (link,) = build_headline(sens, variants, (), ["fast", "slow"]).links
    assert sorted(link.cells) == ["DDP", "DDP (sync each)"]
    assert link.sentences[0].startswith("On slow, DDP (sync each) is hurt most")
    assert "DDP (sync each) 3,984 MB at grad_accum 8" in link.sentences[-1]


def test_extra_vs_predicted_keeps_fsdp2_flavours_apart():
    variants = [
        _var(FSDP_EACH, 8, "fast", 1) | {"predicted_comm_s_per_step": 0.1},
        _var(FSDP_EACH, 8, "slow", 1) | {"median_step_time_s": 3.0, "predicted_comm_s_per_step": 2.1},
        _var(FSDP_LAST, 8, "fast", 1) | {"predicted_comm_s_per_step": 0.05},
        _var(FSDP_LAST, 8, "slow", 1) | {"median_step_time_s": 2.0, "predicted_comm_s_per_step": 1.05},
    ]  # fmt: skip
    rows = extra_vs_predicted(variants, "fast")
    assert [strategy_name(r) for r in rows] == [
        "FSDP2 (reshard, sync each)",
        "FSDP2 (no reshard, sync last)",
    ]
    assert [r["measured_extra_s"] for r in rows] == [2.0, 1.0]
