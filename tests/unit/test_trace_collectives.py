"""Which collective each communication interval of a trace was: synthetic traces whose names,
busy and exposed times are worked out by hand in each test, then the corpus's real GPU traces
against the calls each file itself records."""

from __future__ import annotations

import collections

import pytest

from orchestrator.analysis.trace_collectives import (
    collective_figures,
    issued_op,
    named_comm,
    ran_as,
    with_recorded,
)
from orchestrator.analysis.trace_overlap import load_trace, parts
from tests.captures import CORPUS, needs
from tests.unit.test_trace_overlap import cpu, kernel, launch, step_span

TRACES = CORPUS / "traces"


def gloo(name, ts, dur, tid=2, pid=100):
    return cpu(f"gloo:{name}", ts, dur, tid=tid, cat="user_annotation", pid=pid)


def test_names_in_the_recorders_words():
    assert issued_op("c10d::_reduce_scatter_base_") == "reduce_scatter"
    assert issued_op("c10d::allreduce_") == "all_reduce"
    assert issued_op("_c10d_functional::all_gather_into_tensor") == "all_gather"
    assert issued_op("aten::mm") is None
    assert ran_as("gloo:all_reduce") == "all_reduce"
    assert ran_as("ncclDevKernel_AllGather_RING_LL") == "all_gather"
    assert ran_as("ncclKernel_ReduceScatter_RING_LL_Sum_float") == "reduce_scatter"
    assert ran_as("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t") == "send_recv"


def _fsdp_like_step():
    """One step [0, 100) on the main thread (tid 1): compute ops [0, 10), [12, 50) and
    [52, 100); an all_gather called at [10, 12) that gloo runs on tid 2 at [11, 30), and a
    reduce_scatter called at [50, 52) that gloo runs as an all_reduce at [51, 80)."""
    return {
        "traceEvents": [
            step_span(0, 0, 100),
            cpu("aten::embedding", 0, 10),
            cpu("c10d::_allgather_base_", 10, 2),
            cpu("aten::mm", 12, 38),
            cpu("c10d::_reduce_scatter_base_", 50, 2),
            cpu("aten::add_", 52, 48),
            gloo("all_gather", 11, 19),
            gloo("all_reduce", 51, 29),
        ]
    }


def test_cpu_calls_name_gloo_events_in_order_and_each_ones_exposure_is_its_own():
    (p,) = parts(_fsdp_like_step())
    named = named_comm(p)
    assert [(n.step, n.issued, n.ran_as) for n in named] == [
        (0, "all_gather", "all_gather"),
        (0, "reduce_scatter", "all_reduce"),  # gloo runs a reduce_scatter as an all_reduce
    ]
    figures = {f.issued: f for f in collective_figures(p)}
    # all_gather [11, 30): compute [12, 50) covers all but [11, 12)
    assert (figures["all_gather"].busy_us, figures["all_gather"].exposed_us) == (19, 1)
    # the all_reduce [51, 80): compute [52, 100) covers all but [51, 52)
    assert (figures["reduce_scatter"].busy_us, figures["reduce_scatter"].exposed_us) == (29, 1)
    assert all(f.n == 1 and f.msg_bytes is None for f in figures.values())


def test_a_count_that_differs_names_nothing():
    trace = _fsdp_like_step()
    trace["traceEvents"].append(gloo("all_reduce", 85, 5))  # a third gloo event, two calls
    (p,) = parts(trace)
    assert [n.issued for n in named_comm(p)] == [None, None, None]
    assert [n.ran_as for n in named_comm(p)] == ["all_gather", "all_reduce", "all_reduce"]


def test_the_recorders_step_gives_bytes_and_groups_where_its_ops_are_the_steps():
    (p,) = parts(_fsdp_like_step())
    named = named_comm(p)
    recorded = [("all_gather", 4096, 2), ("reduce_scatter", 8192, 2)]
    got = with_recorded(named, recorded)
    assert [(n.msg_bytes, n.group_size) for n in got] == [(4096, 2), (8192, 2)]
    figures = {f.issued: f for f in collective_figures(p, recorded)}
    assert (figures["reduce_scatter"].msg_bytes, figures["reduce_scatter"].group_size) == (8192, 2)
    other = with_recorded(named, [("all_reduce", 1, 2), ("reduce_scatter", 8192, 2)])
    assert [(n.msg_bytes, n.group_size) for n in other] == [(None, None), (None, None)]
    assert with_recorded(named, [("all_gather", 4096, 2)])[1].msg_bytes is None  # shorter


