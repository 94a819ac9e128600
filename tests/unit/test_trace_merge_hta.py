"""The rebased per-rank traces read by a reader the project did not write: Meta's Holistic Trace
Analysis (HTA) loads a run's folder of them and puts every rank on the clock we put them on.

A real torch profiler trace (CPU ops, ``ProfilerStep#k`` spans as ``workloads/train.py`` marks
them) stands in for two ranks; rank 1's is made to read as a clock 2 s ahead (its
``baseTimeNanoseconds`` moved by the planted offset, which is what a rank ahead writes), then
rebased with that offset as ``orchestrator/sweep/trace_rows.py`` does. HTA must find both ranks,
and its Unix time of each rank's first step must be ours (rank 0's clock).

HTA is a test-only extra (``pip install -e .[hta]`` pulls jupyterlab with HTA 0.5.0's own
requirements; ``pip install --no-deps HolisticTraceAnalysis==0.5.0 plotly pydot narwhals`` is
enough here): without it the test skips, saying so.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from decimal import Decimal

import pytest

hta_trace = pytest.importorskip(
    "hta.trace_analysis", reason="HolisticTraceAnalysis is not installed (extra: hta)"
)

PLANT_NS = 2_000_000_000


def torch_trace(steps: int = 2) -> dict:
    """A torch profiler trace of a few small matmuls per step, as Chrome JSON (Decimal ts)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    a = torch.randn(64, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for k in range(steps):
            with record_function(f"ProfilerStep#{k}"):
                for _ in range(3):
                    a = torch.tanh(a @ a)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            return json.load(f, parse_float=Decimal)


def first_step_ns(doc: dict) -> int:
    """ts + base of the trace's ProfilerStep#0, ns on the clock the trace is on."""
    ts = min(e["ts"] for e in doc["traceEvents"] if e.get("name") == "ProfilerStep#0")
    return int(ts * 1000) + int(doc["baseTimeNanoseconds"])


def test_hta_loads_the_runs_rebased_folder_with_each_rank_on_rank_0s_clock(tmp_path):
    from orchestrator.analysis.trace_merge import dumps, rebase

    traced = torch_trace()
    raw = {0: traced, 1: copy.deepcopy(traced)}  # one profile, two ranks: the clocks differ
    raw[1]["baseTimeNanoseconds"] += PLANT_NS  # rank 1's clock reads 2 s ahead
    base = int(raw[0]["baseTimeNanoseconds"])
    folder = tmp_path / "run-a"
    folder.mkdir()
    offsets = {0: 0, 1: PLANT_NS}
    ours = {}
    for rank, doc in raw.items():
        rebased = rebase(doc, rank, offsets[rank], base, 2)
        ours[rank] = first_step_ns(rebased)
        (folder / f"rank{rank}.json.gz").write_bytes(dumps(rebased))
    # the plant is undone: on rank 0's clock the two ranks' (one) step is at one instant again
    assert ours[1] == ours[0] and first_step_ns(raw[1]) - first_step_ns(raw[0]) == PLANT_NS

    from hta.common.trace import trace_event_timestamp_to_unixtime_ns

    analysis = hta_trace.TraceAnalysis(trace_dir=str(folder))
    t = analysis.t
    assert t.get_ranks() == [0, 1]
    names = t.symbol_table.get_sym_id_map()
    for rank in (0, 1):
        assert t.meta_data[rank]["baseTimeNanoseconds"] == base
        df = t.get_trace(rank)
        step0 = int(df[df["name"] == names["ProfilerStep#0"]]["ts"].min())
        # HTA subtracts the smallest ts of all ranks (one axis for all) and keeps whole us
        unix_ns = trace_event_timestamp_to_unixtime_ns(step0 + t.min_ts, t.meta_data[rank])
        assert abs(unix_ns - ours[rank]) <= 1000, (rank, unix_ns, ours[rank])
