"""Every rank's trace on rank 0's clock (``orchestrator/analysis/trace_merge.py``): rebasing by
the base time and the measured offset, exactly on Decimal timestamps; the merged trace checked
structurally (valid JSON, every rank one named process, its GPU streams threads of it, events
in order per rank on the common clock, flows kept apart); the rebased files as Holistic Trace
Analysis finds their rank. Then a run's rows (``orchestrator/sweep/trace_rows.py``): the
clock columns, the files, and the waited/transfer split reading the rebased traces."""

from __future__ import annotations

import gzip
import json
import re
import types
from decimal import Decimal

from orchestrator.analysis.trace_merge import (
    FLOW_ID_SPAN,
    dumps,
    host_pid,
    merge,
    rank_events,
    rebase,
    shift_ns,
)
from orchestrator.sweep import trace_rows
from workloads.contract import TraceRecord

BASE = 1_780_000_000_000_000_000
"""A trimonth base, ns (torch floors the wall clock to 7889238 s steps)."""


def op(name, ts, dur, pid=100, tid=1, cat="cpu_op", **extra):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
    } | extra


def meta(kind, pid, tid, **args):
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "ts": 0, "args": args}


def gpu_rank_trace(base=BASE):
    """A GPU rank's trace as torch writes it: a CPU process (pid 100, labelled CPU) with two
    threads, a GPU process (pid 0) with two streams, a launch -> kernel flow, out of ts order."""
    return {
        "schemaVersion": 1,
        "baseTimeNanoseconds": base,
        "traceEvents": [
            meta("process_name", 100, 0, name="python"),
            meta("process_labels", 100, 0, labels="CPU"),
            meta("process_name", 0, 0, name="python"),
            meta("process_labels", 0, 0, labels="GPU 0"),
            meta("thread_name", 100, 1, name="thread 1"),
            meta("thread_name", 100, 2, name="thread 2"),
            meta("thread_name", 0, 7, name="stream 7 "),
            meta("thread_name", 0, 20, name="stream 20 "),
            op("ncclDevKernel_AllReduce", Decimal("1030.500"), 40, pid=0, tid=20, cat="kernel"),
            op("ProfilerStep#0", Decimal("1000.000"), 100, cat="user_annotation"),
            op("aten::mm", Decimal("1001.250"), 10),
            op("cudaLaunchKernel", Decimal("1012.000"), 2, cat="cuda_runtime"),
            op("sm80_gemm", Decimal("1014.001"), 15, pid=0, tid=7, cat="kernel"),
            op("autograd", Decimal("1020.000"), 5, tid=2),
            {"ph": "s", "id": 9, "pid": 100, "tid": 1, "ts": Decimal("1012.000"), "cat": "ac2g"},
            {"ph": "f", "id": 9, "pid": 0, "tid": 7, "ts": Decimal("1014.001"), "cat": "ac2g"},
        ],
    }


def test_the_shift_puts_a_ranks_time_on_rank_0s_clock():
    # rank 1's clock reads 3 ms ahead and its trace has a base 1 s later: an event at its ts
    # is base_1 + ts on its clock, base_1 + ts - 3 ms on rank 0's, base_0 + ts + 1 s - 3 ms
    assert shift_ns(BASE + 10**9, 3_000_000, BASE) == 10**9 - 3_000_000


def test_rebase_moves_every_event_exactly_and_keeps_the_original_base_and_offset():
    doc = gpu_rank_trace(base=BASE + 7)
    out = rebase(doc, 1, 3_000_123, BASE, 2)
    assert out["baseTimeNanoseconds"] == BASE
    assert out["linksweepClock"] == {"offset_ns": 3_000_123, "original_base_ns": BASE + 7}
    assert out["distributedInfo"] == {"rank": 1, "world_size": 2}
    assert next(iter(out)) == "distributedInfo"  # first in the file: HTA reads the first rank
    moved = {e["name"]: e["ts"] for e in out["traceEvents"] if e.get("ph") == "X"}
    # (7 - 3_000_123) ns = -3000.116 us, exactly
    assert moved["aten::mm"] == Decimal("1001.250") - Decimal("3000.116")
    assert moved["ncclDevKernel_AllReduce"] == Decimal("-1969.616")
    assert doc["baseTimeNanoseconds"] == BASE + 7  # the input is not changed
    assert doc["traceEvents"][10]["ts"] == Decimal("1001.250")


def test_rebase_of_a_float_trace_is_within_a_nanosecond():
    doc = {"baseTimeNanoseconds": BASE, "traceEvents": [op("x", 7_880_000_000_000.123, 1)]}
    [e] = rebase(doc, 1, -1_234_567, BASE, 2)["traceEvents"]
    assert abs(e["ts"] - 7_880_000_001_234.690) < 0.001


