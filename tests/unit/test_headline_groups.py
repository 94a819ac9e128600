"""The headline with many strategies: at each grad_accum the most and least hurt groups, told
from the intervals (a cut in the order of slowdown with every interval above it above every
interval below it), and FSDP2 against ZeRO-3 and DDP. Hand-written cells; the old rule (the top
alone clearing every other) said "no difference" for most of them."""

from __future__ import annotations

from orchestrator.analysis.headline import NO_DIFFERENCE, build_headline
from tests.unit.test_headline_fsdp import DDP, ZERO3, _sens

DDP_EACH = DDP | {"grad_sync": "each"}
NA = {"strategy": "fsdp", "grad_compression": "n/a", "powersgd_rank": 0}
FSDP = {
    (r, sync): NA | {"grad_sync": sync, "reshard_after_forward": r}
    for r in ("true", "false")
    for sync in ("each", "last")
}
SEVEN = [DDP, DDP_EACH, ZERO3, *FSDP.values()]  # the emulated strategies sweep's seven series


def _sentences(rows):
    (link,) = build_headline(rows, [], (), ["fast", "slow"]).links
    return link.sentences


# docs/measurements/2026-11-27-strategies-emulated.md: slowdown slow / fast [range of 2 runs]
TABLE = [
    (FSDP["false", "each"], 1, 2.57, 2.26, 2.93), (FSDP["false", "last"], 1, 2.55, 2.32, 2.81),
    (FSDP["true", "each"], 1, 2.52, 2.42, 2.63), (ZERO3, 1, 2.49, 2.43, 2.55),
    (FSDP["true", "last"], 1, 2.34, 2.22, 2.45), (DDP_EACH, 1, 2.19, 2.02, 2.38),
    (DDP, 1, 2.15, 1.99, 2.33),
    (FSDP["false", "each"], 8, 2.94, 2.80, 3.08), (FSDP["true", "each"], 8, 2.80, 2.55, 3.10),
    (DDP_EACH, 8, 2.50, 2.16, 2.92), (ZERO3, 8, 2.35, 2.12, 2.62),
    (FSDP["false", "last"], 8, 2.15, 2.11, 2.19), (FSDP["true", "last"], 8, 1.92, 1.69, 2.21),
    (DDP, 8, 1.21, 1.05, 1.39),
]  # fmt: skip


def _at(ga, figures, series=SEVEN):
    """One row per series at ga: (slowdown, low, high) in the order of ``series``."""
    return [_sens(v, ga, *f) for v, f in zip(series, figures, strict=True)]


def test_the_measured_sweep_names_the_least_hurt_and_what_the_top_clears():
    """The emulated strategies sweep: the old headline said the strategies overlap at every
    grad_accum; at 8, DDP lies below all six others and FSDP2 each above three of them."""
    first, tied, fsdp = _sentences([_sens(*row) for row in TABLE])
    assert first == (
        "On slow, steps are slower than on fast; at grad_accum 8, DDP 1.21× [1.05–1.39] is hurt "
        "least, its interval below those of the other six strategies (1.92×–2.94×); of those "
        "six, the top, FSDP2 (no reshard, sync each) 2.94× [2.80–3.08], lies above ZeRO-3, "
        "FSDP2 (no reshard, sync last) and FSDP2 (reshard, sync last), and FSDP2 (reshard, sync "
        "each) 2.80× [2.55–3.10] and DDP (sync each) 2.50× [2.16–2.92] are within its spread."
    )
    assert tied == (  # FSDP2 (reshard, sync each) lies above DDP there, so not "no difference"
        "At grad_accum 1 no group of strategies lies apart from the rest: their intervals chain, "
        "each overlapping another's."
    )
    assert fsdp == (
        "FSDP2 against ZeRO-3 and DDP: at grad_accum 1, every FSDP2 flavour is within the "
        "spread of ZeRO-3 (2.57×, 2.55×, 2.52× and 2.34× vs 2.49×); FSDP2 (reshard, sync each) "
        "is hurt more than DDP (sync each) and DDP (2.52× vs 2.19× and 2.15×, intervals apart), "
        "the other flavours are within their spread (2.57×, 2.55× and 2.34× vs 2.19× and "
        "2.15×); at grad_accum 8, FSDP2 (no reshard, sync each) is hurt more than ZeRO-3 (2.94× "
        "vs 2.35×, intervals apart), the other flavours are within its spread (2.80×, 2.15× and "
        "1.92× vs 2.35×); every FSDP2 flavour is within the spread of DDP (sync each) (2.94×, "
        "2.80×, 2.15× and 1.92× vs 2.50×); every FSDP2 flavour is hurt more than DDP (2.94×, "
        "2.80×, 2.15× and 1.92× vs 1.21×, intervals apart)."
    )


