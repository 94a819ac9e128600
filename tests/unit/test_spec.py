"""Sweep file validation: good files load, bad ones name the field, the value and what is allowed."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.sweep.planner import NodeCapacity, check_capacity
from orchestrator.sweep.spec import SpecError, load_spec, parse_spec
from workloads import catalog

REPO = str(Path(__file__).resolve().parents[2])
GOOD = {
    "name": "t",
    "links": {"default": {}, "no_p2p": {"NCCL_P2P_DISABLE": "1"}},
    "grid": {"strategy": ["ddp"], "grad_accum": [1, 4]},
}


def errors_of(data) -> str:
    with pytest.raises(SpecError) as exc:
        parse_spec(data)
    return str(exc.value)


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REPO, "sweeps", "*.yaml"))))
def test_shipped_sweeps_are_valid(path):
    spec = load_spec(path)
    assert spec.name
    assert spec.grid_links


def test_defaults_and_scalars():
    spec = parse_spec({"name": "x", "grid": {"grad_accum": 8, "strategy": "zero3"}})
    assert spec.grid.grad_accum == [8]
    assert spec.grid.strategy == ["zero3"]
    assert spec.grid_links == ["default"]
    assert spec.baseline == "default"
    assert spec.model == "gpt2-tiny"


def test_link_env_values_become_strings():
    spec = parse_spec({"name": "x", "links": {"a": {"NCCL_P2P_DISABLE": 1}}})
    assert spec.links == {"a": {"NCCL_P2P_DISABLE": "1"}}


def test_unknown_top_level_key_names_allowed_keys():
    msg = errors_of({**GOOD, "stepz": 3})
    assert "stepz: unknown key" in msg
    assert "warmup_steps" in msg  # the allowed keys are listed


def test_unknown_grid_key():
    msg = errors_of({**GOOD, "grid": {"strategy": ["ddp"], "acum": [1]}})
    assert "grid.acum: unknown key" in msg and "grad_accum" in msg


def test_bad_strategy_lists_allowed_values():
    msg = errors_of({**GOOD, "grid": {"strategy": ["ddp", "megatron"]}})
    assert "grid.strategy.1" in msg and "'megatron'" in msg
    assert "'zero3'" in msg and "'fsdp'" in msg and "'hsdp'" in msg


def test_bad_model_and_precision():
    msg = errors_of({**GOOD, "model": "gpt3", "precision": "fp8"})
    assert "model: 'gpt3' is not allowed" in msg and "'gpt2-tiny'" in msg
    assert "precision: 'fp8' is not allowed" in msg and "'bf16'" in msg


def test_unknown_link_name_in_grid():
    msg = errors_of({**GOOD, "grid": {"link": ["default", "nvlink"]}})
    assert "grid.link: unknown link 'nvlink'" in msg and "'no_p2p'" in msg


def test_bad_numbers():
    msg = errors_of({**GOOD, "steps": 0, "grid": {"grad_accum": [0, 2]}})
    assert "steps:" in msg and "(got 0)" in msg
    assert "grid.grad_accum" in msg and ">= 1" in msg


def test_seq_len_beyond_gpt2_positions():
    assert "seq_len" in errors_of({**GOOD, "seq_len": 4096})


def test_offload_needs_zero():
    msg = errors_of({**GOOD, "grid": {"strategy": ["ddp"], "offload": ["cpu"]}})
    assert "grid.offload" in msg and "ZeRO and FSDP2 only" in msg


def test_nvme_needs_zero3():
    msg = errors_of({**GOOD, "grid": {"strategy": ["zero1"], "offload": ["nvme"]}})
    assert "grid.offload" in msg and "zero3" in msg


def test_spread_needs_two_ranks():
    msg = errors_of({**GOOD, "world_size": 1, "grid": {"placement": ["spread"]}})
    assert "grid.placement" in msg and "world_size >= 2" in msg


def test_missing_dataset_file():
    msg = errors_of({**GOOD, "dataset": "/nonexistent/corpus.txt"})
    assert "dataset" in msg and "wikitext-2-raw-v1" in msg


def test_env_var_name_checked():
    assert "not an environment variable name" in errors_of({**GOOD, "links": {"a": {"1X": "1"}}})


def test_baseline_link_must_exist():
    assert "baseline_link" in errors_of({**GOOD, "baseline_link": "nope"})


def test_not_a_mapping(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("- just\n- a list\n")
    with pytest.raises(SpecError, match="mapping"):
        load_spec(p)


def test_cli_bad_file_exit_2_nothing_written(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ngrid: {strategy: [megatron]}\n")
    db = tmp_path / "r.duckdb"
    assert main(["run", str(bad), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "grid.strategy.0" in err and "'megatron'" in err
    assert not db.exists()


def test_capacity_pack_and_spread():
    spec = parse_spec({"name": "x", "world_size": 4, "grid": {"placement": ["pack", "spread"]}})
    two_nodes = [NodeCapacity("a", cpus=8, gpus=2), NodeCapacity("b", cpus=8, gpus=2)]
    with pytest.raises(SpecError) as exc:
        check_capacity(spec, two_nodes)
    text = str(exc.value)
    assert "'pack'" in text and "largest node has 2 GPU" in text
    assert "'spread'" in text and "2 node(s)" in text
    # CPU-only cluster: ranks are CPU bundles
    check_capacity(spec, [NodeCapacity(str(i), cpus=4, gpus=0) for i in range(4)])


def test_overlap_axis_and_bucket_default():
    s = parse_spec(
        {
            "name": "x",
            "grid": {"strategy": ["ddp", "zero3"], "overlap_comm": [True, "false", "default"]},
        }
    )
    assert s.grid.overlap_comm == ["true", "false", "default"]  # YAML booleans become the words
    assert s.grid.bucket_mb == ["default"]
    assert parse_spec({"name": "x", "grid": {"bucket_mb": ["default", 25]}}).grid.bucket_mb == [
        "default",
        25,
    ]
    with pytest.raises(SpecError, match="grid.overlap_comm"):
        parse_spec({"name": "x", "grid": {"overlap_comm": ["sometimes"]}})


def test_deepspeed_block_and_preset_need_a_zero_strategy():
    with pytest.raises(SpecError) as exc:
        parse_spec(
            {"name": "x", "deepspeed": {"gradient_clipping": 1.0}, "deepspeed_preset": "serialized"}
        )
    text = str(exc.value)
    assert "deepspeed: applies to ZeRO runs only" in text
    assert "deepspeed_preset: applies to ZeRO runs only" in text
    with pytest.raises(SpecError, match="deepspeed_preset"):
        parse_spec({"name": "x", "grid": {"strategy": "zero1"}, "deepspeed_preset": "fast"})
    with pytest.raises(SpecError, match="peak_tflops"):
        parse_spec({"name": "x", "peak_tflops": 0})
    ok = parse_spec(
        {"name": "x", "grid": {"strategy": "zero1"}, "deepspeed": {"gradient_clipping": 1.0}}
    )
    assert ok.deepspeed == {"gradient_clipping": 1.0}


# --- ranks_per_gpu and the {rank} form ---


def test_ranks_per_gpu_defaults_to_one_and_takes_two():
    assert parse_spec({"name": "x"}).ranks_per_gpu == 1
    assert parse_spec({"name": "x", "ranks_per_gpu": 2, "world_size": 2}).ranks_per_gpu == 2


@pytest.mark.parametrize("value", [0, 3, 4, "two"])
def test_ranks_per_gpu_other_values_name_the_field_and_the_allowed(value):
    with pytest.raises(
        SpecError, match=r"ranks_per_gpu: .* is not allowed; allowed values: 1 or 2"
    ):
        parse_spec({"name": "x", "ranks_per_gpu": value})


@pytest.mark.parametrize("world_size", [1, 3, 4])
def test_two_ranks_per_gpu_need_world_size_two(world_size):
    with pytest.raises(
        SpecError, match=rf"ranks_per_gpu: 2 .*needs world_size 2, got {world_size}"
    ):
        parse_spec({"name": "x", "ranks_per_gpu": 2, "world_size": world_size})


def test_two_ranks_per_gpu_refuse_spread():
    with pytest.raises(SpecError, match=r"'spread'.*ranks_per_gpu 2.*allowed.*'pack'"):
        parse_spec({"name": "x", "ranks_per_gpu": 2, "grid": {"placement": ["pack", "spread"]}})


def test_link_values_may_hold_the_rank_form_only():
    s = parse_spec({"name": "x", "links": {"a": {"NCCL_HOSTID": "h-{rank}", "N": "{rank}{rank}"}}})
    assert s.links["a"]["NCCL_HOSTID"] == "h-{rank}"
    for bad in ("h-{host}", "{RANK}", "{rank", "rank}", "{}"):
        with pytest.raises(
            SpecError, match=r"link 'a': X=.* other than \{rank\}; allowed: \{rank\}"
        ):
            parse_spec({"name": "x", "links": {"a": {"X": bad}}})


def _has_powersgd_warmup_rule() -> bool:
    """The spec's warmup rule for powersgd (``Axis.warmup``) resolves to a function of
    ``workloads/compression.py``; without it a grid listing powersgd cannot be checked."""
    try:
        catalog.resolve(catalog.axis("grad_compression").warmup["powersgd"])
    except (ImportError, AttributeError):
        return False
    return True


needs_powersgd = pytest.mark.skipif(
    not _has_powersgd_warmup_rule(),
    reason="workloads.compression:powersgd_min_warmup_steps (the spec's warmup rule for "
    "powersgd) is not there yet",
)


def test_grad_compression_is_a_ddp_axis():
    ok = parse_spec({**GOOD, "grid": {"strategy": ["ddp", "zero3"], "grad_compression": "bf16"}})
    assert ok.grid.grad_compression == ["bf16"] and ok.notes == []
    default = parse_spec(GOOD).grid
    assert default.grad_compression == ["none"]  # default: DDP as it always ran, uncompressed
    assert default.powersgd_rank == [1]  # torch's default rank; stored 0 unless powersgd
    msg = errors_of({**GOOD, "grid": {"strategy": ["zero2"], "grad_compression": ["none", "bf16"]}})
    assert "grid.grad_compression" in msg and "applies to ddp only" in msg
    assert "['zero2']" in msg


def test_the_old_ddp_grad_dtype_key_reads_as_grad_compression_with_a_note():
    s = parse_spec({**GOOD, "grid": {"strategy": ["ddp"], "ddp_grad_dtype": ["fp32", "bf16"]}})
    assert s.grid.grad_compression == ["none", "bf16"]
    (note,) = s.notes
    assert "grid.ddp_grad_dtype is now grid.grad_compression" in note
    assert "['fp32', 'bf16'] as ['none', 'bf16']" in note
    # a value the old key never had is refused naming the old key's values
    msg = errors_of({**GOOD, "grid": {"ddp_grad_dtype": ["fp16"]}})
    assert "grid.ddp_grad_dtype (now grad_compression)" in msg
    assert "['fp16'] not allowed" in msg and "['fp32', 'bf16']" in msg
    msg = errors_of({**GOOD, "grid": {"ddp_grad_dtype": ["bf16"], "grad_compression": ["bf16"]}})
    assert "grid.ddp_grad_dtype: renamed grad_compression" in msg and "keep grad_compression" in msg


def test_bad_compression_values_name_the_allowed_ones():
    msg = errors_of({**GOOD, "grid": {"grad_compression": ["zstd"]}})
    assert "grid.grad_compression.0: 'zstd' is not allowed" in msg
    assert all(f"'{v}'" in msg for v in catalog.axis("grad_compression").values)
    msg = errors_of({**GOOD, "grid": {"grad_compression": ["bf16", "bf16"]}})
    assert "grid.grad_compression" in msg and "distinct" in msg
    msg = errors_of({**GOOD, "grid": {"grad_compression": ["powersgd"], "powersgd_rank": [0]}})
    assert "grid.powersgd_rank" in msg and ">= 1" in msg


def test_powersgd_rank_without_powersgd_is_refused():
    msg = errors_of({**GOOD, "grid": {"grad_compression": ["none", "bf16"], "powersgd_rank": [4]}})
    assert "grid.powersgd_rank: applies only where grid.grad_compression is powersgd" in msg
    assert "['none', 'bf16']" in msg and "remove grid.powersgd_rank" in msg
    msg = errors_of({**GOOD, "grid": {"powersgd_rank": [1, 4]}})  # the default: none
    assert "grid.powersgd_rank" in msg and "grid.grad_compression is ['none']" in msg


@needs_powersgd
def test_powersgd_is_refused_beside_overlap_comm_false():
    grid = {"grad_compression": ["none", "powersgd"], "overlap_comm": [False]}
    msg = errors_of({**GOOD, "warmup_steps": 10, "grid": grid})
    assert "grid.grad_compression: 'powersgd' is refused with grid.overlap_comm ['false']" in msg
    assert "carries no comm hook" in msg
    ok = {**GOOD, "warmup_steps": 10}
    ok["grid"] = {"grad_compression": ["powersgd"], "powersgd_rank": [1, 4], "overlap_comm": [True]}
    s = parse_spec(ok)
    assert s.grid.grad_compression == ["powersgd"] and s.grid.powersgd_rank == [1, 4]
    # without powersgd, overlap_comm false is DDP's own all-reduce as before
    parse_spec({**GOOD, "grid": {"grad_compression": ["bf16"], "overlap_comm": [False]}})


@needs_powersgd
def test_powersgd_needs_enough_warmup_steps():
    msg = errors_of({**GOOD, "warmup_steps": 1, "grid": {"grad_compression": ["powersgd"]}})
    assert "warmup_steps: 1 is too few for grid.grad_compression 'powersgd'" in msg
    assert "allowed: warmup_steps >= " in msg
    need = int(msg.split("allowed: warmup_steps >= ")[1].split()[0])
    parse_spec({**GOOD, "warmup_steps": need, "grid": {"grad_compression": ["powersgd"]}})
