"""Measured overlap from a profiler trace: interval arithmetic, the GPU and CPU rules and the step
windows on synthetic traces whose expected intervals are worked out by hand in each test, then
the four real Kineto GPU traces of the corpus against their ``expected.json``."""

from __future__ import annotations

import functools
import gzip
import json
from decimal import Decimal

import pytest

from orchestrator.analysis.trace_overlap import (
    Interval,
    _Event,
    cpu_overlap,
    gpu_overlap,
    intersect,
    length,
    load_trace,
    main_thread,
    step_intervals,
    subtract,
    top_level,
    trace_overlap,
    union,
)
from tests.captures import CORPUS, corpus_index, needs

TRACES = CORPUS / "traces"
REAL = [
    "01_hta_df-index-resolver_rank1-of-2_v100.json.gz",
    "02_hta_trace-diff-control_rank3-of-8_a100.json.gz",
    "03_hta_negative-queue-length_rank0-of-16_a100-80gb.json.gz",
    "04_hta_nccl-parser-config_rank0-of-2_a100_float-ts.json.gz",
]


def kernel(name, ts, dur, tid=7, pid=0, cat="kernel", corr=None):
    e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if corr is not None:
        e["args"] = {"correlation": corr, "External id": corr}
    return e


def cpu(name, ts, dur, tid=1, pid=100, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}


def step_span(n, ts, dur, tid=1, pid=100, cat="user_annotation"):
    return cpu(f"ProfilerStep#{n}", ts, dur, tid=tid, pid=pid, cat=cat)


def launch(corr, ts, tid=1, pid=100):
    e = cpu("cudaLaunchKernel", ts, 2, tid=tid, pid=pid, cat="cuda_runtime")
    return e | {"args": {"correlation": corr, "External id": corr}}


def only(trace):
    [result] = trace_overlap(trace)
    return result


# ---- interval arithmetic ----------------------------------------------------------------------


def test_union_merges_overlapping_and_touching_intervals_and_drops_empty_ones():
    merged = union([(5, 7), (0, 2), (2, 3), (6, 6.5), (10, 10), (12, 11)])
    assert merged == [Interval(0, 3), Interval(5, 7)]
    assert length(merged) == 5  # never the sum of durations (2 + 1 + 2 + 0.5 = 5.5)


def test_intersect_and_subtract_of_two_unions():
    a = union([(0, 10), (20, 30)])
    b = union([(5, 25), (28, 40)])
    assert intersect(a, b) == [Interval(5, 10), Interval(20, 25), Interval(28, 30)]
    assert subtract(a, b) == [Interval(0, 5), Interval(25, 28)]
    assert subtract(b, a) == [Interval(10, 20), Interval(30, 40)]
    assert intersect(a, []) == [] and subtract(a, []) == a


def test_top_level_keeps_outermost_calls_and_a_jittered_overlapping_one():
    events = [
        _Event(0, 10, 1, "outer"),
        _Event(2, 5, 1, "inner"),
        _Event(3, 4, 1, "innermost"),
        _Event(10, 12, 1, "touching"),
        _Event(11, 13, 1, "jitter: starts inside, ends after"),
    ]
    assert [e.name for e in top_level(events)] == [
        "outer",
        "touching",
        "jitter: starts inside, ends after",
    ]


# ---- GPU rule ---------------------------------------------------------------------------------


def test_gpu_comm_on_two_streams_overlapping_compute_kernels():
    # comm [0,10) on 20 and [5,15) on 21: busy [0,15) = 15, not 20.
    # compute [2,4) and [3,6) on 7 -> [2,6); [12,20) -> 4 + 8 = 12.
    # overlapped: [2,6) 4 + [12,15) 3 = 7; exposed 15 - 7 = 8.
    r = only(
        {
            "traceEvents": [
                kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 0, 10, tid=20),
                kernel("ncclDevKernel_SendRecv", 5, 10, tid=21),
                kernel("void gemm_kernel", 2, 2),
                kernel("void elementwise_kernel", 3, 3),
                kernel("void softmax_kernel", 12, 8),
            ]
        }
    )
    assert (r.rule, r.pid, r.steps, r.steps_from) == ("gpu", 0, (), None)
    w = r.whole
    assert (w.comm_us, w.compute_us, w.overlapped_us, w.exposed_us) == (15, 12, 7, 8)
    assert w.exposed_share == 8 / 15
    assert (w.n_comm, w.n_compute, w.comm_lanes, w.compute_lanes) == (2, 3, (20, 21), (7,))
    assert w.window_us == (0, 20)