def test_a_trace_without_steps_gives_one_row_per_collective_for_the_whole():
    trace = _fsdp_like_step()
    trace["traceEvents"] = trace["traceEvents"][1:]  # no ProfilerStep span
    (p,) = parts(trace)
    assert [(f.step, f.issued) for f in collective_figures(p)] == [
        (None, "reduce_scatter"),
        (None, "all_gather"),
    ]  # by busy time, longest first


def test_gpu_kernels_are_named_by_the_call_around_their_launch():
    """Kernel 1 (AllGather) launched inside ``c10d::_allgather_base_``; kernel 2 (SendRecv)
    inside torch's ``nccl:all_to_all`` annotation (no c10d event), nested in a longer
    ``c10d::allreduce_`` (the innermost names it); kernel 3 without a launch event but with its
    own ``Collective name``; kernel 4 with neither."""
    events = [
        step_span(0, 0, 200),
        cpu("c10d::_allgather_base_", 10, 10),
        launch(1, 12),
        cpu("c10d::allreduce_", 30, 40),
        cpu("nccl:all_to_all", 40, 10, cat="user_annotation"),
        launch(2, 42),
        kernel("ncclDevKernel_AllGather_RING_LL", 20, 30, corr=1),
        kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", 60, 10, corr=2),
        kernel("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", 80, 10, corr=3),
        kernel("ncclDevKernel_Broadcast_RING_LL", 100, 10, corr=4),
        kernel("sm90_gemm", 25, 60, tid=8),
    ]
    events[8]["args"]["Collective name"] = "_reduce_scatter_base"
    (p,) = parts({"traceEvents": events})
    assert [(n.issued, n.ran_as) for n in named_comm(p)] == [
        ("all_gather", "all_gather"),
        ("all_to_all", "send_recv"),
        ("reduce_scatter", "reduce_scatter"),
        (None, "broadcast"),
    ]
    exposed = {f.ran_as: f.exposed_us for f in collective_figures(p)}
    # compute (the gemm) is [25, 85): the all_gather [20, 50) is exposed for 5 us, the SendRecv
    # [60, 70) not at all, the reduce_scatter [80, 90) for 5, the broadcast for all 10
    assert exposed == {"all_gather": 5, "send_recv": 0, "reduce_scatter": 5, "broadcast": 10}


@needs(TRACES)
@pytest.mark.parametrize(
    "name, calls",
    [
        ("01_hta_df-index-resolver_rank1-of-2_v100.json.gz", {("all_reduce", "all_reduce"): 2020}),
        (
            "04_hta_nccl-parser-config_rank0-of-2_a100_float-ts.json.gz",
            {("all_reduce", "all_reduce"): 15, ("broadcast", "broadcast"): 6},
        ),
    ],
)
def test_a_real_gpu_traces_kernels_are_each_named_by_one_of_its_calls(name, calls):
    """Each file records 2,020 (01) and 15 + 6 (04) ``c10d::`` calls and as many NCCL kernels:
    every kernel is named by the call that launched it."""
    trace = load_trace(TRACES / name)
    events = trace["traceEvents"]
    assert collections.Counter(
        issued_op(e["name"]) for e in events if issued_op(str(e.get("name", "")))
    ) == collections.Counter({op: n for (op, _), n in calls.items()})
    (p,) = parts(trace)
    assert collections.Counter((n.issued, n.ran_as) for n in named_comm(p)) == calls


@needs(TRACES)
def test_a_real_all_to_all_runs_as_sendrecv_kernels():
    """trace 02 (8 ranks): its 42 all_to_all calls reach NCCL without a ``c10d::`` event, only
    torch's ``nccl:all_to_all`` annotation; NCCL runs them as SendRecv kernels."""
    (p,) = parts(load_trace(TRACES / "02_hta_trace-diff-control_rank3-of-8_a100.json.gz"))
    assert collections.Counter((n.issued, n.ran_as) for n in named_comm(p)) == {
        ("all_to_all", "send_recv"): 42,
        ("all_reduce", "all_reduce"): 18,
    }
