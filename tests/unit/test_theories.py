"""orchestrator.analysis.theories: each family's theory, reached through the catalog's entry,
gives the figures the strategy-by-strategy code of ``orchestrator/sweep/rows.py`` gave before
the catalog (values recorded from it for these runs: gpt2-tiny, 3,382,080 parameters), and
rows.py names no strategy."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from orchestrator.analysis import theories
from orchestrator.analysis.theories import Theory, TheoryFacts, theory_of
from workloads import catalog

N_PARAMS = 3_382_080
MAXSIZE = 2**63 - 1
ROWS = Path(__file__).resolve().parents[2] / "orchestrator" / "sweep" / "rows.py"


def _eff(stage: int, **zero) -> dict:
    """An effective config with DeepSpeed 0.19.8's defaults for the keys the theory reads."""
    block = {
        "stage": stage,
        "overlap_comm": stage == 3,
        "reduce_scatter": True,
        "contiguous_gradients": True,
        "use_multi_rank_bucket_allreduce": True,
        "stage3_prefetch_bucket_size": 50_000_000,
        "stage3_param_persistence_threshold": 100_000,
        "stage3_model_persistence_threshold": MAXSIZE,
        "stage3_max_reuse_distance": 1_000_000_000,
        "offload_optimizer": None,
        "offload_param": None,
        "zenflow": None,
        **zero,
    }
    return {"zero_optimization": block, "communication_data_type": None}


SERIAL = {
    "overlap_comm": False,
    "stage3_max_reuse_distance": 0,
    "stage3_param_persistence_threshold": 0,
    "stage3_prefetch_bucket_size": 1,
}


def _facts(strategy, ga, world=2, precision="fp32", ds=None, n_params=N_PARAMS, **axes):
    return TheoryFacts(
        variant={"strategy": strategy, "grad_accum": ga, **axes},
        world_size=world,
        precision=precision,
        model="gpt2-tiny",
        n_params=n_params,
        ds_config=ds,
    )


# (facts, bytes per step, promised non-final bytes by op): what rows.py stored before
RECORDED = [
    (_facts("ddp", 3, grad_sync="each", ddp_grad_dtype="fp32"), 40_584_960,
     {"all_reduce": 27_056_640}),
    (_facts("ddp", 3, precision="bf16", grad_sync="last", ddp_grad_dtype="bf16"), 6_764_160, {}),
    (_facts("zero1", 2, ds=_eff(1)), 27_056_640, {}),
    (_facts("zero2", 2, ds=_eff(2)), 40_584_960, {"all_reduce": 13_528_320}),
    (_facts("zero2", 2, ds=_eff(2, use_multi_rank_bucket_allreduce=False)), 40_584_960,
     {"reduce": 13_528_320}),
    (_facts("zero3", 2, ds=_eff(3)), None, {"all_gather": 12_865_792, "reduce_scatter": 13_528_320}),
    (_facts("zero3", 3, precision="bf16", ds=_eff(3, **SERIAL)), 60_877_440, None),
    (_facts("fsdp", 3, world=4, grad_sync="last", reshard_after_forward="true"), 55_315_968,
     {"all_gather": 27_857_920}),
    (_facts("fsdp", 2, world=4, precision="bf16", grad_sync="each",
            reshard_after_forward="false"), 40_587_264,
     {"all_gather": 6_764_544, "reduce_scatter": 13_529_088}),
    (_facts("hsdp", 3, world=4, grad_sync="replicate_last", reshard_after_forward="true",
            hsdp_shard_size=2), 89_135_360,
     {"all_gather": 27_856_896, "reduce_scatter": 27_057_152}),
]  # fmt: skip


@pytest.mark.parametrize(("facts", "per_step", "promised"), RECORDED)
def test_each_family_gives_the_figures_rows_gave_before(facts, per_step, promised):
    theory = theory_of(facts)
    assert isinstance(theory, Theory)
    assert theory.bytes_per_step == per_step
    assert theory.non_final == promised
    if per_step is not None:
        assert sum(theory.per_op.values()) == per_step