def test_the_host_process_is_the_one_labelled_cpu_else_the_one_with_the_ops():
    assert host_pid(gpu_rank_trace()["traceEvents"]) == 100
    events = [
        op("k", 1, 1, pid=0, cat="kernel"),
        op("aten::mm", 1, 1, pid=55),
        op("a", 2, 1, pid=55),
    ]
    assert host_pid(events) == 55


def merged_two_ranks():
    r0 = rebase(gpu_rank_trace(), 0, 0, BASE, 2)
    r1 = rebase(gpu_rank_trace(), 1, 25_000, BASE, 2)  # rank 1 reads 25 us ahead
    return merge({0: r0, 1: r1})


def test_the_merged_trace_is_json_with_every_rank_one_named_process():
    doc = json.loads(gzip.decompress(dumps(merged_two_ranks())))
    events = doc["traceEvents"]
    assert doc["baseTimeNanoseconds"] == BASE and doc["linksweepMerged"]["ranks"] == [0, 1]
    assert {e["pid"] for e in events} == {0, 1}
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"
    }
    # the CPU threads keep their ids; the GPU's streams become threads above them, named
    assert threads == {
        (r, tid): name
        for r in (0, 1)
        for tid, name in (
            (1, "thread 1"),
            (2, "thread 2"),
            (3, "GPU 0 stream 20"),
            (4, "GPU 0 stream 7"),
        )
    }
    # every non-metadata event is on a named thread of its rank
    assert all((e["pid"], e["tid"]) in threads for e in events if e["ph"] != "M")


def test_each_ranks_events_are_in_order_on_the_common_clock_with_its_offset_applied():
    events = merged_two_ranks()["traceEvents"]
    for rank in (0, 1):
        ts = [e["ts"] for e in events if e["pid"] == rank and e["ph"] != "M"]
        assert ts == sorted(ts) and len(ts) == 8
    mm = {e["pid"]: e["ts"] for e in events if e.get("name") == "aten::mm"}
    assert mm[0] - mm[1] == Decimal("25.000")  # rank 1's reading was 25 us ahead


def test_flows_stay_within_their_rank_and_keep_their_ends_on_the_mapped_threads():
    events = merged_two_ranks()["traceEvents"]
    flows = [(e["pid"], e["ph"], e["id"], e["tid"]) for e in events if e["ph"] in "sf"]
    assert sorted(flows) == [
        (0, "f", 9, 4), (0, "s", 9, 1),
        (1, "f", FLOW_ID_SPAN + 9, 4), (1, "s", FLOW_ID_SPAN + 9, 1),
    ]  # fmt: skip


def test_a_cpu_only_trace_has_one_process_and_its_own_threads():
    events = rank_events(
        3, [op("gloo:all_reduce", 5, 1, pid=77, tid=9), op("aten::add", 1, 1, pid=77)]
    )
    assert [(e["name"], e["pid"], e["tid"]) for e in events] == [
        ("process_name", 3, 0),
        ("process_sort_index", 3, 0),
        ("thread_name", 3, 1),
        ("thread_name", 3, 9),
        ("aten::add", 3, 1),
        ("gloo:all_reduce", 3, 9),
    ]


def test_holistic_trace_analysis_finds_each_rebased_files_rank(tmp_path):
    # HTA's trace_file.create_rank_to_trace_dict: the first '"rank":\s+(\d+)' of the first line
    # holding one; torch's own args can hold "rank" keys too, after distributedInfo
    doc = gpu_rank_trace()
    doc["traceEvents"][10]["args"] = {"rank": 0}
    for rank in (0, 1):
        text = gzip.decompress(dumps(rebase(doc, rank, 0, BASE, 2))).decode()
        line = next(line for line in text.splitlines() if re.search(r'"rank":\s+(\d+)', line))
        assert int(re.search(r'"rank":\s+(\d+)', line).group(1)) == rank


# ---- a run's rows -------------------------------------------------------------------------------


def gloo_rank(rank: int, arrive_us: int, clock_ahead_ns: int) -> dict:
    """One rank of a 2-rank gloo step on the true clock: compute [0, arrive), its all-reduce
    from ``arrive`` to 90, the step [0, 100); written as its clock, ``clock_ahead_ns`` ahead,
    reads it (base_ns + ts)."""
    t = 1000 + clock_ahead_ns / 1000
    return {
        "baseTimeNanoseconds": BASE,
        "traceEvents": [
            meta("thread_name", 100 + rank, 1, name="main"),
            op("ProfilerStep#0", t, 100, pid=100 + rank, cat="user_annotation"),
            op("aten::mm", t, arrive_us, pid=100 + rank),
            op("c10d::allreduce_", t + arrive_us, 1, pid=100 + rank),
            op("gloo:all_reduce", t + arrive_us, 90 - arrive_us, pid=100 + rank, tid=2),
        ],
    }


