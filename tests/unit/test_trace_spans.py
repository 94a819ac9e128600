"""``scripts/trace_spans.py``, the GPU node's reading of what a ``ProfilerStep#k`` span covers:
on a real public trace (no GPU annotation spans: a schedule's steps) and on one in the shape the
third reading describes (a GPU span holding only the kernels launched under the step's own
annotation on the main thread)."""

from __future__ import annotations

import importlib.util
import json

from tests.captures import CORPUS, REPO, path

spec = importlib.util.spec_from_file_location("trace_spans", REPO / "scripts" / "trace_spans.py")
trace_spans = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trace_spans)


def test_a_public_trace_has_cpu_steps_and_no_gpu_step_spans():
    trace = path(CORPUS / "traces" / "04_hta_nccl-parser-config_rank0-of-2_a100_float-ts.json.gz")
    rows = trace_spans.step_rows(trace.name, trace_spans._events(trace))
    assert [r["step"] for r in rows] == [4, 5, 6]
    assert all(r["gpu_spans"] == 0 and r["kernels_in_gpu_span"] == 0 for r in rows)
    assert all(r["kernels_launched"] == 900 and r["nccl_kernels_launched"] == 7 for r in rows)


def _x(name, cat, ts, dur, tid=1, corr=None):
    args = {"correlation": corr} if corr is not None else {}
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "tid": tid, "args": args}


def test_a_gpu_span_of_the_loss_kernels_only_holds_none_of_the_backward_nccl(tmp_path):
    events = [
        _x("ProfilerStep#0", "user_annotation", 0, 1000),
        _x("cudaLaunchKernel", "cuda_runtime", 10, 2, corr=1),  # the loss, under the step
        _x("cudaLaunchKernel", "cuda_runtime", 300, 2, tid=2, corr=2),  # backward thread
        _x("cudaLaunchKernel", "cuda_runtime", 310, 2, tid=2, corr=3),
        _x("loss_kernel", "kernel", 20, 5, corr=1),
        _x("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", 400, 200, corr=2),
        _x("gemm", "kernel", 320, 50, corr=3),
        _x("ProfilerStep#0", "gpu_user_annotation", 20, 5),
    ]
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"traceEvents": events}))
    (row,) = trace_spans.step_rows("t", trace_spans._events(f))
    assert row["gpu_spans"] == 1 and row["gpu_span_ms"] == 0.005
    assert (row["kernels_launched"], row["kernels_in_gpu_span"]) == (3, 1)
    assert (row["nccl_kernels_launched"], row["nccl_in_gpu_span"]) == (1, 0)
    assert trace_spans.main([str(f), "--csv", str(tmp_path / "o.csv")]) == 0
    assert (tmp_path / "o.csv").read_text().count("\n") == 2
