"""A traced run's rows (``trace: {steps: N}``): where each rank's trace is kept, what it shows,
and what the profiler cost. Pure: the traces arrive in the ranks' records, compressed; the
driver writes them to the paths named here (``execute.run_and_store``).

The overlap figures are ``orchestrator/analysis/trace_overlap``'s, per rank, for the whole
trace (``step`` NULL) and for each ``ProfilerStep#k`` it marks, in seconds; which collective
each interval was, ``orchestrator/analysis/trace_collectives``', with the rank's recorded step
(``TrainingRecord.step_collectives``) laid over for bytes and group sizes. The profiler's
overhead is the traced steps' median (the slowest rank per step, as a timed step's figure is)
over the timed steps' median: the traced steps ran the same work under the profiler.

Every rank's trace is also laid on rank 0's clock (``orchestrator/analysis/trace_merge``: each
rank's ``baseTimeNanoseconds`` and the clock offset it measured, ``TraceRecord.clock_offset_ns``):
a rebased copy per rank in a folder of the run's own (``<run_id>/rank<r>.json.gz``, a folder
Holistic Trace Analysis loads as it is) and one merged trace beside the ranks' files
(``<run_id>-merged.json.gz``, every rank a process). From the rebased traces
``orchestrator/analysis/trace_wait`` splits each rank's exposed communication into waiting for
the last rank and moving bytes, and names a straggler. The ranks' own files stay as the
profiler wrote them.

May import: orchestrator.analysis.trace_collectives, orchestrator.analysis.trace_merge,
orchestrator.analysis.trace_overlap, orchestrator.analysis.trace_wait, workloads.contract.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from orchestrator.analysis import trace_merge
from orchestrator.analysis.trace_collectives import collective_figures
from orchestrator.analysis.trace_overlap import Figures, parts, trace_overlap
from orchestrator.analysis.trace_wait import RankTrace, WaitSplit, wait_split
from workloads.contract import TraceRecord

US = 1e-6
NS = 1e-9


@dataclass(frozen=True)
class TraceRows:
    """A traced run's rows, table by table, its run row's trace columns, and the files the driver
    writes beside the ranks' own before it commits (path -> gzip bytes)."""

    traces: list[dict] = field(default_factory=list)
    overlap: list[dict] = field(default_factory=list)
    collectives: list[dict] = field(default_factory=list)
    wait: list[dict] = field(default_factory=list)
    wait_instances: list[dict] = field(default_factory=list)
    lateness: list[dict] = field(default_factory=list)
    run: dict = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)


def trace_dir_for(db_path: str, sweep_id: str) -> str:
    """Where a sweep's traces are kept: ``<db without .duckdb>.traces/<sweep_id>`` beside it."""
    stem = db_path[: -len(".duckdb")] if db_path.endswith(".duckdb") else db_path
    return os.path.join(f"{stem}.traces", sweep_id)


def trace_path(trace_dir: str, run_id: str, rank: int) -> str:
    return os.path.join(trace_dir, f"{run_id}-rank{rank}.json.gz")


def rebased_path(trace_dir: str, run_id: str, rank: int) -> str:
    """Rank ``rank``'s trace on rank 0's clock, in the run's own folder."""
    return os.path.join(trace_dir, run_id, f"rank{rank}.json.gz")


def merged_path(trace_dir: str, run_id: str) -> str:
    return os.path.join(trace_dir, f"{run_id}-merged.json.gz")


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
) -> TraceRows:
    """A traced run's :class:`TraceRows`; empty for a run that did not trace. ``trace_dir``
    None: the traces are not kept (no path, no file)."""
    ranks = traced(trained)
    if not ranks:
        return TraceRows()
    n = min(len(t.step_times_s) for _, t in ranks)
    slowest = [max(t.step_times_s[i] for _, t in ranks) for i in range(n)]
    traced_s = statistics.median(slowest) if slowest else None
    run = {
        "trace_steps": n,
        "traced_step_time_s": traced_s,
        "trace_overhead": traced_s / median_step_s if traced_s and median_step_s else None,
    }
    recorded = _recorded(trained)
    overlap, named = [], []
    for rank, t in ranks:
        doc = json.loads(gzip.decompress(t.chrome_trace_gz))
        overlap += overlap_rows(run_id, rank, doc)
        named += collective_rows(run_id, rank, doc, recorded.get(rank, ()))
    rebased = rebased_traces(ranks, world_size=len(trained))
    waits, verdict = _waits(run_id, ranks, rebased, recorded, len(trained))
    files = _files(trace_dir, run_id, rebased)
    run["merged_trace_path"] = merged_path(trace_dir, run_id) if trace_dir else None
    run.update(verdict)
    return TraceRows(
        traces=[_trace_row(run_id, rank, t, rebased[rank], trace_dir) for rank, t in ranks],
        overlap=overlap,
        collectives=named,
        **waits,
        run=run,
        files=files,
    )