def test_gpu_rule_leaves_out_copies_fills_syncs_annotations_and_cpu_events():
    # counted: comm NCCLKernel (any case) [0,10); compute gemm [5,8) and async copy [20,22).
    r = only(
        {
            "traceEvents": [
                kernel("NCCLKernel_Broadcast", 0, 10, tid=20),
                kernel("void gemm_kernel", 5, 3),
                kernel("recat_copy_async_kernel<float>", 20, 2),  # lower-case "sync": compute
                kernel("Memcpy DtoD (Device -> Device)", 0, 30),
                kernel("Memset (Device)", 0, 30),
                kernel("cudaStreamSyncKernel", 0, 30),
                kernel("Memcpy HtoD (Pinned -> Device)", 0, 30, cat="gpu_memcpy"),
                kernel("Memset (Device)", 0, 30, cat="gpu_memset"),
                kernel("nccl:all_reduce", 0, 40, tid=20, cat="gpu_user_annotation"),
                kernel("DistributedDataParallel.forward", 0, 40, cat="gpu_user_annotation"),
                cpu("nccl:all_reduce", 0, 50, pid=0),  # a CPU event, even on the device's pid
                kernel("ncclKernel_zero_length", 30, 0, tid=20),
                kernel("void negative_kernel", 30, -1),
                {"ph": "i", "cat": "kernel", "name": "ncclInstant", "pid": 0, "tid": 20, "ts": 3},
            ]
        }
    )
    w = r.whole
    assert (w.comm_us, w.compute_us, w.overlapped_us, w.exposed_us) == (10, 5, 3, 7)
    assert (w.n_comm, w.n_compute, w.window_us) == (1, 2, (0, 22))


def test_gpu_devices_are_separate_by_pid():
    results = gpu_overlap(
        {
            "traceEvents": [
                kernel("ncclKernel_AllReduce", 0, 10, pid=1, tid=20),
                kernel("void gemm_kernel", 0, 10, pid=0),
                kernel("void gemm_kernel", 0, 4, pid=1),
            ]
        }
    )
    assert [(r.pid, r.whole.comm_us, r.whole.overlapped_us) for r in results] == [
        (0, 0, 0),
        (1, 10, 4),
    ]


def test_gpu_without_communication_has_no_exposed_share():
    w = only({"traceEvents": [kernel("void gemm_kernel", 0, 5)]}).whole
    assert (w.comm_us, w.exposed_us, w.exposed_share, w.n_comm, w.comm_lanes) == (0, 0, None, 0, ())
    assert w.compute_us == 5


def test_an_empty_trace_gives_nothing():
    assert trace_overlap({"traceEvents": []}) == []
    assert trace_overlap({}) == []


def test_float_timestamps_are_exact_as_written_read_from_json_and_json_gz(tmp_path):
    # comm [4458676422880.181, +2.002) and compute [4458676422881.182, +5.005):
    # overlapped = 4458676422882.183 - 4458676422881.182 = 1.001, exposed 1.001.
    text = (
        '{"traceEvents": ['
        '{"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "pid": 0, "tid": 40,'
        ' "ts": 4458676422880.181, "dur": 2.002},'
        '{"ph": "X", "cat": "kernel", "name": "void gemm", "pid": 0, "tid": 7,'
        ' "ts": 4458676422881.182, "dur": 5.005}]}'
    )
    (tmp_path / "t.json").write_text(text)
    with gzip.open(tmp_path / "t.json.gz", "wt") as f:
        f.write(text)
    for name in ("t.json", "t.json.gz"):
        trace = load_trace(tmp_path / name)
        assert isinstance(
            trace["traceEvents"][0]["ts"], Decimal
        )  # a float cannot hold them exactly
        w = only(trace).whole
        assert (w.comm_us, w.compute_us, w.overlapped_us, w.exposed_us) == (
            2.002,
            5.005,
            1.001,
            1.001,
        )
        assert w.exposed_share == 0.5
        assert w.window_us == (4458676422880.181, 4458676422886.187)


