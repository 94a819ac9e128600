"""orchestrator.sweep.rows for what the device choice changed: link classes of Ray GPU ids that are
not indices (never raising), the one-GPU rehearsal, runs.rank_env / ranks_per_gpu, each rank's
device decision in runs.nodes, and rows that cannot be built becoming a failed run."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from orchestrator.raycluster.result import RunResult
from orchestrator.sweep import rows as rows_mod
from orchestrator.sweep.planner import RankPlacement, plan_runs, run_env
from orchestrator.sweep.rows import (
    SHARED_GPU,
    RunFacts,
    build_rows,
    build_rows_safely,
    gpu_uuids_by_node,
    link_class_for,
)
from orchestrator.sweep.spec import parse_spec
from workloads.contract import (
    DeviceDecision,
    RankRecord,
    StepRecord,
    TelemetryRecord,
    TrainingRecord,
)

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
SPEC = parse_spec({"name": "p", "world_size": 2, "links": {"default": {}}})
LINKS = {"h": {("GPU0", "GPU1"): "NV2", ("GPU1", "GPU0"): "NV2"}}
UUID0 = "GPU-8f1a2b3c-0000-1111-2222-333344445555"
UUID1 = "GPU-9e2b3c4d-0000-1111-2222-333344445555"
MIG = "MIG-4b1d0e6a-5c7f-5e2b-9a3d-0123456789ab"


def _placements(*gpu_ids: tuple[str, ...]) -> list[RankPlacement]:
    visible = tuple(g for ids in gpu_ids for g in ids) or None
    return [
        RankPlacement(r, "n", "h", "10.0.0.1", ids, 100 + r, r, visible)
        for r, ids in enumerate(gpu_ids)
    ]


@pytest.mark.parametrize("ids", [((UUID0,), (UUID1,)), ((MIG,), (MIG,)), (("0",), (UUID1,))])
def test_ids_that_are_not_indices_give_an_unknown_class_and_never_raise(ids):
    # int("GPU-...") raised in build_rows and stopped the sweep
    assert link_class_for("pack", _placements(*ids), LINKS) == "unknown"
    assert link_class_for("spread", _placements(*ids), LINKS) == "NET"


def test_uuid_ids_find_their_link_through_the_nodes_inventory():
    gpus_rows = [
        {"node": "h", "gpu_index": 0, "uuid": UUID0},
        {"node": "h", "gpu_index": 1, "uuid": UUID1},
        {"node": "other", "gpu_index": 0, "uuid": None},  # an inventory without UUIDs
    ]
    uuids = gpu_uuids_by_node(gpus_rows)
    assert uuids == {"h": {UUID0: 0, UUID1: 1}}
    assert link_class_for("pack", _placements((UUID0,), (UUID1,)), LINKS, 1, uuids) == "NV2"
    assert link_class_for("pack", _placements(("0",), (UUID1,)), LINKS, 1, uuids) == "NV2"
    mig = _placements((MIG,), (UUID1,))  # a MIG id has no index in the topology
    assert link_class_for("pack", mig, LINKS, 1, uuids) == "unknown"


def test_index_ids_still_find_their_link():
    assert link_class_for("pack", _placements(("0",), ("1",)), LINKS) == "NV2"


def test_two_ranks_on_one_gpu_are_a_shared_gpu_run_not_a_link():
    assert link_class_for("pack", _placements(("0",), ("0",)), LINKS, 2) == SHARED_GPU
    assert link_class_for("pack", [], LINKS, 2) == SHARED_GPU  # also a run that failed early


def _record(rank: int, decision: DeviceDecision) -> RankRecord:
    return RankRecord(
        rank=rank,
        local_rank=rank,
        backend=decision.backend,
        device=decision.device,
        created_wall_s=0.0,
        device_decision=decision,
    )


def test_rows_store_the_run_env_ranks_per_gpu_and_each_ranks_device():
    spec = parse_spec({"name": "p", "world_size": 2, "ranks_per_gpu": 2, "links": {"default": {}}})
    planned = plan_runs(spec)[0]
    env = run_env(spec, "default", "r", 1)
    d0 = DeviceDecision("nccl", "cuda:0", "3", "3")
    result = RunResult(
        rank_records=[_record(0, d0)],  # rank 1 returned nothing
        placements=_placements(("3",), ("3",)),
    )
    run = build_rows(
        RunFacts(spec, "s", planned, "r", NOW, NOW, rank_env=env, topo_links={}), result
    ).run
    assert run["rank_env"]["NCCL_HOSTID"] == "linksweep-rank{rank}"  # the {rank} form
    assert run["rank_env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert run["ranks_per_gpu"] == 2 and run["link_class"] == SHARED_GPU
    assert run["nodes"][0]["device_decision"] == {
        "backend": "nccl",
        "device": "cuda:0",
        "cuda_visible_devices": "3",
        "nvml_id": "3",
    }
    assert run["nodes"][1]["device_decision"] is None
    assert run["nodes"][1]["gpu_ids"] == ("3",)


def test_a_run_whose_rows_cannot_be_built_is_a_failed_row(monkeypatch):
    def old_link_class(placement, placements, topo_links, *_):
        return [int(g) for p in placements for g in p.gpu_ids]  # what main did with UUIDs

    monkeypatch.setattr(rows_mod, "link_class_for", old_link_class)
    planned = plan_runs(SPEC)[0]
    result = RunResult(placements=_placements((UUID0,), (UUID1,)))
    out = build_rows_safely(
        RunFacts(SPEC, "s", planned, "r", NOW, NOW, rank_env={"A": "1"}, topo_links={}), result
    )
    assert out.run["status"] == "failed"
    assert out.run["error"].startswith("building the run's rows failed: ValueError: invalid")
    assert out.run["rank_env"] == {"A": "1"} and out.run["link"] == "default"


def test_a_failed_runs_own_error_is_kept_when_its_rows_fail(monkeypatch):
    calls = []

    def flaky(placement, placements, topo_links, *_):
        calls.append(placements)
        if placements:
            raise KeyError("boom")
        return "unknown"

    monkeypatch.setattr(rows_mod, "link_class_for", flaky)
    result = RunResult(error="2 of 2 rank(s) failed", placements=_placements(("0",), ("1",)))
    out = build_rows_safely(RunFacts(SPEC, "s", plan_runs(SPEC)[0], "r", NOW, NOW), result)
    assert out.run["error"].endswith("the run's own error: 2 of 2 rank(s) failed")
    assert len(calls) == 2


# --- what a rehearsal (two ranks, one GPU) stores: figures per GPU, distinct visible GPUs ---


def _trained(rank: int, gpu: str) -> RankRecord:
    steps = tuple(
        StepRecord(step=i, warmup=i == 0, step_time_s=0.5, samples=2, tokens=256, loss=1.0)
        for i in range(3)
    )
    training = TrainingRecord(
        steps=steps,
        n_params=1_000_000,
        data_source="builtin",
        tokenizer="gpt2",
        first_step_wall_s=1.0,
        peak_mem_bytes=1,
        comms=(),
        profile_steps=0,
        telemetry=TelemetryRecord(status="nvml"),
        nvme_swap_files=0,
        device_name="NVIDIA H100 80GB HBM3",
    )
    decision = DeviceDecision("nccl", "cuda:0", gpu, gpu)
    return dataclasses.replace(_record(rank, decision), training=training)


def _gpu_spec(ranks_per_gpu: int):
    return parse_spec(
        {"name": "p", "world_size": 2, "ranks_per_gpu": ranks_per_gpu, "precision": "bf16",
         "seq_len": 128, "micro_batch_size": 2, "links": {"default": {}}}
    )  # fmt: skip


def test_two_ranks_on_one_gpu_report_that_gpus_tflops_not_half_of_them():
    shared = _gpu_spec(2)
    result = RunResult([_trained(0, "3"), _trained(1, "3")], _placements(("3",), ("3",)))
    run = build_rows(RunFacts(shared, "s", plan_runs(shared)[0], "r", NOW, NOW), result).run
    total = run["model_flops_per_step"]
    assert run["achieved_tflops_per_gpu"] == pytest.approx(total / 1 / 0.5 / 1e12)
    assert run["mfu"] == pytest.approx(run["achieved_tflops_per_gpu"] / run["peak_tflops"])
    # the same steps on two GPUs: each GPU did half the work
    two = _gpu_spec(1)
    result = RunResult([_trained(0, "0"), _trained(1, "1")], _placements(("0",), ("1",)))
    run2 = build_rows(RunFacts(two, "s", plan_runs(two)[0], "r", NOW, NOW), result).run
    assert run2["achieved_tflops_per_gpu"] == pytest.approx(run["achieved_tflops_per_gpu"] / 2)


def test_gpus_used_counts_distinct_gpus_per_node_and_ranks_on_cpu():
    from orchestrator.sweep.rows import gpus_used

    assert gpus_used(_placements(("3",), ("3",)), 2, 2) == 1
    assert gpus_used(_placements(("0",), ("1",)), 2) == 2
    two_nodes = [
        RankPlacement(0, "a", "ha", "10.0.0.1", ("0",), 1, 0, ("0",)),
        RankPlacement(1, "b", "hb", "10.0.0.2", ("0",), 2, 0, ("0",)),
    ]
    assert gpus_used(two_nodes, 2) == 2  # GPU 0 of two nodes: two GPUs
    assert gpus_used(_placements((), (), (), ()), 4) == 4  # CPU: one per rank
    assert gpus_used([], 2, 2) == 1 and gpus_used([], 4) == 4  # no placements: the plan


def test_a_rehearsal_stores_its_one_gpu_once_in_visible_gpus():
    spec = _gpu_spec(2)
    result = RunResult([_trained(0, "3"), _trained(1, "3")], _placements(("3",), ("3",)))
    run = build_rows(RunFacts(spec, "s", plan_runs(spec)[0], "r", NOW, NOW), result).run
    assert [n["visible_gpus"] for n in run["nodes"]] == [("3",), ("3",)]
    assert [n["gpu_ids"] for n in run["nodes"]] == [("3",), ("3",)]


def test_a_failed_ranks_decision_reaches_the_nodes_from_its_error():
    from workloads.contract import noted_decisions

    spec = _gpu_spec(2)
    d1 = DeviceDecision("nccl", "cuda:0", "3", "3")
    error = "1 of 2 rank(s) failed\nrank 1: RuntimeError: boom\n\nRuntimeError: boom\n" + d1.note(1)
    result = RunResult(error=error, placements=_placements(("3",), ("3",)))
    run = build_rows(RunFacts(spec, "s", plan_runs(spec)[0], "r", NOW, NOW), result).run
    assert run["nodes"][1]["device_decision"] == dataclasses.asdict(d1)
    assert run["nodes"][0]["device_decision"] is None  # its note is not in the text
    cpu = DeviceDecision("gloo", "cpu", "", None)
    assert noted_decisions(cpu.note(0) + "\n" + d1.note(1)) == {0: cpu, 1: d1}
    assert noted_decisions(None) == {}