def test_seven_series_whose_top_two_overlap_name_the_group_not_no_difference():
    rows = _at(
        8,
        [
            (1.10, 1.02, 1.20),  # DDP
            (2.00, 1.90, 2.10),  # DDP (sync each)
            (3.00, 2.80, 3.20),  # ZeRO-3
            (1.50, 1.40, 1.60),  # FSDP2 (reshard, sync each)
            (1.90, 1.80, 2.05),  # FSDP2 (reshard, sync last)
            (2.90, 2.70, 3.10),  # FSDP2 (no reshard, sync each): overlaps ZeRO-3
            (1.45, 1.35, 1.55),  # FSDP2 (no reshard, sync last)
        ],
    )
    sentences = _sentences(rows)
    assert sentences[0] == (
        "On slow, steps are slower than on fast; at grad_accum 8, ZeRO-3 3.00× [2.80–3.20] and "
        "FSDP2 (no reshard, sync each) 2.90× [2.70–3.10] are hurt most (their intervals above "
        "every other strategy's) and DDP 1.10× [1.02–1.20] is hurt least (its interval below "
        "every other strategy's); in between: DDP (sync each) 2.00×, FSDP2 (reshard, sync "
        "last) 1.90×, FSDP2 (reshard, sync each) 1.50× and FSDP2 (no reshard, sync last) 1.45×."
    )
    assert NO_DIFFERENCE not in " ".join(sentences)


def test_every_interval_overlapping_every_other_is_still_no_difference():
    rows = _at(8, [(2.0 + i / 10, 1.7, 2.9) for i in range(7)])
    sentence, fsdp = _sentences(rows)
    assert sentence.startswith(
        f"On slow, steps are slower than on fast, but the strategies show {NO_DIFFERENCE}: "
        "their slowdown intervals overlap at every grad_accum (DDP (sync each) 2.10× at "
        "grad_accum 8; DDP 2.00× at grad_accum 8; ZeRO-3 2.20× at grad_accum 8;"
    )
    assert "hurt" not in sentence
    assert fsdp == (
        "FSDP2 against ZeRO-3 and DDP: at grad_accum 8, every FSDP2 flavour is within the "
        "spread of ZeRO-3, DDP (sync each) and DDP (2.60×, 2.50×, 2.40× and 2.30× vs 2.20×, "
        "2.10× and 2.00×)."
    )


