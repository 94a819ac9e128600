"""orchestrator.analysis.zero_promise: what ZeRO's non-final micro-batches send, per stage,
offload and grad_accum, against figures the collective recorder measured on real DeepSpeed
0.19.8 runs (2 gloo ranks, gpt2-tiny: 3,382,080 parameters, of which the token embedding,
3,216,448, is the only one over ZeRO-3's default 100,000-element persistence threshold), and the
verdict both ways: the measured bytes pass their promise and fail any other."""

from __future__ import annotations

import pytest

from orchestrator.analysis.comm_model import accumulation_verdict
from orchestrator.analysis.zero_promise import (
    gpt2_param_numels,
    non_final_promise,
    padded,
    persistent,
)
from orchestrator.sweep import rows
from orchestrator.sweep.planner import plan_runs
from orchestrator.sweep.spec import parse_spec
from workloads.contract import TelemetryRecord, TrainingRecord

TINY = gpt2_param_numels("gpt2-tiny")
N_PARAMS = 3_382_080
WTE = 50257 * 64
MAXSIZE = 2**63 - 1


def _eff(stage: int, offload: str = "none", **zero) -> dict:
    """An effective config with DeepSpeed 0.19.8's defaults for the keys the promise reads (as
    ``runs.ds_config`` holds them), ``zero`` overriding."""
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
        "offload_optimizer": {"device": "cpu"} if offload == "cpu" else None,
        "offload_param": None,
        "zenflow": None,
        **zero,
    }
    return {"zero_optimization": block, "communication_data_type": None}


def _promise(strategy, ga, eff, precision="fp32", world=2):
    return non_final_promise(strategy, ga, world, precision, eff, TINY, N_PARAMS)


def test_gpt2_tiny_shapes_add_up_to_the_parameters_trained():
    assert sum(TINY) == N_PARAMS  # what tests/integration/test_zero.py's runs report
    assert TINY[0] == WTE and len(TINY) == 2 + 2 * 12 + 2
    assert persistent(TINY, 100_000).count(False) == 1  # only the token embedding is gathered
    assert (padded(WTE, 2), padded(WTE, 3), padded(7, 4)) == (WTE, WTE + 2, 8)


# Measured non-final bytes per step (rank 0, profiled steps after a warmup step; see the module
# docstring of zero_promise for the commands' configs).
MEASURED = [
    # strategy, grad_accum, offload, precision, extra zero keys, bytes by op
    ("zero1", 2, "none", "fp32", {}, {}),
    ("zero1", 2, "cpu", "fp32", {}, {}),
    ("zero1", 2, "none", "fp32", {"overlap_comm": True}, {}),
    ("zero1", 2, "none", "bf16", {}, {}),
    ("zero2", 2, "none", "fp32", {}, {"all_reduce": 13_528_320}),
    ("zero2", 2, "cpu", "fp32", {}, {"all_reduce": 13_528_320}),
    ("zero2", 2, "none", "fp32", {"overlap_comm": True}, {"all_reduce": 13_528_320}),
    ("zero2", 2, "none", "fp32", {"reduce_scatter": False}, {"all_reduce": 13_528_320}),
    ("zero2", 2, "none", "fp32", {"use_multi_rank_bucket_allreduce": False}, {"reduce": 13_528_320}),
    ("zero2", 3, "none", "bf16", {}, {"all_reduce": 13_528_320}),  # 2 x 6,764,160 in bf16
    ("zero3", 2, "none", "fp32", {}, {"all_gather": 12_865_792, "reduce_scatter": 13_528_320}),
    ("zero3", 2, "cpu", "fp32", {}, {"all_gather": 12_865_792, "reduce_scatter": 13_528_320}),
    ("zero3", 2, "none", "fp32", {"overlap_comm": False}, {"all_gather": 12_865_792, "reduce_scatter": 13_528_320}),
    ("zero3", 3, "none", "bf16", {}, {"all_gather": 12_865_792, "reduce_scatter": 13_528_320}),
    # the serialized preset: nothing persists, the prefetch bucket (25 MiB) covers the model
    ("zero3", 2, "none", "fp32",
     {"stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0,
      "stage3_prefetch_bucket_size": 6_553_600, "overlap_comm": False},
     {"all_gather": 13_528_320, "reduce_scatter": 13_528_320}),
]  # fmt: skip


