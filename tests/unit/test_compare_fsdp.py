"""``linksweep compare`` keeps FSDP2 flavours apart (``grad_sync``, ``reshard_after_forward`` are
variant keys) and names them; a sweep stored without a flavour (before schema v8, or NULL) is its
strategy's default flavour (``orchestrator/analysis/flavours.py``), so it still matches a new
sweep that ran the defaults. Synthetic run rows, and one pair of small databases (a v7 one
upgraded on open), no Ray."""

from __future__ import annotations

import json

import pytest

from orchestrator.analysis.flavours import (
    default_flavour,
    flavour_words,
    flavoured_strategy,
    with_flavour,
)
from orchestrator.analysis.headline import strategy_name
from orchestrator.compare.comparison import (
    NO_CHANGE,
    SLOWER,
    SweepFacts,
    compare_sweeps,
    comparison_json,
)
from orchestrator.compare.table import key_columns, render_markdown, render_table
from orchestrator.sweep.planner import Variant
from workloads import catalog

JITTER = (0.99, 1.0, 1.01)
COMMON = {"offload": "none", "grad_accum": 4, "bucket_mb": 0, "overlap_comm": "default",
          "placement": "spread", "status": "ok", "throttled": False, "link_class": "NET",
          "ranks_per_gpu": 1}  # fmt: skip
UNCOMPRESSED = {"grad_compression": "none", "powersgd_rank": 0}  # DDP's default
NO_COMPRESSION = {"grad_compression": "n/a", "powersgd_rank": 0}  # not DDP: the placeholders
FSDP_EACH = {"strategy": "fsdp", **NO_COMPRESSION, "grad_sync": "each",
             "reshard_after_forward": "true"}  # fmt: skip
FSDP_LAST = {"strategy": "fsdp", **NO_COMPRESSION, "grad_sync": "last",
             "reshard_after_forward": "false"}  # fmt: skip
HSDP_REPL = {"strategy": "hsdp", **NO_COMPRESSION, "grad_sync": "replicate_last",
             "reshard_after_forward": "false"}  # fmt: skip
DDP_LAST = {"strategy": "ddp", **UNCOMPRESSED, "grad_sync": "last",
            "reshard_after_forward": "n/a"}  # fmt: skip
DDP_EACH = DDP_LAST | {"grad_sync": "each"}
ZERO3 = {"strategy": "zero3", **NO_COMPRESSION, "grad_sync": "n/a",
         "reshard_after_forward": "n/a"}  # fmt: skip


def _runs(variants: list[tuple[dict, dict[str, float]]]) -> list[dict]:
    """Three runs per (variant, link), step time ``times[link]`` x jitter."""
    return [
        COMMON | v | {"link": link, "median_step_time_s": t * j, "tokens_per_s": 100 / (t * j)}
        for v, times in variants
        for link, t in times.items()
        for j in JITTER
    ]


def _facts(sweep_id: str, runs: list[dict]) -> SweepFacts:
    return SweepFacts(
        db=f"{sweep_id}.duckdb",
        sweep={"sweep_id": sweep_id},
        runs=runs,
        spec={"links": {"fast": {}, "slow": {}}},
    )


def _flavours(rows: list[dict]) -> list[tuple]:
    return [
        (r["key"]["strategy"], r["key"]["grad_sync"], r["key"]["reshard_after_forward"],
         r["key"]["link"], r["verdict"])
        for r in rows
    ]  # fmt: skip


def test_two_fsdp_flavours_are_two_variants_each_with_its_own_verdict():
    # Only the "last, no reshard" flavour got slower on the slow link; pooled with the other
    # flavour the medians would blur into one verdict.
    base = _runs([(FSDP_EACH, {"fast": 0.2, "slow": 0.4}), (FSDP_LAST, {"fast": 0.3, "slow": 0.5})])
    cand = _runs([(FSDP_EACH, {"fast": 0.2, "slow": 0.4}), (FSDP_LAST, {"fast": 0.3, "slow": 1.0})])
    c = compare_sweeps(_facts("b", base), _facts("c", cand), 0.05)
    assert _flavours(c.variants) == [
        ("fsdp", "each", "true", "fast", NO_CHANGE),
        ("fsdp", "each", "true", "slow", NO_CHANGE),
        ("fsdp", "last", "false", "fast", NO_CHANGE),
        ("fsdp", "last", "false", "slow", SLOWER),
    ]
    assert [r["n_baseline"] for r in c.variants] == [3, 3, 3, 3]  # never six: never pooled
    assert _flavours(c.slowdowns) == [
        ("fsdp", "each", "true", "slow", NO_CHANGE),
        ("fsdp", "last", "false", "slow", SLOWER),
    ]
    assert c.regressions == 2