def test_intervals_that_chain_make_no_group_and_not_no_difference():
    """Each interval overlaps its neighbours' (those 0.2× apart, not those 0.8× apart): no cut
    lies between them, though the ends lie apart, which the FSDP2 sentence says."""
    rows = _at(8, [(2.0 + i / 5, round(1.65 + i / 5, 2), round(2.35 + i / 5, 2)) for i in range(7)])
    sentence, fsdp = _sentences(rows)
    assert sentence.startswith(
        "On slow, steps are slower than on fast, but no group of strategies lies apart from the "
        "rest at any grad_accum: their slowdown intervals chain, each overlapping another's "
        "(DDP (sync each) 2.20× at grad_accum 8; DDP 2.00× at grad_accum 8;"
    )
    assert "hurt" not in sentence and NO_DIFFERENCE not in sentence
    assert fsdp == (
        "FSDP2 against ZeRO-3 and DDP: at grad_accum 8, FSDP2 (no reshard, sync last) is hurt "
        "more than ZeRO-3 (3.20× vs 2.40×, intervals apart), the other flavours are within its "
        "spread (3.00×, 2.80× and 2.60× vs 2.40×); FSDP2 (no reshard, sync last) and FSDP2 (no "
        "reshard, sync each) are hurt more than DDP (sync each) (3.20× and 3.00× vs 2.20×, "
        "intervals apart), the other flavours are within its spread (2.80× and 2.60× vs "
        "2.20×); FSDP2 (no reshard, sync last), FSDP2 (no reshard, sync each) and FSDP2 "
        "(reshard, sync last) are hurt more than DDP (3.20×, 3.00× and 2.80× vs 2.00×, "
        "intervals apart), FSDP2 (reshard, sync each) is within its spread (2.60× vs 2.00×)."
    )


def test_three_series_with_a_clear_single_leader():
    three = [DDP, ZERO3, FSDP["true", "each"]]
    rows = _at(1, [(1.2, 1.1, 1.3), (1.5, 1.35, 1.6), (2.5, 2.3, 2.7)], three)
    rows += _at(8, [(1.1, 1.0, 1.2), (1.4, 1.15, 1.6), (3.1, 2.9, 3.3)], three)
    assert _sentences(rows) == [
        "On slow, FSDP2 (reshard, sync each) is hurt most, and more as grad_accum grows: its "
        "steps take 2.50× as long as on fast at grad_accum 1 and 3.10× at 8; DDP's take 1.20× "
        "at grad_accum 1 and 1.10× at 8 (not slower beyond the spread at 8); ZeRO-3's take "
        "1.50× at grad_accum 1 and 1.40× at 8.",
        "At grad_accum 1, FSDP2 (reshard, sync each) 2.50× [2.30–2.70] is hurt most (its "
        "interval above every other strategy's) and DDP 1.20× [1.10–1.30] is hurt least (its "
        "interval below every other strategy's); in between: ZeRO-3 1.50×.",
        # DDP and ZeRO-3 overlap at 8: the least hurt side is told by its span
        "At grad_accum 8, FSDP2 (reshard, sync each) 3.10× [2.90–3.30] is hurt most, its "
        "interval above those of the other two strategies (1.10×–1.40×).",
        "FSDP2 against ZeRO-3 and DDP: at grad_accum 1, FSDP2 (reshard, sync each) is hurt "
        "more than ZeRO-3 and DDP (2.50× vs 1.50× and 1.20×, intervals apart); at grad_accum "
        "8, FSDP2 (reshard, sync each) is hurt more than ZeRO-3 and DDP (3.10× vs 1.40× and "
        "1.10×, intervals apart).",
    ]


def test_a_least_hurt_group_of_two_is_named_with_its_intervals():
    four = [DDP, DDP_EACH, ZERO3, FSDP["true", "each"]]
    rows = _at(8, [(1.25, 1.15, 1.35), (1.30, 1.20, 1.45), (2.0, 1.9, 2.1), (3.0, 2.8, 3.2)], four)
    assert _sentences(rows)[1] == (
        "At grad_accum 8, FSDP2 (reshard, sync each) 3.00× [2.80–3.20] is hurt most (its "
        "interval above every other strategy's) and DDP (sync each) 1.30× [1.20–1.45] and DDP "
        "1.25× [1.15–1.35] are hurt least (their intervals below every other strategy's); in "
        "between: ZeRO-3 2.00×."
    )