def test_the_catalog_entry_names_the_function_that_answers():
    for name in catalog.names():
        assert callable(catalog.resolve(catalog.strategy(name).theory)), name
    assert catalog.strategy("zero2").theory.endswith(":zero")
    facts = _facts("zero2", 2, ds=_eff(2))
    assert theory_of(facts) == theories.zero(facts)


def test_ddp_leaves_its_broadcasts_out_of_the_promise():
    theory = theory_of(_facts("ddp", 2, grad_sync="last", ddp_grad_dtype="fp32"))
    assert theory.ignore == ("broadcast",)
    assert theory.note.endswith("; all_reduce in fp32")
    assert theory_of(_facts("zero1", 2, ds=_eff(1))).ignore == ()


def test_a_variant_missing_an_axis_reads_as_the_strategys_default():
    # an older row without grad_sync: ddp syncs on the last micro-batch, fsdp on each
    assert theory_of(_facts("ddp", 3, ddp_grad_dtype="fp32")).non_final == {}
    bare = theory_of(_facts("fsdp", 3, world=4))
    assert bare == theory_of(_facts("fsdp", 3, world=4, grad_sync="each",
                                    reshard_after_forward="true"))  # fmt: skip
    assert theory_of(_facts("fsdp", 3, world=4, reshard_after_forward=True)) == bare


@pytest.mark.parametrize(
    ("facts", "note", "why"),
    [
        # one rank: nothing crosses a link, nothing to say; DDP's promise stands (nothing)
        (_facts("ddp", 2, world=1, grad_sync="last", ddp_grad_dtype="fp32"), None, None),
        (_facts("zero1", 2), "no effective DeepSpeed config was reported for this run",
         "no effective DeepSpeed config was reported for this run"),
        (_facts("zero3", 2, ds=_eff(3, stage3_max_reuse_distance=0,
                                    stage3_prefetch_bucket_size=1)),
         "ZeRO-3 keeps every parameter under stage3_param_persistence_threshold=100000",
         "ZeRO-3 gathers per micro-batch not certain"),
        (_facts("fsdp", 2, world=1), "no FSDP2 theory: world_size must be an int >= 2",
         "no FSDP2 theory: world_size must be an int >= 2"),
    ],
)  # fmt: skip
def test_where_there_is_no_figure_or_promise_the_theory_says_why(facts, note, why):
    theory = theory_of(facts)
    if note is None:
        assert theory.note is None and theory.bytes_per_step is None
    else:
        assert theory.note.startswith(note)
    if why is None:
        assert theory.non_final == {}
    else:
        assert theory.non_final is None and theory.no_promise_why.startswith(why)


def test_no_rank_report_means_no_ddp_or_zero_figure_but_fsdp_needs_none():
    for strategy in ("ddp", "zero2"):
        theory = theory_of(_facts(strategy, 2, ds=_eff(2), n_params=None))
        assert (theory.bytes_per_step, theory.non_final) == (None, None)
    fsdp = theory_of(_facts("fsdp", 2, n_params=None))
    assert fsdp.non_final is not None and fsdp.bytes_per_step


def test_an_unknown_strategy_is_an_error_naming_the_allowed_ones():
    with pytest.raises(ValueError, match=r"'zero4'.*allowed values: \['ddp'"):
        theory_of(_facts("zero4", 2))


def test_a_strategy_added_to_the_catalog_reaches_its_theory(monkeypatch):
    """An entry made here, ZeRO-2's stage under another name: its theory is the family's, its
    stage decides, its name appears nowhere else."""
    entry = dataclasses.replace(catalog.strategy("zero2"), name="zero2b", display="ZeRO-2b")
    monkeypatch.setitem(catalog.STRATEGIES, "zero2b", entry)
    assert theory_of(_facts("zero2b", 2, ds=_eff(2))) == theory_of(_facts("zero2", 2, ds=_eff(2)))


def test_rows_names_no_strategy():
    """rows.py asks the catalog for the run's theory; no strategy name (nor a family's tuple of
    names) is written in it."""
    source = ROWS.read_text()
    strings = {
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert strings & set(catalog.names()) == set()
    for copy in ("FSDP_STRATEGIES", "ZERO_STRATEGIES", "fsdp_theory", "zero_promise"):
        assert copy not in source
