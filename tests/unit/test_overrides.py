"""``--set KEY=VALUE``: sweep-file overrides (``orchestrator/sweep/overrides.py``), applied
before validation, so the spec's own errors still name the field and the allowed values."""

from __future__ import annotations

import pytest

from orchestrator.cli import build_parser
from orchestrator.sweep.overrides import OverrideError, apply_overrides, parse_override
from orchestrator.sweep.spec import SpecError, load_spec

CLASSIC = "sweeps/titanrtx-2gpu-gpt2-classic.yaml"


def test_values_are_read_as_yaml_and_keys_as_dotted_paths():
    assert parse_override("ranks_per_gpu=2") == (["ranks_per_gpu"], 2)
    assert parse_override("grid.strategy=[ddp, zero3]") == (["grid", "strategy"], ["ddp", "zero3"])
    assert parse_override("links.slow={NCCL_P2P_DISABLE: '1'}") == (
        ["links", "slow"],
        {"NCCL_P2P_DISABLE": "1"},
    )
    assert parse_override("dataset=builtin") == (["dataset"], "builtin")


def test_the_document_is_copied_not_changed():
    doc = {"steps": 200, "grid": {"strategy": ["ddp"]}}
    out = apply_overrides(doc, ["steps=20", "grid.grad_accum=[1, 8]", "trace.steps=1"])
    assert out == {"steps": 20, "grid": {"strategy": ["ddp"], "grad_accum": [1, 8]},
                   "trace": {"steps": 1}}  # fmt: skip
    assert doc == {"steps": 200, "grid": {"strategy": ["ddp"]}}


@pytest.mark.parametrize(
    "bad, words",
    [
        ("steps", "expected KEY=VALUE"),
        ("=3", "expected KEY=VALUE"),
        ("grid..strategy=[ddp]", "expected KEY=VALUE"),
        ("steps.more=3", "steps is int 20 "),
        ("steps=[1", "not valid YAML"),
    ],
)
def test_an_override_that_cannot_apply_is_named(bad, words):
    with pytest.raises(OverrideError) as exc:
        apply_overrides({"steps": 200}, ["steps=20", bad])
    assert len(exc.value.problems) == 1
    assert bad in exc.value.problems[0] and words in exc.value.problems[0]


def test_the_classic_file_rehearses_on_one_gpu_with_one_override():
    spec = load_spec(CLASSIC, ["ranks_per_gpu=2", "steps=20"])
    assert (spec.ranks_per_gpu, spec.steps, spec.world_size) == (2, 20, 2)
    assert load_spec(CLASSIC).ranks_per_gpu == 1  # the file itself is untouched


def test_a_bad_value_is_refused_by_the_spec_naming_field_and_allowed_values():
    with pytest.raises(SpecError) as exc:
        load_spec(CLASSIC, ["ranks_per_gpu=3"])
    assert "ranks_per_gpu" in str(exc.value) and "2" in str(exc.value)
    with pytest.raises(SpecError) as exc:
        load_spec(CLASSIC, ["no_such_key=1"])
    assert "no_such_key" in str(exc.value)


def test_run_and_linkbench_take_repeated_set_arguments():
    parser = build_parser()
    args = parser.parse_args(["run", CLASSIC, "--set", "steps=5", "--set", "ranks_per_gpu=2"])
    assert args.set == ["steps=5", "ranks_per_gpu=2"]
    assert parser.parse_args(["linkbench", CLASSIC]).set == []