def test_gpu_side_step_spans_are_never_windows_the_launches_are():
    # One DDP step shaped as Kineto emits it (rules in kineto_gpu_spans below): the main thread
    # (tid 1) holds ProfilerStep#1 [0,100) with DistributedDataParallel.forward [2,30) around
    # the forward's launch (corr 1) and the loss's launch (corr 2) outside it; autograd's thread
    # (tid 2) launches backward (corr 3) and DDP's all-reduce (corr 4) at 40 and 45. Kineto's
    # ProfilerStep#1 GPU span holds only the loss kernel [35,37): as a window it reads no
    # communication. The launches put all four kernels in step 1: window [10,90).
    r = only(
        {
            "traceEvents": [
                step_span(1, 0, 100),
                cpu("DistributedDataParallel.forward", 2, 28, cat="user_annotation"),
                launch(1, 5),
                launch(2, 31),
                launch(3, 40, tid=2),
                launch(4, 45, tid=2),
                kernel("void gemm_kernel", 10, 20, corr=1),
                kernel("void cross_entropy_kernel", 35, 2, corr=2),
                kernel("void gemm_kernel", 40, 30, corr=3),
                kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 50, 40, tid=20, corr=4),
                kernel("DistributedDataParallel.forward", 9, 21, cat="gpu_user_annotation"),
                kernel("ProfilerStep#1", 34, 3, cat="gpu_user_annotation"),
            ]
        }
    )
    [s] = r.steps
    f = s.figures
    assert (s.step, f.window_us, f.comm_us, f.compute_us, f.overlapped_us, f.exposed_us) == (
        1,
        (10, 90),
        40,
        52,
        20,
        20,
    )
    assert r.steps_from == "cpu_launch"


def test_cpu_step_spans_assign_kernels_by_their_launch_and_cut_the_gpu_timeline():
    # CPU steps [0,100) and [100,200). Launched in step 1: compute [50,120), comm [120,150),
    # a memcpy [40,45) (not counted, so it does not open the window). In step 2: compute
    # [140,200), comm [210,230). No launch event: compute [195,215).
    # GPU windows: step 1 [50,140) (to step 2's first kernel), step 2 [140,230) (its last end).
    # step 1: comm [120,140) 20, compute [50,120) 70, overlapped 0, exposed 20.
    # step 2: comm [140,150)+[210,230) 30, compute [140,215) 75, overlapped 10+5, exposed 15.
    trace = {
        "traceEvents": [
            step_span(1, 0, 100),
            step_span(2, 100, 100),
            launch(1, 10),
            launch(2, 20),
            launch(5, 5),
            launch(3, 110),
            launch(4, 150),
            kernel("void gemm_kernel", 50, 70, corr=1),
            kernel("ncclKernel_AllReduce", 120, 30, tid=20, corr=2),
            kernel("Memcpy DtoD (Device -> Device)", 40, 5, corr=5),
            kernel("void gemm_kernel", 140, 60, corr=3),
            kernel("ncclKernel_AllReduce", 210, 20, tid=20, corr=4),
            kernel("void elementwise_kernel", 195, 20, tid=8, corr=99),
        ]
    }
    r = only(trace)
    assert r.steps_from == "cpu_launch"
    got = {
        s.step: (s.figures.window_us, s.figures.comm_us, s.figures.compute_us)
        + (s.figures.overlapped_us, s.figures.exposed_us, s.figures.n_comm, s.figures.n_compute)
        for s in r.steps
    }
    assert got == {
        1: ((50, 140), 20, 70, 0, 20, 1, 1),
        2: ((140, 230), 30, 75, 15, 15, 2, 2),
    }
    assert r.steps[1].figures.compute_lanes == (7, 8)
    w = r.whole
    assert (w.comm_us, w.compute_us, w.overlapped_us, w.exposed_us) == (50, 145, 15, 35)
    assert w.comm_us == sum(s.figures.comm_us for s in r.steps)  # the windows cut, never overlap


def test_a_step_whose_kernels_start_before_the_previous_steps_gets_no_backward_window():
    # step 2's only kernel starts (at 5) before step 1's (at 10): step 2's window starts at 10.
    r = only(
        {
            "traceEvents": [
                step_span(1, 0, 100),
                step_span(2, 100, 100),
                step_span(3, 200, 100),  # no kernel: no figures
                launch(1, 10),
                launch(2, 110),
                kernel("void gemm_kernel", 10, 10, corr=1),
                kernel("ncclKernel_AllReduce", 5, 20, tid=20, corr=2),
            ]
        }
    )
    assert [(s.step, s.figures.window_us) for s in r.steps] == [(1, (10, 10)), (2, (10, 25))]
    assert r.steps[0].figures.comm_us == 0 and r.steps[1].figures.comm_us == 15


# ---- CPU rule ---------------------------------------------------------------------------------