@pytest.mark.parametrize(("strategy", "ga", "offload", "precision", "zero", "measured"), MEASURED)
def test_promise_equals_what_real_runs_sent(strategy, ga, offload, precision, zero, measured):
    eff = _eff(int(strategy[-1]), offload, **zero)
    promised, note = _promise(strategy, ga, eff, precision)
    assert promised == measured, note
    assert accumulation_verdict(measured, promised, ga) == "ok"


def test_communication_dtype_reduces_in_it_and_gathers_in_the_models():
    """bf16 with communication_data_type fp32 (measured): ZeRO-3 gathers bf16 parameters and
    reduce-scatters fp32 gradients; ZeRO-2 all-reduces fp32."""
    eff = _eff(3)
    eff["communication_data_type"] = "torch.float32"
    assert _promise("zero3", 2, eff, "bf16")[0] == {
        "all_gather": 6_432_896,
        "reduce_scatter": 13_528_320,
    }
    eff2 = {**_eff(2), "communication_data_type": "torch.float32"}
    assert _promise("zero2", 2, eff2, "bf16")[0] == {"all_reduce": 13_528_320}


def test_promise_grows_with_the_non_final_micro_batches_and_pads_per_parameter():
    for ga in (1, 2, 4):
        assert _promise("zero2", ga, _eff(2))[0] == (
            {"all_reduce": (ga - 1) * 4 * N_PARAMS} if ga > 1 else {}
        )
    three, _ = _promise("zero3", 4, _eff(3), world=3)
    assert three == {
        "all_gather": 3 * 4 * padded(WTE, 3),
        "reduce_scatter": 3 * 4 * sum(padded(n, 3) for n in TINY),
    }
    assert _promise("zero1", 8, _eff(1))[0] == {}
    bare = _eff(3)  # a config without the model threshold: DeepSpeed's default, unbounded
    del bare["zero_optimization"]["stage3_model_persistence_threshold"]
    assert _promise("zero3", 2, bare)[0] == _promise("zero3", 2, _eff(3))[0]


def test_a_wrong_promise_or_a_planted_bug_fails_the_verdict():
    """Each stage's measured bytes against every other stage's promise: fail, naming the op."""
    measured = {s: m for s, ga, off, p, z, m in MEASURED[:11:5]}  # zero1, zero2, zero3 fp32 ga 2
    assert set(measured) == {"zero1", "zero2", "zero3"}
    for strategy, sent in measured.items():
        for other in measured:
            promised, _ = _promise(other, 2, _eff(int(other[-1])))
            verdict = accumulation_verdict(sent, promised, 2)
            assert (verdict == "ok") == (other == strategy), (strategy, other, verdict)
    # ZeRO-2 that skipped its non-final reduction (a bug that accumulates like ZeRO-1)
    promised, _ = _promise("zero2", 2, _eff(2))
    assert accumulation_verdict({}, promised, 2) == (
        "fail: all_reduce sent 0 B, promised 13528320 B"
    )
    # ZeRO-3 that gathered in backward again: one all_gather too many
    promised, _ = _promise("zero3", 2, _eff(3))
    doubled = {"all_gather": 2 * 12_865_792, "reduce_scatter": 13_528_320}
    assert accumulation_verdict(doubled, promised, 2).startswith("fail: all_gather sent 25731584")


