"""A traced run's rows (``trace: {steps: N}``): where each rank's trace is kept, what it shows,
and what the profiler cost. Pure: the traces arrive in the ranks' records, compressed; the
driver writes them to the paths named here (``execute.run_and_store``).

The overlap figures are ``orchestrator/analysis/trace_overlap``'s, per rank, for the whole
trace (``step`` NULL) and for each ``ProfilerStep#k`` it marks, in seconds; which collective
each interval was, ``orchestrator/analysis/trace_collectives``', with the rank's recorded step
(``TrainingRecord.step_collectives``) laid over for bytes and group sizes. The profiler's
overhead is the traced steps' median (the slowest rank per step, as a timed step's figure is)
over the timed steps' median: the traced steps ran the same work under the profiler.

May import: orchestrator.analysis.trace_collectives, orchestrator.analysis.trace_overlap,
workloads.contract.
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
from collections.abc import Sequence

from orchestrator.analysis.trace_collectives import collective_figures
from orchestrator.analysis.trace_overlap import Figures, parts, trace_overlap
from workloads.contract import TraceRecord

US = 1e-6


def trace_dir_for(db_path: str, sweep_id: str) -> str:
    """Where a sweep's traces are kept: ``<db without .duckdb>.traces/<sweep_id>`` beside it."""
    stem = db_path[: -len(".duckdb")] if db_path.endswith(".duckdb") else db_path
    return os.path.join(f"{stem}.traces", sweep_id)


def trace_path(trace_dir: str, run_id: str, rank: int) -> str:
    return os.path.join(trace_dir, f"{run_id}-rank{rank}.json.gz")


def traced(trained: Sequence[tuple[int, object]]) -> list[tuple[int, TraceRecord]]:
    """``(rank, TraceRecord)`` of every rank that traced, in rank order."""
    out = [(rank, t.trace) for rank, t in trained if getattr(t, "trace", None) is not None]
    return sorted(out, key=lambda rt: rt[0])


def _recorded(trained: Sequence[tuple[int, object]]) -> dict[int, tuple]:
    """Each rank's recorded step (``TrainingRecord.step_collectives``)."""
    return {rank: tuple(getattr(t, "step_collectives", ()) or ()) for rank, t in trained}


def trace_facts(
    run_id: str,
    trained: Sequence[tuple[int, object]],
    median_step_s: float | None,
    trace_dir: str | None,
) -> tuple[list[dict], list[dict], dict]:
    """(``traces`` rows, ``trace_overlap`` rows, ``trace_collectives`` rows, the run row's trace
    columns); nothing for a run that did not trace. ``trace_dir`` None: the traces are not kept
    (no path)."""
    ranks = traced(trained)
    if not ranks:
        return [], [], [], {}
    n = min(len(t.step_times_s) for _, t in ranks)
    slowest = [max(t.step_times_s[i] for _, t in ranks) for i in range(n)]
    traced_s = statistics.median(slowest) if slowest else None
    run = {
        "trace_steps": n,
        "traced_step_time_s": traced_s,
        "trace_overhead": traced_s / median_step_s if traced_s and median_step_s else None,
    }
    files = [
        {
            "run_id": run_id,
            "rank": rank,
            "path": trace_path(trace_dir, run_id, rank) if trace_dir else None,
            "bytes": len(t.chrome_trace_gz),
            "steps": len(t.step_times_s),
        }
        for rank, t in ranks
    ]
    recorded = _recorded(trained)
    overlap, named = [], []
    for rank, t in ranks:
        doc = json.loads(gzip.decompress(t.chrome_trace_gz))
        overlap += overlap_rows(run_id, rank, doc)
        named += collective_rows(run_id, rank, doc, recorded.get(rank, ()))
    return files, overlap, named, run


def collective_rows(run_id: str, rank: int, doc: dict, recorded: Sequence = ()) -> list[dict]:
    """One rank's ``trace_collectives`` rows: each step's collectives, named."""
    return [
        {
            "run_id": run_id,
            "rank": rank,
            "step": f.step,
            "issued_op": f.issued,
            "ran_as": f.ran_as,
            "group_size": f.group_size,
            "n": f.n,
            "msg_bytes": f.msg_bytes,
            "busy_s": f.busy_us * US,
            "exposed_s": f.exposed_us * US,
        }
        for p in parts(doc)
        for f in collective_figures(p, recorded)
    ]


def overlap_rows(run_id: str, rank: int, doc: dict) -> list[dict]:
    """One rank's ``trace_overlap`` rows: the whole trace, then each marked step."""
    rows = []
    for found in trace_overlap(doc):
        base = {"run_id": run_id, "rank": rank, "rule": found.rule}
        rows.append({**base, "step": None, **_seconds(found.whole)})
        rows += [{**base, "step": s.step, **_seconds(s.figures)} for s in found.steps]
    return rows


def _seconds(f: Figures) -> dict:
    return {
        "comm_s": f.comm_us * US,
        "compute_s": f.compute_us * US,
        "overlapped_s": f.overlapped_us * US,
        "exposed_s": f.exposed_us * US,
        "exposed_share": f.exposed_share,
    }