def test_two_groups_of_two_split_by_one_cut():
    four = [DDP, DDP_EACH, ZERO3, FSDP["true", "each"]]
    rows = _at(8, [(1.2, 1.1, 1.3), (1.3, 1.15, 1.45), (2.5, 2.3, 2.7), (2.6, 2.4, 2.8)], four)
    first, fsdp = _sentences(rows)
    assert first == (
        "On slow, steps are slower than on fast; at grad_accum 8, FSDP2 (reshard, sync each) "
        "2.60× [2.40–2.80] and ZeRO-3 2.50× [2.30–2.70] are hurt most and DDP (sync each) 1.30× "
        "[1.15–1.45] and DDP 1.20× [1.10–1.30] are hurt least, every interval of the first "
        "above every interval of the second."
    )
    assert fsdp == (
        "FSDP2 against ZeRO-3 and DDP: at grad_accum 8, FSDP2 (reshard, sync each) is within "
        "the spread of ZeRO-3 (2.60× vs 2.50×); FSDP2 (reshard, sync each) is hurt more than "
        "DDP (sync each) and DDP (2.60× vs 1.30× and 1.20×, intervals apart)."
    )


def test_fsdp2_against_zero3_more_less_and_within():
    rows = _at(
        8,
        [(1.10, 1.02, 1.20), (2.00, 1.90, 2.10), (3.00, 2.80, 3.20), (1.50, 1.40, 1.60),
         (1.90, 1.80, 2.05), (2.90, 2.70, 3.10), (1.45, 1.35, 1.55)],
    )  # fmt: skip
    fsdp = _sentences(rows)[-1]
    assert fsdp.startswith(
        "FSDP2 against ZeRO-3 and DDP: at grad_accum 8, FSDP2 (reshard, sync last), FSDP2 "
        "(reshard, sync each) and FSDP2 (no reshard, sync last) are hurt less than ZeRO-3 "
        "(1.90×, 1.50× and 1.45× vs 3.00×, intervals apart), FSDP2 (no reshard, sync each) is "
        "within its spread (2.90× vs 3.00×); FSDP2 (no reshard, sync each) is hurt more than "
        "DDP (sync each) (2.90× vs 2.00×, intervals apart), FSDP2 (reshard, sync each) and "
        "FSDP2 (no reshard, sync last) are hurt less than it (1.50× and 1.45× vs 2.00×, "
        "intervals apart), FSDP2 (reshard, sync last) is within its spread (1.90× vs 2.00×); "
    )
    assert fsdp.endswith(
        "every FSDP2 flavour is hurt more than DDP (2.90×, 1.90×, 1.50× and 1.45× vs 1.10×, "
        "intervals apart)."
    )


def test_no_fsdp2_sentence_without_fsdp2_or_without_zero3_and_ddp():
    ddp_zero = _at(8, [(1.2, 1.1, 1.3), (2.5, 2.3, 2.7), (3.0, 2.8, 3.2)], SEVEN[:3])
    assert not any(s.startswith("FSDP2 against") for s in _sentences(ddp_zero))
    fsdp_only = _at(8, [(1.2, 1.1, 1.3), (2.5, 2.3, 2.7)], SEVEN[3:5])
    assert not any(s.startswith("FSDP2 against") for s in _sentences(fsdp_only))


def test_a_series_from_single_runs_splits_nothing():
    """A point says nothing of spread: it may lie anywhere, so no cut passes it."""
    three = [DDP, ZERO3, FSDP["true", "each"]]
    rows = _at(8, [(1.1, 1.02, 1.2), (2.0, 2.0, 2.0), (3.0, 2.8, 3.2)], three)
    (sentence, fsdp) = _sentences(rows)
    assert "no group of strategies lies apart" in sentence and "hurt most" not in sentence
    assert fsdp == (  # ZeRO-3 has no interval: FSDP2 is compared with DDP only
        "FSDP2 against DDP: at grad_accum 8, FSDP2 (reshard, sync each) is hurt more than DDP "
        "(3.00× vs 1.10×, intervals apart)."
    )
