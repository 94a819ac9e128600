"""Unit tests for orchestrator.analysis.comm_model (bandwidth accounting, expected volume, prediction) and
workloads.ds_comms (DeepSpeed's comms-logger output), checked against real captured summaries.

tests/data/ds_comms_summary.json and ds_comms_summary_zero2.json are the unmodified dicts that
``deepspeed.comm.log_summary(return_dict=True)`` returned on rank 0 (DeepSpeed 0.19.8, torch
2.13 CPU, gloo, 2 ranks), JSON round-tripped, for a tiny GPT2LMHeadModel (n_layer=2, n_embd=64,
n_head=2: 3,320,640 parameters, fp32, so Psi = 13,282,560 bytes), micro_batch 2, grad_accum 2,
bucket_mb 1, config from orchestrator.sweep.ds_config, after warmup and ``deepspeed.comm.reset_log()``,
over 2 optimizer steps. ds_comms_summary.json is zero3, ds_comms_summary_zero2.json is zero2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.analysis import comm_model
from orchestrator.analysis.comm_model import (
    CommExpectation,
    algbw_gbps,
    bandwidths_gbps,
    busbw_factor,
    busbw_gbps,
    expected_comm,
    expected_msg_bytes_per_step,
    expected_wire_bytes_per_step,
    predict_comm_s,
    run_expectation,
)
from workloads import contract
from workloads.contract import canonical_op
from workloads.ds_comms import (
    LoggedComm,
    nccl_msg_bytes,
    parse_comms_summary,
    summarize_records,
)

DATA = Path(__file__).resolve().parents[1] / "data"
PSI = 4_000_000  # bytes: 1 M fp32 parameters
TINY_PSI = 3_320_640 * 4  # the captured runs' model


# --- bandwidth accounting ---------------------------------------------------------------


@pytest.mark.parametrize(
    "op,n,expected",
    [
        ("all_reduce", 2, 1.0),
        ("all_reduce", 8, 1.75),
        ("reduce_scatter", 4, 0.75),
        ("all_gather", 8, 0.875),
        ("all_to_all", 2, 0.5),
        ("broadcast", 8, 1.0),
        ("reduce", 3, 1.0),
        ("all_reduce", 1, 0.0),
    ],
)
def test_busbw_factor(op, n, expected):
    assert busbw_factor(op, n) == pytest.approx(expected)


@pytest.mark.parametrize(
    "alias,canonical",
    [
        ("all_gather_into_tensor", "all_gather"),
        ("reduce_scatter_tensor", "reduce_scatter"),
        ("all_reduce_coalesced", "all_reduce"),
        ("all_gather_base", "all_gather"),
        ("reduce_scatter_base", "reduce_scatter"),
        ("allgather_coalesced", "all_gather"),
        ("all_to_all_single", "all_to_all"),
        ("all_reduce | [Caller Func: allreduce_bucket]", "all_reduce"),
    ],
)
def test_aliases(alias, canonical):
    assert canonical_op(alias) == canonical
    assert busbw_factor(alias, 4) == busbw_factor(canonical, 4)


def test_canonical_op_has_one_home():
    # defined in the workloads contract (ranks use it), re-exported by the driver's comm model
    assert comm_model.canonical_op is contract.canonical_op
    assert comm_model.CANONICAL_OPS is contract.CANONICAL_OPS
    assert all(canonical_op(op) == op for op in contract.CANONICAL_OPS)


def test_unknown_op_and_bad_n():
    with pytest.raises(ValueError, match="unknown collective"):
        busbw_factor("barrier", 2)
    with pytest.raises(ValueError, match="positive int"):
        busbw_factor("all_reduce", 0)


def test_algbw_busbw_units():
    # 1e9 bytes in 0.5 s = 2 GB/s (base-10)
    assert algbw_gbps(1e9, 0.5) == pytest.approx(2.0)
    # all_reduce over 8 ranks: x 1.75
    assert busbw_gbps("all_reduce", 8, 1e9, 0.5) == pytest.approx(3.5)
    assert busbw_gbps("all_gather", 4, 3e9, 1.0) == pytest.approx(2.25)
    with pytest.raises(ValueError, match="time_s"):
        algbw_gbps(1, 0.0)


def test_bandwidths_none_when_nothing_was_timed():
    assert bandwidths_gbps("all_gather", 4, 3e9, 1.0) == pytest.approx((3.0, 2.25))
    assert bandwidths_gbps("all_reduce", 2, 1000, 0.0) == (None, None)


def test_nccl_msg_bytes_converts_all_gather_shard():
    assert nccl_msg_bytes("all_gather_into_tensor", 100, 4) == 400
    assert nccl_msg_bytes("all_gather", 100, 2) == 200
    assert nccl_msg_bytes("reduce_scatter_tensor", 100, 4) == 100
    assert nccl_msg_bytes("all_reduce", 100, 4) == 100


# --- expected volume --------------------------------------------------------------------


def test_ddp_flat_in_grad_accum():
    for ga in (1, 2, 8):
        e = expected_comm("ddp", ga, PSI, 8)
        assert e.per_op == {"all_reduce": PSI}
        assert e.msg_bytes_per_step == PSI
        # 2(n-1)/n Psi on the wire: 1.75 x 4e6
        assert e.wire_bytes_per_step == 7_000_000
    # two ranks: wire = Psi; large n approaches the "2 Psi" of the textbook
    assert expected_wire_bytes_per_step("ddp", 1, PSI, 2) == PSI
    assert expected_wire_bytes_per_step("ddp", 1, PSI, 1024) == pytest.approx(2 * PSI, rel=1e-3)


def test_zero1_flat_all_reduce_plus_all_gather():
    e1 = expected_comm("zero1", 1, PSI, 4)
    e8 = expected_comm("zero1", 8, PSI, 4)
    assert e1 == e8
    assert e1.per_op == {"all_reduce": PSI, "all_gather": PSI}
    assert e1.msg_bytes_per_step == 8_000_000
    # all_reduce 1.5 x 4e6 + all_gather 0.75 x 4e6 = 9e6 = 3(n-1)/n Psi
    assert e1.wire_bytes_per_step == 9_000_000


def test_zero2_reduces_every_micro_step():
    e = expected_comm("zero2", 4, PSI, 2)
    assert e.per_op == {"all_reduce": 4 * PSI, "all_gather": PSI}
    assert e.msg_bytes_per_step == 20_000_000
    # n=2: all_reduce factor 1, all_gather 0.5
    assert e.wire_bytes_per_step == 16_000_000 + 2_000_000


def test_zero3_grows_linearly_with_grad_accum():
    e1 = expected_comm("zero3", 1, PSI, 2)
    assert e1.per_op == {"all_gather": 2 * PSI, "reduce_scatter": PSI}
    assert e1.msg_bytes_per_step == 3 * PSI
    # n=2: (2 + 1) x 0.5 x Psi
    assert e1.wire_bytes_per_step == 6_000_000
    for ga in (2, 4, 16):
        e = expected_comm("zero3", ga, PSI, 2)
        assert e.msg_bytes_per_step == ga * e1.msg_bytes_per_step
        assert e.wire_bytes_per_step == ga * e1.wire_bytes_per_step


def test_zero3_one_gather_per_micro_step():
    e = expected_comm("zero3", 2, PSI, 2, zero3_gathers_per_micro_step=1)
    assert e.per_op == {"all_gather": 2 * PSI, "reduce_scatter": 2 * PSI}


def test_helpers_match_expectation():
    e = expected_comm("zero2", 3, PSI, 8)
    assert expected_msg_bytes_per_step("zero2", 3, PSI, 8) == e.msg_bytes_per_step
    assert expected_wire_bytes_per_step("zero2", 3, PSI, 8) == e.wire_bytes_per_step


def test_world_size_one_is_empty():
    e = expected_comm("zero3", 4, PSI, 1)
    assert e == CommExpectation(0, 0, {}, e.note)


def test_expectation_is_frozen():
    e = expected_comm("ddp", 1, PSI, 2)
    with pytest.raises(AttributeError):
        e.msg_bytes_per_step = 0  # type: ignore[misc]


@pytest.mark.parametrize(
    "args,match",
    [
        (("fsdp", 1, PSI, 2), "strategy"),
        (("ddp", 0, PSI, 2), "grad_accum"),
        (("ddp", 1, -1, 2), "param_bytes"),
        (("ddp", 1, PSI, 0), "positive int"),
    ],
)
def test_expected_comm_validation(args, match):
    with pytest.raises(ValueError, match=match):
        expected_comm(*args)


# --- one run's expectation and its predicted time on a measured link -------------------


def _ds(**zero):
    """An effective config as DeepSpeed reports it (only the keys the model reads)."""
    return {"zero_optimization": {"stage3_param_persistence_threshold": 0, **zero}}


def test_run_expectation_dtype_and_zero3_gathers():
    n = 1_000_000
    ddp, note = run_expectation("ddp", 2, "bf16", 2, n)
    assert ddp.msg_bytes_per_step == 4 * n and note.startswith("DDP")  # fp32 grads
    zero1, _ = run_expectation("zero1", 1, "bf16", 2, n, _ds(overlap_comm=False))
    assert zero1.per_op == {"all_reduce": 2 * n, "all_gather": 2 * n}  # reduced in bf16
    # the prefetch bucket covers the model: one gather per micro-step
    small, note = run_expectation(
        "zero3", 2, "fp32", 2, n, _ds(stage3_prefetch_bucket_size=n, stage3_max_reuse_distance=0)
    )
    assert small.per_op == {"all_gather": 2 * 4 * n, "reduce_scatter": 2 * 4 * n}
    assert "once per micro-step" in note
    # DeepSpeed's default reuse distance (1e9) also covers any model under 1e9 parameters
    default_reuse, _ = run_expectation(
        "zero3",
        1,
        "fp32",
        2,
        n,
        _ds(stage3_prefetch_bucket_size=1, stage3_max_reuse_distance=10**9),
    )
    assert default_reuse.per_op["all_gather"] == 4 * n
    # a small prefetch bucket and no reuse: gathered in forward and again in backward
    big, _ = run_expectation(
        "zero3",
        1,
        "fp32",
        2,
        100 * n,
        _ds(stage3_prefetch_bucket_size=n, stage3_max_reuse_distance=0),
    )
    assert big.per_op == {"all_gather": 2 * 400 * n, "reduce_scatter": 400 * n}
    assert run_expectation("ddp", 1, "fp32", 1, n) == (None, None)  # one rank: nothing crosses


def test_run_expectation_zero1_is_flat_with_or_without_overlap():
    n = 1000
    off, _ = run_expectation("zero1", 4, "fp32", 2, n, _ds(overlap_comm=False))
    on, note = run_expectation("zero1", 4, "fp32", 2, n, _ds(overlap_comm=True))
    # at the boundary only either way: with overlap the hooks reduce during the boundary
    # backward (measured: tests/integration/test_overlap.py)
    assert off.per_op == on.per_op == {"all_reduce": 4 * n, "all_gather": 4 * n}
    assert "overlap_comm" in note and "boundary" in note


@pytest.mark.parametrize(
    "ds_config,why",
    [
        (
            {"zero_optimization": {"stage3_param_persistence_threshold": 100000}},
            "stage3_param_persistence_threshold=100000",
        ),
        (
            _ds(stage3_max_reuse_distance=10, stage3_prefetch_bucket_size=1),
            "stage3_max_reuse_distance=10",
        ),
        ({**_ds(), "communication_data_type": "int8"}, "communication_data_type='int8'"),
        (None, "no effective DeepSpeed config"),
    ],
)
def test_run_expectation_is_null_with_a_reason_where_the_model_cannot_say(ds_config, why):
    exp, note = run_expectation("zero3", 1, "fp32", 2, 10**6, ds_config)
    assert exp is None and why in note


def test_predict_comm_prices_each_op_at_nearest_measured_size():
    prices = {
        ("all_reduce", 2**20): 1.0,
        ("all_reduce", 2**24): 2.0,
        ("all_gather", 2**24): 0.5,
    }
    comms = [
        ("all_reduce", 2**24, 1),  # 16.8 MB at 2 GB/s
        ("all_gather", 2**23, 2),  # nearest size 2**24: 0.5 GB/s
    ]
    expected = 2**24 / 2e9 + 2 * 2**23 / 0.5e9
    assert predict_comm_s(comms, prices) == pytest.approx(expected)
    # nearest on a log scale: 2**21 is nearer 2**20 than 2**24; beyond the largest, the largest
    assert predict_comm_s([("all_reduce", 2**21, 1)], prices) == pytest.approx(2**21 / 1e9)
    assert predict_comm_s([("all_reduce", 2**30, 0.5)], prices) == pytest.approx(2**29 / 2e9)
    assert predict_comm_s([("reduce_scatter", 10, 1)], prices) is None  # not measured
    assert predict_comm_s([], prices) == 0.0


# --- DeepSpeed comms summary ------------------------------------------------------------


def _load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def test_parse_captured_zero3_summary():
    records = parse_comms_summary(_load("ds_comms_summary.json"))
    assert records == sorted(records, key=lambda r: (r.op, r.msg_bytes))
    by_key = {(r.op, r.msg_bytes): r for r in records}
    assert set(by_key) == {
        ("all_gather_into_tensor", 208384),
        ("all_gather_into_tensor", 6432896),
        ("reduce_scatter_tensor", 416768),
        ("reduce_scatter_tensor", 12865792),
        ("all_reduce", 8),
        ("log_summary_barrier", 0),
    }
    ag = by_key[("all_gather_into_tensor", 6432896)]
    assert ag.count == 4
    assert ag.total_time_s == pytest.approx(0.3253169059753418)
    assert all(isinstance(r, LoggedComm) for r in records)


def test_captured_zero3_matches_model_with_one_gather():
    """The tiny model fits DeepSpeed's prefetch window, so every parameter is gathered once
    per micro-step (see comm_model docstring); volumes match the model exactly."""
    records = parse_comms_summary(_load("ds_comms_summary.json"))
    measured = summarize_records(records, world_size=2, optimizer_steps=2)
    expected = expected_comm("zero3", 2, TINY_PSI, 2, zero3_gathers_per_micro_step=1)
    assert measured == expected.per_op
    # all_gather logged as the local shard: 2 ranks x shard = the whole model
    assert TINY_PSI // 2 == 208384 + 6432896


def test_captured_zero2_matches_model():
    records = parse_comms_summary(_load("ds_comms_summary_zero2.json"))
    measured = summarize_records(records, world_size=2, optimizer_steps=2)
    assert measured == expected_comm("zero2", 2, TINY_PSI, 2).per_op
    # the scalar gradient-norm all_reduce (4 bytes) is dropped, but is in the records
    assert any(r.op == "all_reduce" and r.msg_bytes == 4 and r.count == 2 for r in records)


def test_parse_accepts_int_keys_and_debug_names():
    live = {
        "summary": {
            "all_reduce | [Caller Func: allreduce_bucket]": {
                1024: {
                    "count": 3,
                    "total_latency_ms": 1.5,
                    "avg_latency_ms": 0.5,
                    "tput_avg_gbps": 0.0,
                    "busbw_avg_gbps": 0.0,
                    "msg_size_bytes": 1024,
                    "msg_size_str": "1.0 KB",
                }
            }
        },
        "straggler_analysis": None,
        "metadata": {"world_size": 2, "rank": 0, "timestamp": "x"},
    }
    (r,) = parse_comms_summary(live)
    assert r == LoggedComm("all_reduce | [Caller Func: allreduce_bucket]", 1024, 3, 0.0015)
    assert summarize_records([r], world_size=2) == {"all_reduce": 3072}


def test_parse_rejects_non_summary():
    with pytest.raises(ValueError, match="summary"):
        parse_comms_summary({"all_reduce": {}})
    assert parse_comms_summary({"summary": {}}) == []