def gloo_trace():
    """One rank of a 2-rank DDP on gloo, shaped as torch's profiler records it: the main thread
    (tid 1) with its step, ops, the reducer's allreduce inside backward; gloo's worker threads
    (tids 2, 3) with the collectives themselves."""
    return {
        "traceEvents": [
            {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans"}
            | {"tid": "PyTorch Profiler", "ts": -100, "dur": 500},
            {"ph": "M", "name": "thread_name", "pid": 100, "tid": 1, "args": {"name": "main"}},
            step_span(1, 0, 100),
            cpu("train.py(42): train_step", 0, 100, cat="python_function"),
            cpu("aten::linear", 5, 20),
            cpu("aten::addmm", 6, 18),
            cpu("autograd::engine::evaluate_function: AddmmBackward0", 30, 30),
            cpu("c10d::allreduce_", 40, 5),
            cpu("record_param_comms", 41, 1),
            cpu("c10d::allreduce_", 60, 3),
            cpu("_c10d_functional::wait_tensor", 63, 6),
            cpu("Optimizer.step#SGD.step", 70, 20, cat="user_annotation"),
            cpu("aten::add_", 71, 9),
            cpu("_c10d_functional::all_reduce", 90, 5),
            {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 100, "tid": 1}
            | {"ts": 50},
            cpu("gloo:all_reduce", 41, 17, tid=2),
            cpu("gloo:all_reduce", 50, 14, tid=3),
            cpu("gloo:broadcast", -10, 5, tid=2),  # before the step: the whole trace only
        ]
    }


def test_cpu_rule_on_a_gloo_trace_shaped_like_torchs():
    # comm: gloo [41,58) and [50,64) on two threads -> [41,64) 23 in the step; + [-10,-5) 5.
    # compute: top-level ops [5,25) [30,60) [71,80), less the nested allreduce [40,45):
    # 20 + 25 + 9 = 54 (the allreduce_ at [60,63), the wait [63,69), the functional all_reduce
    # [90,95), the step span, the python frame and the optimizer's annotation [70,90) are not
    # compute; the add_ inside the annotation is). overlapped: [45,60) 15. exposed: 23 - 15 = 8.
    r = only(gloo_trace())
    assert (r.rule, r.pid, r.steps_from) == ("cpu", 100, "cpu_span")
    [step] = r.steps
    s = step.figures
    assert (step.step, s.window_us) == (1, (0, 100))
    assert (s.comm_us, s.compute_us, s.overlapped_us, s.exposed_us) == (23, 54, 15, 8)
    assert s.exposed_share == 8 / 23
    assert (s.n_comm, s.n_compute, s.comm_lanes, s.compute_lanes) == (2, 3, (2, 3), (1,))
    w = r.whole
    assert (w.comm_us, w.compute_us, w.overlapped_us, w.exposed_us) == (28, 54, 15, 13)
    assert (w.n_comm, w.window_us) == (3, (-10, 80))


def test_a_steps_intervals_for_the_timeline_are_the_ones_its_figures_count():
    window, comm, compute = step_intervals(gloo_trace(), 1)
    assert window == (0, 100)
    assert sum(e - b for b, e in comm) == 23 and sum(e - b for b, e in compute) == 54
    assert comm == [(41, 64)]
    assert step_intervals(gloo_trace(), 2) is None  # no such step marked


def test_cpu_main_thread_without_step_spans_is_the_busiest_thread_with_ops_other_than_gloos():
    events = [
        cpu("aten::mm", 0, 10, tid=5),
        cpu("aten::mm", 20, 10, tid=6),
        cpu("aten::add", 25, 10, tid=6),  # tid 6: [20,35) 15
        cpu("gloo:all_reduce", 0, 100, tid=7),
    ]
    assert main_thread(events) == 6
    [r] = cpu_overlap({"traceEvents": events})
    assert (r.steps, r.steps_from, r.whole.compute_lanes) == ((), None, (6,))
    assert (r.whole.comm_us, r.whole.compute_us, r.whole.overlapped_us) == (100, 15, 15)
    assert main_thread([cpu("gloo:all_reduce", 0, 100, tid=7)]) is None


def test_trace_overlap_uses_the_gpu_rule_where_kernels_exist():
    trace = gloo_trace()
    assert only(trace).rule == "cpu"
    trace["traceEvents"].append(kernel("void gemm_kernel", 0, 5))
    assert only(trace).rule == "gpu"


# ---- the real Kineto GPU traces ---------------------------------------------------------------


@functools.cache
def expected() -> dict:
    return json.loads((TRACES / "expected.json").read_text())


@functools.cache
def measured(name: str):
    return trace_overlap(load_trace(TRACES / name))


@needs(TRACES)
def test_every_real_trace_has_an_expected_entry_and_a_source_row():
    # corpus_index looks for source rows in the corpus's SOURCES.md; the traces keep theirs in
    # their own folder's SOURCES.md, so that part is checked here against that file.
    off = corpus_index(TRACES, "*.json.gz", expected()["traces"])
    assert [o for o in off if not o.endswith(": no row in SOURCES.md")] == []
    sources = (TRACES / "SOURCES.md").read_text()
    assert [n for n in REAL if f"| {n} |" not in sources] == []
    assert sorted(p.name for p in TRACES.glob("*.json.gz")) == sorted(expected()["traces"]) == REAL


@needs(TRACES)
def test_the_expected_rule_is_the_gpu_rule_here():
    rule = expected()["rule"]
    for words in ("ph=='X' and cat=='kernel'", "^nccl case-insensitively", "'Memcpy', 'Memset'"):
        assert words in rule


@needs(TRACES)
@pytest.mark.parametrize("name", REAL)
def test_a_real_gpu_trace_gives_exactly_the_expected_figures(name):
    # expected.json gives microseconds to 3 decimals and the share to 6.
    [exp] = expected()["traces"][name].values()
    [r] = measured(name)
    w = r.whole
    assert (r.rule, r.pid) == ("gpu", exp["device_pid"])
    got = {
        "window": {
            "start_us": round(w.window_us[0], 3),
            "end_us": round(w.window_us[1], 3),
            "length_us": round(w.window_us[1] - w.window_us[0], 3),
        },
        "comm_us": round(w.comm_us, 3),
        "compute_us": round(w.compute_us, 3),
        "overlapped_us": round(w.overlapped_us, 3),
        "exposed_us": round(w.exposed_us, 3),
        "exposed_share": round(w.exposed_share, 6),
        "n_comm_kernels": w.n_comm,
        "n_compute_kernels": w.n_compute,
        "comm_streams": list(w.comm_lanes),
        "compute_streams": list(w.compute_lanes),
    }
    assert got == {k: exp[k] for k in got}
    assert exp["per_step"] is None  # no GPU-side step spans: steps come from the launches here


@needs(TRACES)
@pytest.mark.parametrize(
    ("name", "steps", "before_us"),
    [
        (REAL[0], [2, 3, 4, 5, 6], 0),
        (REAL[1], list(range(1009, 1015)), 0),
        # 705 kernels have no launch event; some run before step 550's first kernel.
        (REAL[2], list(range(550, 555)), 335),
        (REAL[3], [4, 5, 6], 0),
    ],
)
def test_a_real_gpu_traces_steps_cut_its_timeline_and_add_up_to_the_whole(name, steps, before_us):
    [r] = measured(name)
    assert r.steps_from == "cpu_launch"
    assert [s.step for s in r.steps] == steps
    windows = [s.figures.window_us for s in r.steps]
    assert all(a[1] == b[0] for a, b in zip(windows, windows[1:], strict=False))
    assert windows[0][0] - r.whole.window_us[0] == before_us
    assert windows[-1][1] == r.whole.window_us[1]
    for field in ("comm_us", "compute_us", "overlapped_us", "exposed_us"):
        total = round(sum(getattr(s.figures, field) for s in r.steps), 3)
        whole = round(getattr(r.whole, field), 3)
        assert total == whole if before_us == 0 else total <= whole, field


# ---- why GPU-side step spans are not windows: Kineto's rule, checked on a real trace ----------

GPU_ACTIVITIES = ("kernel", "gpu_memcpy", "gpu_memset")
HTA_PROGRAM_ANNOTATIONS = ("## forward ##", "## backward ##", "## optimizer ##")
"""Trace 04's training program wraps its phases in these; linksweep's traced step
(``workloads/train.py`` ``_trace``) wraps the whole step in ``ProfilerStep#k`` and nothing else."""


def kineto_gpu_spans(events: list[dict]) -> dict[tuple, tuple]:
    """The ``gpu_user_annotation`` spans Kineto writes for ``events``' GPU activities:
    {(annotation name, its External id, device, stream): (ts, end)}.

    The rule, from the source: torch's profiler pushes a user-scope correlation id for each
    ``user_annotation`` it enters, on the entering thread (``ThreadLocalSubqueue::begin_op``,
    torch/csrc/profiler/collection.cpp: ``pushUserCorrelationId`` for ``USER_SCOPE``; CUPTI keeps
    the external-correlation stack per thread), so a launch carries its thread's innermost open
    annotation. Kineto (libkineto ``GenericActivityProfiler::handleGpuActivity`` then
    ``GpuUserEventMap::insertOrExtendEvent``) opens or extends one span per (annotation,
    device, stream) with every GPU activity (kernel, copy, fill) so correlated. The JSON writer
    then moves each span's start 1 us earlier (output_json.cpp, "Make it start one us earlier");
    in trace 04 the end also reads 0.5 us later: both are added here."""
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    by_thread: dict[tuple, list[dict]] = {}
    for e in events:
        if e.get("cat") == "user_annotation":
            by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    spans: dict[tuple, tuple] = {}
    for g in events:
        launch_ev = launches.get(g.get("args", {}).get("correlation"))
        if g.get("cat") not in GPU_ACTIVITIES or launch_ev is None:
            continue
        t = launch_ev["ts"]
        open_ = [
            u
            for u in by_thread.get((launch_ev["pid"], launch_ev["tid"]), [])
            if u["ts"] <= t < u["ts"] + u["dur"]
        ]
        if not open_:
            continue
        u = min(open_, key=lambda u: u["dur"])
        key = (u["name"], u["args"]["External id"], g["pid"], g["tid"])
        start, end = spans.get(key, (g["ts"], g["ts"] + g["dur"]))
        spans[key] = (min(start, g["ts"]), max(end, g["ts"] + g["dur"]))
    return {k: (s - 1, e + Decimal("0.5")) for k, (s, e) in spans.items()}


def written_gpu_spans(events: list[dict]) -> dict[tuple, tuple]:
    return {
        (e["name"], e["args"]["External id"], e["pid"], e["tid"]): (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "gpu_user_annotation"
    }


@functools.cache
def trace_04() -> dict:
    return load_trace(TRACES / REAL[3])


@needs(TRACES)
def test_kinetos_gpu_spans_are_the_innermost_annotation_of_the_launching_thread():
    # Trace 04 (one rank of a 2-rank DDP on A100): the rule above gives exactly the 30 spans
    # Kineto wrote. Backward's 1,761 kernels, launched on autograd's thread outside any
    # annotation, have none; the main thread's kernels all sit in nested annotations, so
    # ProfilerStep#4..6 have no GPU span at all.
    events = trace_04()["traceEvents"]
    assert kineto_gpu_spans(events) == written_gpu_spans(events)
    assert len(written_gpu_spans(events)) == 30
    assert not [k for k in written_gpu_spans(events) if k[0].startswith("ProfilerStep#")]


@needs(TRACES)
def test_a_step_span_kineto_draws_from_the_main_threads_few_kernels_is_no_window():
    # Trace 04 as linksweep's loop would have traced it: without the program's own phase
    # annotations, the kernels the main thread launched in backward (the loss gradient's seed)
    # have ProfilerStep#k innermost, and Kineto (the rule above) draws each step's GPU span from
    # them alone: well under a millisecond of a ~220 ms step, before any all-reduce. Read as the
    # step's window, every step's communication was ~0 (the defect); from the launches each step
    # holds its all-reduces and the steps add up to the whole.
    events = [
        e
        for e in trace_04()["traceEvents"]
        if e.get("cat") != "gpu_user_annotation"
        and not (e.get("cat") == "user_annotation" and e["name"] in HTA_PROGRAM_ANNOTATIONS)
    ]
    drawn = kineto_gpu_spans(events)
    steps = {k: v for k, v in drawn.items() if k[0].startswith("ProfilerStep#")}
    assert sorted(k[0] for k in steps) == ["ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"]
    assert all(end - start < 1000 for start, end in steps.values())
    for (name, ext, pid, tid), (start, end) in drawn.items():
        events.append(
            {"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": pid, "tid": tid}
            | {"ts": start, "dur": end - start, "args": {"External id": ext}}
        )
    [r] = trace_overlap({"traceEvents": events})
    # Read from Kineto's step spans: 0.0 us of communication in each step (633, 648, 630 us
    # windows); from the launches: 11,989, 12,300 and 22,587 us, 7 NCCL kernels each.
    assert [(s.step, s.figures.n_comm) for s in r.steps] == [(4, 7), (5, 7), (6, 7)]
    assert all(s.figures.comm_us > 10_000 for s in r.steps)
    assert r.steps_from == "cpu_launch"
    assert round(sum(s.figures.comm_us for s in r.steps), 3) == round(r.whole.comm_us, 3)
