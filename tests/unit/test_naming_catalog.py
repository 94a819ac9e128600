"""The naming rules read the catalog, nothing else: a strategy and an axis added in this test
alone (catalog entries, no other module touched) are named, labelled, ordered and told apart
by ``orchestrator/analysis/flavours.py``, the headline, the report's labels and tables, and
``stats.varying``, as the built-in ones are."""

from __future__ import annotations

import pytest

from orchestrator.analysis import flavours, stats
from orchestrator.analysis.headline import build_headline
from orchestrator.report.labels import group_label, variant_sort_key
from orchestrator.report.sections import fixed_settings, strategy_title
from workloads import catalog

BASE = {"offload": "none", "grad_accum": 1, "bucket_mb": 25, "overlap_comm": "default",
        "placement": "pack", "link": "slow"}  # fmt: skip


@pytest.fixture
def extended(monkeypatch):
    """The catalog with a DDP-family strategy and a DDP-only axis added (copies: the real
    catalog is untouched after the test)."""
    monkeypatch.setattr(catalog, "STRATEGIES", dict(catalog.STRATEGIES))
    monkeypatch.setattr(catalog, "AXES", dict(catalog.AXES))
    catalog.add_strategy(
        catalog.Strategy(
            "toyddp", "ddp", "ToyDDP", "ToyDDP (a test's own)",
            "workloads.strategies:DDPStrategy", "orchestrator.analysis.theories:ddp",
            values={"offload": ("none",)}, defaults={"grad_sync": "last"},
        )
    )  # fmt: skip
    catalog.add_axis(
        catalog.Axis(
            "squeeze", "VARCHAR", ("none", "half", "tiny"), "none", families=("ddp",),
            label="sq", words="{value} squeeze", in_strategy_name=True,
        )
    )  # fmt: skip
    return catalog


def test_a_new_axis_in_the_strategy_name_is_named_where_not_its_default(extended):
    ddp = BASE | {"strategy": "ddp"}
    assert flavours.strategy_name(ddp) == "DDP"  # an old row: squeeze reads as its default
    assert flavours.strategy_name(ddp | {"squeeze": "half"}) == "DDP (half squeeze)"
    assert flavours.strategy_name(ddp | {"squeeze": "half", "grad_sync": "each"}) == (
        "DDP (sync each, half squeeze)"
    )
    zero = BASE | {"strategy": "zero3", "offload": "cpu"}
    assert flavours.strategy_name(zero) == "ZeRO-3+cpu"  # the axis does not apply to ZeRO
    assert flavours.with_flavour(zero)["squeeze"] == "n/a"
    assert "squeeze" in flavours.flavour_axes()


def test_a_new_strategy_has_its_names_and_its_place(extended):
    toy = BASE | {"strategy": "toyddp", "squeeze": "tiny"}
    assert flavours.strategy_name(toy) == "ToyDDP (tiny squeeze)"
    assert flavours.flavoured_strategy(toy) == "toyddp (tiny squeeze)"
    assert strategy_title("toyddp") == "ToyDDP (a test's own)"
    rows = [toy, BASE | {"strategy": "hsdp"}, BASE | {"strategy": "ddp", "squeeze": "tiny"},
            BASE | {"strategy": "ddp", "squeeze": "none"}]  # fmt: skip
    ordered = sorted(rows, key=lambda r: variant_sort_key(r, []))
    assert [(r["strategy"], r.get("squeeze")) for r in ordered] == [
        ("ddp", "none"), ("ddp", "tiny"), ("hsdp", None), ("toyddp", "tiny"),
    ]  # fmt: skip


def test_a_new_axis_varies_per_strategy_and_labels_by_its_short_name(extended):
    rows = [BASE | {"strategy": "ddp", "squeeze": "none"},
            BASE | {"strategy": "zero3", "squeeze": "n/a"}]  # fmt: skip
    assert "squeeze" in stats.implied_axes()
    assert stats.varying(rows) == {"strategy"}  # DDP's none beside ZeRO's n/a: implied
    both = [*rows, BASE | {"strategy": "ddp", "squeeze": "half"}]
    vary = stats.varying(both)
    assert vary == {"strategy", "squeeze"}
    assert [group_label(r, vary) for r in both] == [
        "ddp ga=1 sq=none", "zero3 ga=1", "ddp ga=1 sq=half",
    ]  # fmt: skip
    assert fixed_settings([both[2] | {"comm_dtypes": None}], set()) == [
        "half squeeze", "bucket 25 MB",
    ]  # fmt: skip


def test_the_headline_names_a_new_strategy_and_axis(extended):
    def sens(strategy, squeeze, x, lo, hi):
        return BASE | {"strategy": strategy, "squeeze": squeeze, "baseline_link": "fast",
                       "slowdown": x, "ci_low": lo, "ci_high": hi,
                       "interval_kind": "range"}  # fmt: skip

    rows = [sens("ddp", "none", 2.0, 1.9, 2.1), sens("ddp", "half", 1.5, 1.4, 1.6),
            sens("toyddp", "none", 1.1, 1.05, 1.15)]  # fmt: skip
    (link,) = build_headline(rows, [], (), ["fast", "slow"]).links
    assert list(link.cells) == ["DDP", "DDP (half squeeze)", "ToyDDP"]
    assert link.sentences[0].startswith("On slow, DDP is hurt most")