def test_a_flavour_is_never_matched_to_another():
    base = _runs([(FSDP_EACH, {"fast": 0.2, "slow": 0.4})])
    cand = _runs([(FSDP_LAST, {"fast": 0.2, "slow": 0.4}), (HSDP_REPL, {"fast": 0.2})])
    c = compare_sweeps(_facts("b", base), _facts("c", cand), 0.05)
    assert c.variants == [] and c.slowdowns == []
    only_b = [(k["strategy"], k["grad_sync"], k["reshard_after_forward"], k["link"])
              for k in c.unmatched["baseline_only"]]  # fmt: skip
    only_c = [(k["strategy"], k["grad_sync"], k["reshard_after_forward"], k["link"])
              for k in c.unmatched["candidate_only"]]  # fmt: skip
    assert only_b == [("fsdp", "each", "true", "fast"), ("fsdp", "each", "true", "slow")]
    assert only_c == [
        ("fsdp", "last", "false", "fast"),
        ("fsdp", "last", "false", "slow"),
        ("hsdp", "replicate_last", "false", "fast"),
    ]


@pytest.mark.parametrize("old", ["missing", "null"])
def test_a_sweep_without_flavours_matches_the_default_flavours(old):
    """Before v8 no run said its flavour: DDP ran ``last``, ZeRO has none. Such a baseline
    matches DDP ``last`` and ZeRO of a new sweep; DDP ``each`` and FSDP2 stay unmatched."""
    new = _runs([(DDP_LAST, {"fast": 0.2, "slow": 0.3}), (DDP_EACH, {"fast": 0.25}),
                 (ZERO3, {"fast": 0.35, "slow": 0.7}), (FSDP_EACH, {"fast": 0.3})])  # fmt: skip
    older = _runs([(DDP_LAST, {"fast": 0.2, "slow": 0.3}), (ZERO3, {"fast": 0.35, "slow": 0.7})])
    for r in older:
        for k in ("grad_sync", "reshard_after_forward"):
            if old == "missing":
                del r[k]
            else:
                r[k] = None
    c = compare_sweeps(_facts("old", older), _facts("new", new), 0.05)
    assert _flavours(c.variants) == [
        ("ddp", "last", "n/a", "fast", NO_CHANGE),
        ("ddp", "last", "n/a", "slow", NO_CHANGE),
        ("zero3", "n/a", "n/a", "fast", NO_CHANGE),
        ("zero3", "n/a", "n/a", "slow", NO_CHANGE),
    ]
    assert len(c.slowdowns) == 2
    assert [(k["strategy"], k["grad_sync"]) for k in c.unmatched["candidate_only"]] == [
        ("ddp", "each"),
        ("fsdp", "each"),
    ]
    assert c.unmatched["baseline_only"] == []
    # The other way round (the old sweep as candidate) matches the same variants.
    back = compare_sweeps(_facts("new", new), _facts("old", older), 0.05)
    assert [r["key"] for r in back.variants] == [r["key"] for r in c.variants]


def test_an_fsdp_row_without_flavour_is_fsdp2s_default():
    """A NULL flavour on an FSDP2 run reads as FSDP2's default (sync each, reshard)."""
    older = _runs([(FSDP_EACH | {"grad_sync": None, "reshard_after_forward": None},
                    {"fast": 0.2})])  # fmt: skip
    c = compare_sweeps(_facts("old", older), _facts("new", _runs([(FSDP_EACH, {"fast": 0.2})])))
    assert _flavours(c.variants) == [("fsdp", "each", "true", "fast", NO_CHANGE)]


def test_the_table_names_the_flavour_in_the_strategy_column():
    variants = [(FSDP_EACH, {"fast": 0.2, "slow": 0.4}), (FSDP_LAST, {"fast": 0.3, "slow": 0.5}),
                (HSDP_REPL, {"fast": 0.3}), (DDP_LAST, {"fast": 0.2}), (DDP_EACH, {"fast": 0.2}),
                (ZERO3, {"fast": 0.3})]  # fmt: skip
    c = compare_sweeps(_facts("b", _runs(variants)), _facts("c", _runs(variants)), 0.05)
    keys = key_columns(c)
    assert "grad_sync" not in keys and "reshard_after_forward" not in keys
    assert keys[0] == "strategy"
    text = render_table(c)
    cells = [line.split("  ")[0].strip() for line in text.splitlines()]
    for name in ("fsdp (reshard, sync each)", "fsdp (no reshard, sync last)",
                 "hsdp (no reshard, sync replicate_last)", "ddp (sync each)"):  # fmt: skip
        assert name in text
    assert "ddp" in cells and "zero3" in cells  # defaults keep their plain names
    md = render_markdown(c)
    assert "| median_step_time_s | fsdp (no reshard, sync last) | slow |" in md
    # JSON keeps every key as stored, for machines.
    doc = comparison_json(c)
    assert {(r["key"]["grad_sync"], r["key"]["reshard_after_forward"]) for r in doc["variants"]} == {
        ("each", "true"), ("last", "false"), ("replicate_last", "false"), ("last", "n/a"),
        ("each", "n/a"), ("n/a", "n/a")}  # fmt: skip
    json.dumps(doc)