def trained(rank: int, doc: dict, offset_ns: int | None, uncertainty_ns: int | None):
    record = TraceRecord((0.1,), gzip.compress(json.dumps(doc).encode()), offset_ns, uncertainty_ns)
    return rank, types.SimpleNamespace(trace=record, step_collectives=(("all_reduce", 4096, 2),))


def test_a_runs_rows_carry_the_clocks_and_split_exposed_on_the_common_clock(tmp_path):
    # rank 1 computes 20 us longer and its clock reads 5 ms ahead: on one clock rank 0 waits
    # [40, 60) for it; read each on its own clock, rank 0 would seem to wait 5 ms
    ranks = [
        trained(0, gloo_rank(0, 40, 0), 0, 0),
        trained(1, gloo_rank(1, 60, 5_000_000), 5_000_000, 2_000),
    ]
    rows = trace_rows.trace_facts("run-a", ranks, 0.1, str(tmp_path))
    clock = {
        r["rank"]: (r["base_time_ns"], r["clock_offset_ns"], r["clock_uncertainty_ns"])
        for r in rows.traces
    }
    assert clock == {0: (BASE, 0, 0), 1: (BASE, 5_000_000, 2_000)}
    assert rows.traces[1]["rebased_path"] == str(tmp_path / "run-a" / "rank1.json.gz")
    merged = str(tmp_path / "run-a-merged.json.gz")
    assert rows.run["merged_trace_path"] == merged
    assert sorted(rows.files) == sorted([merged, *(r["rebased_path"] for r in rows.traces)])
    doc = json.loads(gzip.decompress(rows.files[merged]))
    starts = {e["pid"]: e["ts"] for e in doc["traceEvents"] if e.get("name") == "gloo:all_reduce"}
    assert starts == {0: 1040.0, 1: 1060.0}
    step = {r["rank"]: r for r in rows.wait if r["step"] == 0}
    for r in step.values():
        assert abs(r["waited_s"] + r["transfer_s"] - r["exposed_s"]) < 1e-12
    assert abs(step[0]["waited_s"] - 20e-6) < 1e-9 and step[1]["waited_s"] == 0
    assert abs(step[0]["transfer_s"] - 30e-6) < 1e-9
    assert {"straggler_rank", "straggler_why"} <= set(rows.run)
    assert {r["rank"] for r in rows.lateness} == {0, 1}
    assert all("group_ranks" in r and "group" not in r for r in rows.wait_instances)


def test_a_run_that_did_not_trace_has_no_rows_and_no_files():
    rows = trace_rows.trace_facts("run-b", [(0, types.SimpleNamespace(trace=None))], 0.1, "/x")
    assert rows == trace_rows.TraceRows()


def test_a_failed_wait_split_leaves_the_runs_other_rows_and_says_why(monkeypatch, tmp_path):
    def broken(ranks, world_size=None):
        raise ValueError("no step marks")

    monkeypatch.setattr(trace_rows, "wait_split", broken)
    ranks = [trained(0, gloo_rank(0, 40, 0), 0, 0), trained(1, gloo_rank(1, 60, 0), 0, 10)]
    rows = trace_rows.trace_facts("run-c", ranks, 0.1, str(tmp_path))
    assert rows.wait == rows.wait_instances == rows.lateness == []
    assert rows.run["straggler_rank"] is None
    assert rows.run["straggler_why"] == (
        "not analysed: the wait split failed: ValueError: no step marks"
    )
    assert len(rows.traces) == 2 and rows.overlap and len(rows.files) == 3


def columns(table: str) -> set[str]:
    from orchestrator.store import TABLES

    lines = (line.strip() for line in TABLES[table].splitlines())
    return {line.split()[0].rstrip(",") for line in lines if line and not line.startswith("--")}


def test_a_runs_trace_rows_are_the_tables_columns(tmp_path):
    ranks = [trained(0, gloo_rank(0, 40, 0), 0, 0), trained(1, gloo_rank(1, 60, 0), 0, 10)]
    rows = trace_rows.trace_facts("run-d", ranks, 0.1, str(tmp_path))
    for table, got in (
        ("traces", rows.traces),
        ("trace_wait", rows.wait),
        ("trace_wait_instances", rows.wait_instances),
        ("trace_lateness", rows.lateness),
    ):
        assert got, table
        assert all(set(r) == columns(table) for r in got), table
    assert set(rows.run) <= columns("runs")
