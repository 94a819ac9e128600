"""Grid expansion, run order, ids, run env and the configs ranks receive, without Ray."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re

import pytest

from orchestrator.sweep.planner import (
    RankPlacement,
    Variant,
    expand_grid,
    link_placements,
    linkbench_config,
    linkbench_id_for,
    new_sweep_id,
    nvme_dir_for,
    place_ranks,
    plan_runs,
    rank_env_for,
    run_config,
    run_env,
    run_id_for,
)
from orchestrator.sweep.spec import parse_spec
from tests.unit.test_spec import needs_powersgd  # the grid lists powersgd
from workloads.contract import LinkbenchConfig, NodeInfo, RunConfig


def spec(**grid):
    return parse_spec(
        {
            "name": "p",
            "repeats": 3,
            "links": {"a": {}, "b": {"X": "1"}},
            "grid": grid,
        }
    )


def test_cartesian_product_in_file_order():
    variants = expand_grid(spec(strategy=["ddp", "zero3"], grad_accum=[1, 4]))
    assert len(variants) == 2 * 2 * 2  # strategies x grad_accum x links
    assert [(v.strategy, v.grad_accum, v.link) for v in variants[:3]] == [
        ("ddp", 1, "a"),
        ("ddp", 1, "b"),
        ("ddp", 4, "a"),
    ]


def test_offload_applies_to_zero_only():
    variants = expand_grid(
        spec(strategy=["ddp", "zero2", "zero3"], offload=["none", "cpu", "nvme"])
    )
    ddp = [v for v in variants if v.strategy == "ddp"]
    assert {v.offload for v in ddp} == {"none"} and len(ddp) == 2  # one per link, no duplicates
    assert {v.offload for v in variants if v.strategy == "zero2"} == {"none", "cpu"}
    assert {v.offload for v in variants if v.strategy == "zero3"} == {"none", "cpu", "nvme"}


def test_repeats_are_interleaved_round_robin():
    runs = plan_runs(spec(grad_accum=[1, 2]))
    n_variants = 4
    assert len(runs) == n_variants * 3
    assert [r.seq for r in runs] == list(range(1, 13))
    assert [r.repeat for r in runs] == [1] * 4 + [2] * 4 + [3] * 4
    assert [r.variant for r in runs[:4]] == [r.variant for r in runs[4:8]]


def test_link_placements():
    assert link_placements(spec(placement=["pack", "spread"])) == [
        ("a", "pack"),
        ("a", "spread"),
        ("b", "pack"),
        ("b", "spread"),
    ]


# --------------------------------------------------------------------------------------------
# Ids, env and what every rank receives


LINKS = {"default": {}, "quiet": {"NCCL_DEBUG": "WARN", "NCCL_P2P_DISABLE": 1}}


def test_ids():
    sweep_id = new_sweep_id(dt.datetime(2026, 3, 4, 5, 6, 7, tzinfo=dt.timezone.utc))
    assert re.fullmatch(r"20260304-050607-[0-9a-f]{6}", sweep_id)
    assert new_sweep_id() != new_sweep_id()
    assert run_id_for("s", 7) == "s-r0007"
    assert linkbench_id_for("s", "quiet", "spread") == "s-lb-quiet-spread"


def test_run_env_user_value_wins_and_nccl_logging_defaults():
    s = parse_spec({"name": "p", "world_size": 2, "links": LINKS})
    env = run_env(s, "default", "r1", cpus_per_rank=2)
    assert env["NCCL_DEBUG"] == "INFO" and env["OMP_NUM_THREADS"] == "2"
    assert env["NCCL_DEBUG_FILE"] == "/tmp/linksweep-nccl-r1-%h-%p.log"
    quiet = run_env(s, "quiet", "r1", cpus_per_rank=1)
    assert quiet["NCCL_DEBUG"] == "WARN" and quiet["NCCL_P2P_DISABLE"] == "1"
    assert run_env(s, "default", "r1", cpus_per_rank=0)["OMP_NUM_THREADS"] == "1"


def test_run_config_is_frozen_with_ds_config_for_zero_only():
    s = parse_spec(
        {
            "name": "p",
            "world_size": 2,
            "seq_len": 64,
            "steps": 5,
            "run_timeout_s": 900,
            "nvme_path": "/scratch/ls",
            "grid": {"strategy": ["ddp", "zero2", "zero3"], "offload": ["none", "nvme"]},
        }
    )
    by_key = {(v.strategy, v.offload): v for v in expand_grid(s)}
    ddp = run_config(s, by_key[("ddp", "none")], "s-r0001")
    assert isinstance(ddp, RunConfig)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ddp.steps = 1  # type: ignore[misc]
    assert ddp.ds_config is None and ddp.nvme_dir is None
    assert (ddp.run_id, ddp.strategy, ddp.seq_len, ddp.steps) == ("s-r0001", "ddp", 64, 5)
    assert ddp.pg_timeout_s == 960.0  # past run_timeout_s: the driver's deadline comes first

    z2 = run_config(s, by_key[("zero2", "none")], "s-r0002")
    assert z2.ds_config["zero_optimization"]["stage"] == 2
    assert z2.ds_config["train_micro_batch_size_per_gpu"] == s.micro_batch_size
    assert z2.nvme_dir is None

    z3 = run_config(s, by_key[("zero3", "nvme")], "s-r0003")
    assert z3.nvme_dir == nvme_dir_for(s, by_key[("zero3", "nvme")], "s-r0003")
    assert z3.nvme_dir == "/scratch/ls/s-r0003"
    zero = z3.ds_config["zero_optimization"]
    assert zero["stage"] == 3 and zero["offload_param"]["nvme_path"] == z3.nvme_dir
    assert "comms_logger" not in z3.ds_config or not z3.ds_config["comms_logger"]["enabled"]


def test_linkbench_config_sizes():
    s = parse_spec({"name": "p", "world_size": 2})
    assert linkbench_config(s, "lb", gpu=False).max_bytes == 16 * 2**20
    assert linkbench_config(s, "lb", gpu=True).max_bytes == 256 * 2**20
    custom = parse_spec({"name": "p", "world_size": 2, "linkbench_max_mb": 1})
    lb = linkbench_config(custom, "lb", gpu=True)
    assert isinstance(lb, LinkbenchConfig) and lb.max_bytes == 2**20 and lb.run_id == "lb"


# Rank placement: local ranks and visible GPUs from where the actors landed.


def _info(node: str, gpus: tuple[str, ...], pid: int) -> NodeInfo:
    return NodeInfo(
        node_id=node, hostname=f"host-{node}", ip=f"10.0.0.{pid}", gpu_ids=gpus, pid=pid
    )


def test_place_ranks_local_ranks_and_visible_gpus_per_node():
    infos = [
        _info("a", ("3",), 1),
        _info("b", ("0",), 2),
        _info("a", ("1",), 3),
        _info("b", ("2",), 4),
        _info("a", ("0",), 5),
    ]
    placed = place_ranks(infos)
    assert all(isinstance(p, RankPlacement) for p in placed)
    assert [p.rank for p in placed] == [0, 1, 2, 3, 4]
    # local ranks count up per node in rank order
    assert [(p.node_id, p.local_rank) for p in placed] == [
        ("a", 0),
        ("b", 0),
        ("a", 1),
        ("b", 1),
        ("a", 2),
    ]
    # every rank sees the GPUs of all the run's ranks on its node, in rank order
    assert {p.rank: p.visible_gpus for p in placed} == {
        0: ("3", "1", "0"),
        1: ("0", "2"),
        2: ("3", "1", "0"),
        3: ("0", "2"),
        4: ("3", "1", "0"),
    }
    # the rank's own GPU and where it ran are kept as the actor reported them
    assert [(p.gpu_ids, p.hostname, p.ip, p.pid) for p in placed][2] == (
        ("1",),
        "host-a",
        "10.0.0.3",
        3,
    )


def test_place_ranks_without_gpus():
    placed = place_ranks([_info("a", (), 1), _info("a", (), 2)])
    assert [(p.local_rank, p.visible_gpus, p.gpu_ids) for p in placed] == [
        (0, None, ()),
        (1, None, ()),
    ]
    assert place_ranks([]) == []


def test_bucket_default_is_each_frameworks_own_and_a_given_size_applies_to_both():
    s = spec(strategy=["ddp", "zero2"], bucket_mb=["default", 50])
    got = {(v.strategy, v.bucket_mb) for v in expand_grid(s)}
    # 5e8 fp32 elements = 1907 MiB
    assert got == {("ddp", 25), ("ddp", 50), ("zero2", 1907), ("zero2", 50)}
    cfgs = {(v.strategy, v.bucket_mb): run_config(s, v, "r") for v in expand_grid(s)}
    assert cfgs[("ddp", 25)].bucket_mb is None  # DDP's own default (and its small first bucket)
    assert cfgs[("ddp", 50)].bucket_mb == 50
    assert "reduce_bucket_size" not in cfgs[("zero2", 1907)].ds_config["zero_optimization"]
    # 50 MiB of fp32, the bytes of DDP's bucket_cap_mb=50
    assert cfgs[("zero2", 50)].ds_config["zero_optimization"]["reduce_bucket_size"] == 13_107_200


def test_overlap_axis_makes_distinct_variants_and_reaches_the_ranks():
    s = spec(strategy=["ddp", "zero1"], overlap_comm=["default", "false"], link=["a"])
    variants = expand_grid(s)
    assert [(v.strategy, v.overlap_comm) for v in variants] == [
        ("ddp", "default"),
        ("ddp", "false"),
        ("zero1", "default"),
        ("zero1", "false"),
    ]
    assert "overlap=false" in variants[1].label and "overlap" not in variants[0].label
    ddp_off = run_config(s, variants[1], "r")
    assert ddp_off.overlap_comm == "false" and ddp_off.ds_config is None
    zero_off = run_config(s, variants[3], "r").ds_config["zero_optimization"]
    assert zero_off["overlap_comm"] is False
    assert "overlap_comm" not in run_config(s, variants[2], "r").ds_config["zero_optimization"]
    assert variants[1].to_dict()["overlap_comm"] == "false"


def test_deepspeed_block_reaches_every_zero_run():
    s = parse_spec(
        {
            "name": "p",
            "grid": {"strategy": ["ddp", "zero1", "zero3"]},
            "deepspeed": {"zero_optimization": {"reduce_bucket_size": 1_000_000}},
        }
    )
    by = {v.strategy: (v, run_config(s, v, "r")) for v in expand_grid(s)}
    assert by["ddp"][1].ds_config is None and by["ddp"][0].bucket_mb == 25
    for z in ("zero1", "zero3"):
        v, cfg = by[z]
        assert cfg.ds_config["zero_optimization"]["reduce_bucket_size"] == 1_000_000
        assert v.bucket_mb == 4  # the block's bucket, in MiB of fp32


# --- run env: device order, NVLS with no P2P, the one-GPU rehearsal's host ids ---


def _env_spec(links, **extra):
    return parse_spec({"name": "p", "world_size": 2, "links": links, **extra})


def test_every_rank_orders_cuda_devices_by_pci_bus_id_unless_the_link_says_otherwise():
    # CUDA index i is NVML / nvidia-smi index i only in PCI order
    s = _env_spec({"a": {}, "fast": {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}})
    assert run_env(s, "a", "r", 1)["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert run_env(s, "fast", "r", 1)["CUDA_DEVICE_ORDER"] == "FASTEST_FIRST"


def test_no_p2p_turns_nvls_off_unless_the_link_sets_it():
    s = _env_spec(
        {
            "a": {},
            "no_p2p": {"NCCL_P2P_DISABLE": "1"},
            "no_p2p_nvls": {"NCCL_P2P_DISABLE": "1", "NCCL_NVLS_ENABLE": "1"},
            "p2p_zero": {"NCCL_P2P_DISABLE": "0"},  # NCCL honours only 1
        }
    )
    assert "NCCL_NVLS_ENABLE" not in run_env(s, "a", "r", 1)
    assert run_env(s, "no_p2p", "r", 1)["NCCL_NVLS_ENABLE"] == "0"
    assert run_env(s, "no_p2p_nvls", "r", 1)["NCCL_NVLS_ENABLE"] == "1"
    assert "NCCL_NVLS_ENABLE" not in run_env(s, "p2p_zero", "r", 1)


def test_two_ranks_per_gpu_give_each_rank_its_own_nccl_host_id():
    s = _env_spec({"a": {}, "own": {"NCCL_HOSTID": "mine-{rank}"}}, ranks_per_gpu=2)
    env = run_env(s, "a", "r", 1)
    assert env["NCCL_HOSTID"] == "linksweep-rank{rank}"
    assert [rank_env_for(env, r)["NCCL_HOSTID"] for r in (0, 1)] == [
        "linksweep-rank0",
        "linksweep-rank1",
    ]
    own = run_env(s, "own", "r", 1)
    assert rank_env_for(own, 1)["NCCL_HOSTID"] == "mine-1"  # the link's value wins
    assert "NCCL_NET" not in env  # NCCL picks NET itself for ranks on "different hosts"
    assert "NCCL_HOSTID" not in run_env(_env_spec({"a": {}}), "a", "r", 1)


def test_rank_form_is_filled_in_every_value_and_nothing_else_changes():
    env = {"A": "x-{rank}-{rank}", "B": "plain", "C": "%h-%p"}
    assert rank_env_for(env, 3) == {"A": "x-3-3", "B": "plain", "C": "%h-%p"}
    assert env["A"] == "x-{rank}-{rank}"  # the run's env is not changed


def test_two_ranks_per_gpu_plan_as_usual():
    s = _env_spec({"a": {}}, ranks_per_gpu=2, grid={"strategy": ["ddp", "zero1"]})
    assert s.ranks_per_gpu == 2
    assert [p.variant.placement for p in plan_runs(s)] == ["pack"] * 4


@needs_powersgd
def test_grad_compression_expands_ddp_only_and_reaches_the_ranks():
    s = parse_spec(
        {
            "name": "p",
            "repeats": 3,
            "warmup_steps": 10,  # enough for PowerSGD to compress every measured step
            "links": {"a": {}, "b": {"X": "1"}},
            "grid": {
                "strategy": ["ddp", "zero3"],
                "grad_compression": ["none", "bf16", "powersgd"],
                "powersgd_rank": [1, 4],
            },
        }
    )
    variants = [v for v in expand_grid(s) if v.link == "a"]
    assert [(v.strategy, v.grad_compression, v.powersgd_rank) for v in variants] == [
        ("ddp", "none", 0),  # the rank applies under powersgd only: one variant, not two
        ("ddp", "bf16", 0),
        ("ddp", "powersgd", 1),
        ("ddp", "powersgd", 4),
        ("zero3", "n/a", 0),  # ZeRO's dtypes follow precision and its config: no DDP axis
    ]
    labels = [v.label for v in variants]
    assert "compress" not in labels[0] and "compress=bf16" in labels[1]
    assert "compress=powersgd" in labels[2] and "rank=" not in labels[2]  # rank 1: the default
    assert "compress=powersgd rank=4" in labels[3]
    assert variants[3].to_dict()["powersgd_rank"] == 4  # stored with the variant
    assert len(plan_runs(s)) == 5 * 2 * 3  # variants x links x repeats
    for v in variants:  # what the ranks read: RunConfig.axes carries both
        axes = run_config(s, v, "r").axes
        assert axes["grad_compression"] == v.grad_compression
        assert axes["powersgd_rank"] == v.powersgd_rank
    assert run_config(s, variants[4], "r").ds_config is not None
    zero3 = Variant("zero3", 1, "a", "pack")  # however it is built
    assert (zero3.grad_compression, zero3.powersgd_rank) == ("n/a", 0)
    assert Variant("ddp", 1, "a", "pack").grad_compression == "none"
    assert Variant("ddp", 1, "a", "pack", powersgd_rank=4).powersgd_rank == 0
    assert Variant("ddp", 1, "a", "pack", grad_compression="powersgd").powersgd_rank == 1