def test_default_flavour_per_strategy():
    # DDP's compression is none by default, so its PowerSGD rank is the placeholder (0)
    assert default_flavour("ddp") == UNCOMPRESSED | {"grad_sync": "last",
                                                     "reshard_after_forward": "n/a"}  # fmt: skip
    fsdp2 = NO_COMPRESSION | {"grad_sync": "each", "reshard_after_forward": "true"}
    assert default_flavour("fsdp") == fsdp2
    assert default_flavour("hsdp") == fsdp2
    for s in ("zero1", "zero2", "zero3"):
        assert default_flavour(s) == NO_COMPRESSION | {"grad_sync": "n/a",
                                                       "reshard_after_forward": "n/a"}  # fmt: skip
    for s in catalog.names():  # what the planner runs when the grid names no flavour
        axes = Variant(s, 1, "x", "pack").axes
        assert default_flavour(s) == {k: axes[k] for k in default_flavour(s)}, s


def test_with_flavour_fills_only_what_is_missing_and_reads_booleans_as_text():
    row = {"strategy": "fsdp", "grad_sync": "last"}
    filled = with_flavour(row)
    assert filled["grad_sync"] == "last" and filled["reshard_after_forward"] == "true"
    # every other axis the row lacks reads as FSDP2's default too (catalog.filled)
    assert filled["offload"] == "none" and filled["grad_compression"] == "n/a"
    assert filled["powersgd_rank"] == 0
    assert row == {"strategy": "fsdp", "grad_sync": "last"}  # the input is not changed
    full = catalog.filled(COMMON | FSDP_LAST | {"link": "x"})  # every axis: the row itself
    assert with_flavour(full) is full
    assert with_flavour(FSDP_EACH | {"reshard_after_forward": False})["reshard_after_forward"] == (
        "false"
    )


@pytest.mark.parametrize(
    ("row", "name"),
    [
        (FSDP_EACH, "fsdp (reshard, sync each)"),
        (FSDP_LAST, "fsdp (no reshard, sync last)"),
        (HSDP_REPL, "hsdp (no reshard, sync replicate_last)"),
        (DDP_LAST, "ddp"),
        (DDP_EACH, "ddp (sync each)"),
        (ZERO3, "zero3"),
        ({"strategy": "fsdp"}, "fsdp (reshard, sync each)"),
        ({"strategy": "ddp"}, "ddp"),
    ],
)
def test_flavoured_strategy_uses_the_headlines_words(row, name):
    assert flavoured_strategy(row) == name
    # The headline names the same flavour with the same words (its strategy in prose).
    full = with_flavour(row | {"offload": "none"})
    words = flavour_words(row)
    assert strategy_name(full).endswith(f" ({', '.join(words)})" if words else strategy_name(full))


def test_an_old_database_compares_with_a_new_one(tmp_path, capsys):
    """A v7 database (no flavour columns; upgraded on open: DDP ``last``, ZeRO ``n/a``) against
    a new one with DDP ``last``/``each``, ZeRO-3 and two FSDP2 flavours, through the command."""
    from orchestrator.cli import main
    from orchestrator.store import Store
    from tests.unit.schema_downgrade import as_version

    workload = {"model": "gpt2-tiny", "precision": "fp32", "seq_len": 64, "micro_batch_size": 2,
                "world_size": 2}  # fmt: skip

    def plant(path: str, sid: str, variants, drop_flavour: bool) -> None:
        runs = []
        for seq, r in enumerate(_runs(variants)):
            r = r | workload | {"run_id": f"{sid}-{seq}", "sweep_id": sid, "seq": seq}
            if drop_flavour:
                r = {k: v for k, v in r.items() if k not in ("grad_sync", "reshard_after_forward")}
            runs.append(r)
        spec = {"name": sid, "links": {"fast": {}, "slow": {}}}
        with Store(path) as s, s.transaction():
            s.insert("sweeps", [{"sweep_id": sid, "name": sid, "spec": spec, "status": "ok",
                                 "started_at": "2026-11-01 10:00:00+00"}])  # fmt: skip
            s.insert("runs", runs)

    old, new = str(tmp_path / "old.duckdb"), str(tmp_path / "new.duckdb")
    plant(old, "old", [(DDP_LAST, {"fast": 0.2, "slow": 0.3}), (ZERO3, {"fast": 0.35})], True)
    as_version(old, 7)
    plant(
        new,
        "new",
        [(DDP_LAST, {"fast": 0.2, "slow": 0.3}), (DDP_EACH, {"fast": 0.25}),
         (ZERO3, {"fast": 0.35}), (FSDP_EACH, {"fast": 0.3}), (FSDP_LAST, {"fast": 0.3})],
        False,
    )  # fmt: skip
    assert main(["compare", old, new, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert _flavours(doc["variants"]) == [
        ("ddp", "last", "n/a", "fast", NO_CHANGE),
        ("ddp", "last", "n/a", "slow", NO_CHANGE),
        ("zero3", "n/a", "n/a", "fast", NO_CHANGE),
    ]
    assert [(k["strategy"], k["grad_sync"], k["reshard_after_forward"])
            for k in doc["unmatched"]["candidate_only"]] == [
        ("ddp", "each", "n/a"), ("fsdp", "each", "true"), ("fsdp", "last", "false")]  # fmt: skip
    assert main(["compare", old, new]) == 0
    text = capsys.readouterr().out
    assert "fsdp (no reshard, sync last)" not in text.split("Unmatched")[0]  # never matched
