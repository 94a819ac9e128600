"""orchestrator.sweep.rows without Ray: a run's records (workloads.contract dataclasses) -> table rows."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import pytest

from orchestrator.analysis import comm_model, stats
from orchestrator.raycluster.result import RunResult as Result
from orchestrator.sweep.planner import RankPlacement as Placement
from orchestrator.sweep.planner import plan_runs
from orchestrator.sweep.rows import (
    GPU_VISIBILITY,
    RunFacts,
    build_rows,
    link_class_for,
    linkbench_rows,
)
from orchestrator.sweep.spec import parse_spec
from orchestrator.topology import nccl_log
from tests import captures
from tests.captures import CAPTURES
from workloads.contract import (
    CommRecord,
    LinkbenchRecord,
    RankRecord,
    StepRecord,
    TelemetryRecord,
    TelemetrySample,
    TrainingRecord,
)

REPO = Path(__file__).resolve().parents[2]
NCCL = CAPTURES / "nccl"

SPEC = parse_spec(
    {
        "name": "p",
        "world_size": 2,
        "seq_len": 32,
        "micro_batch_size": 2,
        "steps": 3,
        "warmup_steps": 1,
        "links": {"default": {}, "quiet": {"NCCL_DEBUG": "WARN", "NCCL_P2P_DISABLE": 1}},
    }
)
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


# --------------------------------------------------------------------------------------------
# link microbenchmark rows


def _bench_result(*records: LinkbenchRecord) -> Result:
    rank = RankRecord(
        rank=0, local_rank=0, backend="gloo", device="cpu", created_wall_s=0.0, linkbench=records
    )
    return Result(rank_records=[rank])


def test_linkbench_rows_one_per_iteration_with_busbw():
    rec = LinkbenchRecord("all_reduce", "gloo", 1000, times_s=(1e-6, 2e-6), impl="all_reduce")
    rows = linkbench_rows("s", "default", "pack", 2, _bench_result(rec))
    assert [r["iteration"] for r in rows] == [0, 1]
    assert [r["time_s"] for r in rows] == [1e-6, 2e-6]
    assert rows[0]["algbw_gbps"] == pytest.approx(1.0)  # 1000 B / 1 us = 1 GB/s
    assert rows[0]["busbw_gbps"] == pytest.approx(1.0)  # all_reduce, n=2: factor 2(n-1)/n = 1
    assert rows[1]["algbw_gbps"] == pytest.approx(0.5)
    assert all(r["status"] == "ok" and r["error"] is None for r in rows)
    assert {(r["sweep_id"], r["link"], r["placement"], r["world_size"]) for r in rows} == {
        ("s", "default", "pack", 2)
    }


def test_linkbench_rows_busbw_factor_and_skipped_sizes():
    gather = LinkbenchRecord("all_gather", "gloo", 4000, times_s=(1e-6,))
    skipped = LinkbenchRecord("all_to_all", "gloo", None, skipped_reason="gloo has no all_to_all")
    rows = linkbench_rows("s", "default", "pack", 4, _bench_result(gather, skipped))
    assert rows[0]["algbw_gbps"] == pytest.approx(4.0)
    assert rows[0]["busbw_gbps"] == pytest.approx(3.0)  # all_gather, n=4: (n-1)/n
    assert rows[1]["status"] == "skipped" and rows[1]["error"] == "gloo has no all_to_all"
    assert rows[1]["iteration"] is None and rows[1]["time_s"] is None


def test_failed_linkbench_is_one_failed_row():
    rows = linkbench_rows("s", "slow", "spread", 2, Result(error="boom"))
    assert len(rows) == 1 and rows[0]["status"] == "failed" and rows[0]["error"] == "boom"


# --------------------------------------------------------------------------------------------
# link class


def _placements(host_gpus: list[tuple[str, str, tuple[str, ...]]]) -> list[Placement]:
    """(node_id, hostname, gpu_ids) per rank -> placements, local ranks counted per node."""
    out, seen = [], {}
    for rank, (node, host, gpus) in enumerate(host_gpus):
        local = seen.get(node, 0)
        seen[node] = local + 1
        visible = tuple(g for n, _, gs in host_gpus if n == node for g in gs) or None
        out.append(Placement(rank, node, host, "10.0.0.1", gpus, 100 + rank, local, visible))
    return out


def test_link_class():
    nodes = _placements([("n", "h", ("0",)), ("n", "h", ("1",))])
    links = {"h": {("GPU0", "GPU1"): "NV2", ("GPU1", "GPU0"): "NV2"}}
    assert link_class_for("pack", nodes, links) == "NV2"
    assert link_class_for("spread", nodes, {}) == "NET"
    assert link_class_for("pack", [], links) == "unknown"
    cpu = _placements([("n", "h", ()), ("n", "h", ())])
    assert link_class_for("pack", cpu, links) == "unknown"  # no GPUs: no hardware link


# --------------------------------------------------------------------------------------------
# build_rows


def _steps(times: list[float], samples: int = 2, tokens: int = 64) -> tuple[StepRecord, ...]:
    """The first time is the warmup step."""
    return tuple(
        StepRecord(
            step=i, warmup=i == 0, step_time_s=t, samples=samples, tokens=tokens, loss=5.0 - i
        )
        for i, t in enumerate(times)
    )


def _training(times, first_step_wall_s, peak, comms=(), telemetry=None) -> TrainingRecord:
    return TrainingRecord(
        steps=_steps(times),
        n_params=1_000_000,
        data_source="builtin",
        tokenizer="gpt2",
        first_step_wall_s=first_step_wall_s,
        peak_mem_bytes=peak,
        comms=tuple(comms),
        profile_steps=1,
        telemetry=telemetry or TelemetryRecord(status="absent: no NVML on this node"),
        nvme_swap_files=0,
    )


RANK0_TIMES = [9.0, 0.10, 0.30, 0.20]
RANK1_TIMES = [8.0, 0.15, 0.25, 0.40]
COMMS = [
    CommRecord("all_reduce", 4_000_000, 2, 0.004),
    CommRecord("all_gather", 1_000_000, 1, 0.01),
]


def _ok_result() -> Result:
    records = [
        RankRecord(
            rank=r,
            local_rank=r,
            backend="gloo",
            device="cpu",
            created_wall_s=1000.0,
            training=_training(times, first, peak, COMMS),
        )
        for r, times, first, peak in [
            (0, RANK0_TIMES, 1002.0, 300_000_000),
            (1, RANK1_TIMES, 1003.5, 310_000_000),
        ]
    ]
    placements = _placements([("n1", "h", ()), ("n1", "h", ())])
    return Result(rank_records=records, placements=placements, actors_created_wall_s=1000.0)


def test_build_rows_of_an_ok_two_rank_run():
    planned = plan_runs(SPEC)[0]  # ddp, link default, pack
    prices = {("all_reduce", 2**22): 2.0, ("all_gather", 2**20): 0.5}
    rows = build_rows(
        RunFacts(SPEC, "s", planned, "s-r0001", NOW, NOW, topo_links={}, link_algbw=prices),
        _ok_result(),
    )
    run = rows.run

    # one steps row per rank and step, warmup included and flagged
    assert len(rows.steps) == 2 * 4
    assert sorted((r["rank"], r["step"], r["warmup"]) for r in rows.steps) == [
        (rank, i, i == 0) for rank in (0, 1) for i in range(4)
    ]
    assert {r["run_id"] for r in rows.steps} == {"s-r0001"}

    # comms rows per rank, bandwidths from comm_model on the per-call time
    assert len(rows.comms) == 2 * 2
    ar = next(c for c in rows.comms if c["rank"] == 1 and c["op"] == "all_reduce")
    assert ar["algbw_gbps"] == pytest.approx(2.0)  # 4 MB in 2 ms per call
    assert ar["busbw_gbps"] == pytest.approx(2.0)  # all_reduce, n=2: x1
    ag = next(c for c in rows.comms if c["rank"] == 0 and c["op"] == "all_gather")
    assert (ag["algbw_gbps"], ag["busbw_gbps"]) == pytest.approx((0.1, 0.05))  # all_gather x1/2
    for c in rows.comms:
        per_call = c["total_time_s"] / c["count"]
        expected = comm_model.bandwidths_gbps(c["op"], 2, c["msg_bytes"], per_call)
        assert (c["algbw_gbps"], c["busbw_gbps"]) == pytest.approx(expected)

    # the run's figures: stats.run_figures over the timed steps, and by hand
    timed = {
        r.rank: [s for s in r.training.steps if not s.warmup] for r in _ok_result().rank_records
    }
    figures = stats.run_figures(timed)
    assert {k: run[k] for k in stats.RUN_FIGURE_COLUMNS} == figures
    assert run["n_steps"] == 3
    assert run["median_step_time_s"] == pytest.approx(0.30)  # max per step: 0.15, 0.30, 0.40
    assert run["samples_per_s"] == pytest.approx(3 * 2 * 2 / 0.85)
    assert run["tokens_per_s"] == pytest.approx(3 * 2 * 64 / 0.85)

    # startup: the last rank's first step after the actors were created
    assert run["startup_s"] == pytest.approx(3.5)

    # communication: measured (max over ranks, per profiled step), expected, predicted
    assert run["comm_bytes_per_step"] == 2 * 4_000_000 + 1_000_000
    assert run["expected_comm_bytes_per_step"] == 1_000_000 * 4  # DDP fp32: Psi
    assert run["comm_note"].startswith("DDP")
    assert run["predicted_comm_s_per_step"] == pytest.approx(
        2 * 4_000_000 / 2e9 + 1_000_000 / 0.5e9
    )

    assert (run["status"], run["error"], run["backend"], run["n_params"]) == (
        "ok",
        None,
        "gloo",
        1_000_000,
    )
    assert (run["strategy"], run["link"], run["placement"], run["seq"]) == (
        "ddp",
        "default",
        "pack",
        1,
    )
    assert run["peak_mem_bytes"] == 310_000_000  # max over ranks
    assert run["nodes"] == [
        {**dataclasses.asdict(p), "device_decision": None} for p in _ok_result().placements
    ]  # the records carry no device decision
    assert run["gpu_visibility"] == "cpu: no GPUs assigned"
    assert (run["link_class"], run["effective_transport"], run["link_check"]) == (
        "unknown",
        nccl_log.GLOO_TRANSPORT,
        "unknown",
    )
    assert run["telemetry"] == "absent: no NVML on this node" and run["throttled"] is None
    assert rows.telemetry == [] and rows.transports == []
    assert [
        (r["rank"], r["node_id"], r["local_rank"], r["peak_mem_bytes"]) for r in rows.ranks
    ] == [
        (0, "n1", 0, 300_000_000),
        (1, "n1", 1, 310_000_000),
    ]


def test_build_rows_without_prices_predicts_nothing():
    planned = plan_runs(SPEC)[0]
    rows = build_rows(RunFacts(SPEC, "s", planned, "s-r0001", NOW, NOW), _ok_result())
    assert rows.run["predicted_comm_s_per_step"] is None
    assert rows.run["comm_bytes_per_step"] == 9_000_000


def test_build_rows_nccl_transports_link_check_and_telemetry():
    """GPU ranks on an NV2 pair: transport rows from each rank's NCCL log; the link check
    compares the link's env with what NCCL used; telemetry samples become rows."""
    log = captures.read(NCCL / "nccl_1817_p2p_direct_pointer.log")
    n_channels = len(nccl_log.parse_nccl_log(log).channels)
    hot = TelemetrySample(t_s=0.1, temp_c=70.0, power_w=250.0, sm_clock_mhz=1800.0, reasons=0)
    cool = TelemetrySample(t_s=0.2, temp_c=60.0, power_w=150.0, sm_clock_mhz=1900.0, reasons=0)
    telemetry = TelemetryRecord(status="ok", samples=(hot, cool), violation_ns={"power": 0})
    records = [
        RankRecord(
            rank=r,
            local_rank=r,
            backend="nccl",
            device=f"cuda:{r}",
            created_wall_s=0.0,
            nccl_log=log,
            training=_training(RANK0_TIMES, 1.0, 10, telemetry=telemetry),
        )
        for r in (0, 1)
    ]
    placements = _placements([("n1", "h", ("0",)), ("n1", "h", ("1",))])
    result = Result(rank_records=records, placements=placements, actors_created_wall_s=0.5)
    topo_links = {"h": {("GPU0", "GPU1"): "NV2", ("GPU1", "GPU0"): "NV2"}}
    by_link = {p.variant.link: p for p in plan_runs(SPEC)}

    rows = build_rows(
        RunFacts(SPEC, "s", by_link["default"], "r", NOW, NOW, topo_links=topo_links), result
    )
    run = rows.run
    assert (run["link_class"], run["effective_transport"], run["link_check"]) == (
        "NV2",
        "P2P",
        "ok",
    )
    assert run["gpu_visibility"] == GPU_VISIBILITY
    assert run["nodes"][1]["visible_gpus"] == ("0", "1")
    assert len(rows.transports) == 2 * n_channels
    assert {t["transport"] for t in rows.transports} == {"P2P"}
    assert len(rows.telemetry) == 2 * 2 and run["telemetry"] == "ok"
    assert (run["max_temp_c"], run["mean_power_w"], run["min_sm_clock_mhz"]) == (
        70.0,
        200.0,
        1800.0,
    )
    assert run["throttled"] is False and run["hot"] is False

    # the same records under a link that disables P2P: NCCL did not do what the link asked
    quiet = build_rows(
        RunFacts(SPEC, "s", by_link["quiet"], "r", NOW, NOW, topo_links=topo_links), result
    )
    assert quiet.run["link_check"] == "mismatch"
    assert quiet.run["link_env"] == {"NCCL_DEBUG": "WARN", "NCCL_P2P_DISABLE": "1"}


def test_build_rows_of_a_failed_run_keep_the_variant_and_error():
    planned = plan_runs(SPEC)[1]
    rows = build_rows(
        RunFacts(SPEC, "s", planned, "s-r0002", NOW, NOW), Result(error="RayActorError: died")
    )
    run = rows.run
    assert (run["status"], run["error"], run["link"], run["seq"]) == (
        "failed",
        "RayActorError: died",
        planned.variant.link,
        2,
    )
    assert run["link_env"] == SPEC.links[planned.variant.link]
    assert rows.steps == [] and rows.comms == [] and run["comm_bytes_per_step"] is None
    assert run["n_steps"] == 0 and run["median_step_time_s"] is None
    assert run["startup_s"] is None and run["backend"] is None
