"""The driver's pure pieces, without Ray: env per run, microbenchmark rows, predictions, rows."""

from __future__ import annotations

import datetime as dt

import pytest

from orchestrator.planner import plan_runs
from orchestrator.runner import (
    bench_table,
    build_rows,
    link_class_for,
    linkbench_rows,
    predict_comm_s,
    run_env,
)
from orchestrator.scheduler import RunResult
from orchestrator.spec import parse_spec

SPEC = parse_spec(
    {
        "name": "p",
        "world_size": 2,
        "links": {"default": {}, "quiet": {"NCCL_DEBUG": "WARN", "NCCL_P2P_DISABLE": 1}},
    }
)


def test_run_env_user_value_wins_and_nccl_logging_defaults():
    env = run_env(SPEC, "default", "r1", cpus_per_rank=2)
    assert env["NCCL_DEBUG"] == "INFO" and env["OMP_NUM_THREADS"] == "2"
    assert env["NCCL_DEBUG_FILE"] == "/tmp/linksweep-nccl-r1-%h-%p.log"
    quiet = run_env(SPEC, "quiet", "r1", cpus_per_rank=1)
    assert quiet["NCCL_DEBUG"] == "WARN" and quiet["NCCL_P2P_DISABLE"] == "1"


def bench_record(op, size, times):
    return {
        "op": op,
        "msg_bytes": size,
        "times_s": times,
        "backend": "gloo",
        "skipped_reason": None,
    }


def test_linkbench_rows_one_per_iteration_with_busbw():
    result = RunResult(
        rank_records=[{"rank": 0, "linkbench": [bench_record("all_reduce", 1000, [1e-6, 2e-6])]}]
    )
    rows = linkbench_rows("s", "default", "pack", 2, result)
    assert [r["iteration"] for r in rows] == [0, 1]
    assert rows[0]["algbw_gbps"] == pytest.approx(1.0)  # 1000 B / 1 us = 1 GB/s
    assert rows[0]["busbw_gbps"] == pytest.approx(1.0)  # all_reduce, n=2: factor 2(n-1)/n = 1
    assert rows[1]["algbw_gbps"] == pytest.approx(0.5)


def test_failed_linkbench_is_one_failed_row():
    rows = linkbench_rows("s", "slow", "spread", 2, RunResult(error="boom"))
    assert len(rows) == 1 and rows[0]["status"] == "failed" and rows[0]["error"] == "boom"


def test_predict_comm_prices_each_op_at_nearest_measured_size():
    bench = bench_table(
        [
            {"op": "all_reduce", "msg_bytes": 2**20, "algbw_gbps": 1.0, "status": "ok"},
            {"op": "all_reduce", "msg_bytes": 2**24, "algbw_gbps": 2.0, "status": "ok"},
            {"op": "all_gather", "msg_bytes": 2**24, "algbw_gbps": 0.5, "status": "ok"},
        ]
    )
    comms = [
        {"op": "all_reduce", "msg_bytes": 2**24, "count": 1},  # 16.8 MB at 2 GB/s
        {"op": "all_gather", "msg_bytes": 2**23, "count": 2},  # nearest size 2**24: 0.5 GB/s
    ]
    expected = 2**24 / 2e9 + 2 * 2**23 / 0.5e9
    assert predict_comm_s(comms, bench) == pytest.approx(expected)
    assert predict_comm_s([{"op": "reduce_scatter", "msg_bytes": 10, "count": 1}], bench) is None


def test_link_class():
    nodes = [{"hostname": "h", "gpu_ids": ["0"]}, {"hostname": "h", "gpu_ids": ["1"]}]
    links = {"h": {("GPU0", "GPU1"): "NV2", ("GPU1", "GPU0"): "NV2"}}
    assert link_class_for("pack", nodes, links) == "NV2"
    assert link_class_for("spread", nodes, {}) == "NET"
    assert link_class_for("pack", [], links) == "unknown"


def test_build_rows_of_a_failed_run_keep_the_variant_and_error():
    planned = plan_runs(SPEC)[1]
    now = dt.datetime.now(dt.timezone.utc)
    rows = build_rows(
        SPEC, "s", planned, "s-r0002", RunResult(error="RayActorError: died"), now, now
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