def _waits(run_id, ranks, rebased, recorded, world_size: int) -> tuple[dict, dict]:
    """(the wait tables' rows, the run's straggler columns) from ``trace_wait.wait_split`` on the
    rebased traces. Where the split fails the run keeps its other rows and its measurement:
    no wait rows, and ``straggler_why`` says why (a failure is a row, not a lost run)."""
    try:
        split = wait_split(
            [
                RankTrace(
                    rank, rebased[rank], (t.clock_uncertainty_ns or 0) * NS, recorded.get(rank, ())
                )
                for rank, t in ranks
            ],
            world_size=world_size,
        )
    except Exception as exc:  # noqa: BLE001 - stored in straggler_why; the run's rows stand
        why = f"not analysed: the wait split failed: {type(exc).__name__}: {exc}"
        return {}, {"straggler_rank": None, "straggler_why": why}
    return wait_rows(run_id, split), verdict_columns(split)


def rebased_traces(ranks: Sequence[tuple[int, TraceRecord]], world_size: int) -> dict[int, dict]:
    """Each rank's trace on rank 0's clock (``trace_merge.rebase``), its ts Decimal (exact, as
    ``trace_overlap.load_trace`` reads them). The common base is the first traced rank's (rank
    0's); a rank that measured no offset (a one-rank run) is taken at 0."""
    docs = {
        rank: json.loads(gzip.decompress(t.chrome_trace_gz), parse_float=Decimal)
        for rank, t in ranks
    }
    base = trace_merge.base_time_ns(docs[ranks[0][0]])
    return {
        rank: trace_merge.rebase(docs[rank], rank, t.clock_offset_ns or 0, base, world_size)
        for rank, t in ranks
    }


def _trace_row(run_id: str, rank: int, t: TraceRecord, rebased: dict, trace_dir) -> dict:
    return {
        "run_id": run_id,
        "rank": rank,
        "path": trace_path(trace_dir, run_id, rank) if trace_dir else None,
        "bytes": len(t.chrome_trace_gz),
        "steps": len(t.step_times_s),
        "base_time_ns": rebased["linksweepClock"]["original_base_ns"],
        "clock_offset_ns": t.clock_offset_ns,
        "clock_uncertainty_ns": t.clock_uncertainty_ns,
        "rebased_path": rebased_path(trace_dir, run_id, rank) if trace_dir else None,
    }


def _files(trace_dir: str | None, run_id: str, rebased: Mapping[int, dict]) -> dict[str, bytes]:
    """The rebased copies and the merged trace, by path (none where traces are not kept)."""
    if not trace_dir:
        return {}
    files = {rebased_path(trace_dir, run_id, r): trace_merge.dumps(d) for r, d in rebased.items()}
    files[merged_path(trace_dir, run_id)] = trace_merge.dumps(trace_merge.merge(rebased))
    return files


def wait_rows(run_id: str, split: WaitSplit) -> dict[str, list[dict]]:
    """``trace_wait``, ``trace_wait_instances`` and ``trace_lateness`` rows of a run."""

    def rows(items) -> list[dict]:
        return [{"run_id": run_id, **dataclasses.asdict(x)} for x in items]

    instances = rows(split.instances)
    for row in instances:
        row["group_ranks"] = row.pop("group")
    return {
        "wait": rows(split.steps),
        "wait_instances": instances,
        "lateness": rows(split.lateness),
    }


def verdict_columns(split: WaitSplit) -> dict:
    """The run row's straggler columns."""
    return {"straggler_rank": split.verdict.straggler, "straggler_why": split.verdict.why}


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