@pytest.mark.parametrize(
    ("strategy", "zero", "why"),
    [
        ("zero3", {"stage3_max_reuse_distance": 0, "stage3_prefetch_bucket_size": 262_144},
         "not certain"),
        ("zero3", {"stage3_model_persistence_threshold": 10**6}, "model_persistence"),
        ("zero3", {"stage3_use_all_reduce_for_fetch_params": True}, "fetched by all_reduce"),
        ("zero3", {"stage3_module_granularity_threshold": 1}, "leaf modules"),
        ("zero3", {"mics_shard_size": 2}, "MiCS"),
        ("zero3", {"offload_param": {"device": "nvme"}}, "NVMe"),
        ("zero3", {"reduce_scatter": False}, "reduce_scatter false"),
        ("zero3", {"zero_quantized_gradients": True}, "quantized"),
        ("zero3", {"zero_hpz_partition_size": 2}, "hpZ"),
        ("zero2", {"zenflow": {"topk_ratio": 0.1}}, "ZenFlow"),
    ],
)  # fmt: skip
def test_no_promise_where_deepspeed_does_not_fix_the_bytes(strategy, zero, why):
    """Measured for the first: gpt2-tiny gathered once per micro-batch with no reuse and a
    262,144-element prefetch bucket, a 16 M-parameter model 1.73 times: no exact promise."""
    promised, note = _promise(strategy, 2, _eff(int(strategy[-1]), **zero))
    assert promised is None and why in note
    assert accumulation_verdict({"all_gather": 1}, promised, 2, unpromised_why=note) == (
        f"unchecked: {note}"
    )


def test_no_promise_without_a_config_a_second_rank_or_matching_shapes():
    assert _promise("zero2", 2, None)[0] is None
    assert _promise("zero2", 2, _eff(2), world=1)[0] is None
    promised, note = non_final_promise("zero2", 2, 2, "fp32", _eff(2), TINY, N_PARAMS + 1)
    assert promised is None and "shapes" in note
    with pytest.raises(ValueError, match="strategy"):
        non_final_promise("ddp", 2, 2, "fp32", _eff(2), TINY, N_PARAMS)


def _record(eff: dict, non_final: dict | None) -> TrainingRecord:
    return TrainingRecord(
        steps=(),
        n_params=N_PARAMS,
        data_source="builtin",
        tokenizer="gpt2",
        first_step_wall_s=0.0,
        peak_mem_bytes=0,
        comms=(),
        profile_steps=1,
        telemetry=TelemetryRecord(status="absent: no NVML on this node"),
        nvme_swap_files=0,
        ds_config=eff,
        non_final_bytes=non_final,
    )


def test_rows_store_the_promise_and_the_verdict_of_a_zero_run():
    spec = parse_spec(
        {
            "name": "z",
            "world_size": 2,
            "steps": 1,
            "grid": {"strategy": ["zero2", "zero3"], "grad_accum": [2]},
        }
    )
    by_strategy = {p.variant.strategy: p.variant for p in plan_runs(spec)}
    ok = rows._accumulation_facts(
        spec, by_strategy["zero2"], [(0, _record(_eff(2), {"all_reduce": 13_528_320}))]
    )
    assert ok == {
        "non_final_bytes": {"all_reduce": 13_528_320},
        "promised_non_final_bytes": {"all_reduce": 13_528_320},
        "accum_check": "ok",
    }
    bug = rows._accumulation_facts(spec, by_strategy["zero2"], [(0, _record(_eff(2), {}))])
    assert bug["accum_check"].startswith("fail: all_reduce sent 0 B")
    small = _eff(3, stage3_max_reuse_distance=0, stage3_prefetch_bucket_size=1)
    unchecked = rows._accumulation_facts(
        spec, by_strategy["zero3"], [(0, _record(small, {"all_gather": 1}))]
    )
    assert unchecked["promised_non_final_bytes"] is None
    assert unchecked["accum_check"].startswith("unchecked: ZeRO-3 gathers per micro-batch")
