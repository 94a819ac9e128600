"""Reading one sweep out of the results database: the report's only I/O besides writing files.

``load_report_data(db, sweep_id)`` opens ``orchestrator.store.Reader`` (read-only) and runs the
named queries of ``orchestrator/store/queries.py`` (section "the report"); it returns a
``ReportData`` of plain rows (dicts keyed by column) that the figures and the HTML read.
No SQL here: a new need is a new named query.

Traced runs' timelines also read each drawn rank's trace file (``traces.path``) and keep only
the intervals the timeline draws (``orchestrator.analysis.trace_overlap.step_intervals``).

May import: orchestrator.store, orchestrator.analysis.flavours, orchestrator.analysis.stats,
orchestrator.analysis.trace_overlap.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.analysis.flavours import GA, series_name
from orchestrator.analysis.stats import GROUP_KEY, varying
from orchestrator.analysis.trace_overlap import load_trace, step_intervals
from orchestrator.store import Q, Reader, json_value


class ReportError(RuntimeError):
    """The report cannot be made as asked (no such sweep, empty database)."""


@dataclass(frozen=True)
class ReportData:
    """Everything the report shows about one sweep, as plain rows (dicts keyed by column)."""

    sweep: dict
    spec: dict
    versions: dict
    baseline_link: str | None
    link_order: list[str]
    runs: list[dict]
    variants: list[dict]
    sensitivity: list[dict]
    step_times: list[dict]
    bandwidth: list[dict]
    bench_failures: list[dict]
    nodes: list[dict]
    gpus: list[dict]
    gpu_links: list[dict]
    link_overview: list[dict] = field(default_factory=list)
    """view ``link_overview``: each link described, rated and measured (empty before v3)."""
    link_model: list[dict] = field(default_factory=list)
    link_model_check: list[dict] = field(default_factory=list)
    phases: list[dict] = field(default_factory=list)
    """Per phase of a run (``run_phases``): n_runs, median_s, total_s over the sweep."""
    bandwidth_nccl_tests: list[dict] = field(default_factory=list)
    """nccl-tests' figures imported into the sweep (``link_bandwidth``, source nccl-tests);
    ``bandwidth`` holds linksweep's own only."""
    trace_exposure: list[dict] = field(default_factory=list)
    """view ``trace_exposure``: measured exposed communication beside the fitted one."""
    trace_collectives: list[dict] = field(default_factory=list)
    """view ``trace_collective_exposure``: which collectives the traces show exposed."""
    trace_wait: list[dict] = field(default_factory=list)
    """view ``trace_wait_summary``: exposed communication split into waited and transfer."""
    trace_collective_wait: list[dict] = field(default_factory=list)
    """view ``trace_collective_wait``: the same split per collective."""
    trace_lateness: list[dict] = field(default_factory=list)
    """query ``report_trace_lateness``: each traced run's ranks' lateness and its verdict."""
    timelines: list[dict] = field(default_factory=list)
    """One traced step per variant x link and rank (:func:`read_timelines`)."""


def pick_sweep(reader: Reader, sweep_id: str | None) -> dict:
    """The sweeps row asked for, or the latest by started_at. ReportError if there is none."""
    db = reader.path
    if sweep_id is not None:
        rows = reader.rows(Q.SWEEP, sweep_id=sweep_id)
        if rows:
            return rows[0]
        known = reader.rows(Q.LATEST_SWEEPS, limit=10)
        listed = ", ".join(r["sweep_id"] for r in known) or "none"
        raise ReportError(f"--sweep {sweep_id}: no such sweep in {db}; latest sweeps: {listed}")
    rows = reader.rows(Q.LATEST_SWEEPS, limit=1)
    if not rows:
        raise ReportError(f"{db} holds no sweeps yet; run one first (linksweep run SWEEP.yaml)")
    return rows[0]


def load_report_data(db: str, sweep_id: str | None) -> ReportData:
    """Read one sweep's rows. Raises StoreError (unreadable db) or ReportError (no sweep)."""
    with Reader(db) as reader:
        sweep = pick_sweep(reader, sweep_id)

        def rows(query) -> list[dict]:
            return reader.rows(query, sweep_id=sweep["sweep_id"])

        runs = rows(Q.REPORT_RUNS)
        variants = rows(Q.REPORT_VARIANTS)
        sensitivity = rows(Q.REPORT_SENSITIVITY)
        # Same exclusions as the figures: failed and throttled runs' steps are not read.
        step_times = rows(Q.REPORT_STEP_TIMES)
        bandwidth = rows(Q.REPORT_BANDWIDTH)
        bench_failures = rows(Q.REPORT_BENCH_FAILURES)
        nodes = rows(Q.REPORT_NODES)
        gpus = rows(Q.REPORT_GPUS)
        gpu_links = rows(Q.REPORT_GPU_LINKS)
        link_overview = rows(Q.REPORT_LINK_OVERVIEW)
        link_model = rows(Q.REPORT_LINK_MODEL)
        link_model_check = rows(Q.REPORT_LINK_MODEL_CHECK)
        phases = rows(Q.REPORT_PHASES)
        bandwidth_nccl_tests = rows(Q.REPORT_BANDWIDTH_NCCL_TESTS)
        trace_exposure = rows(Q.REPORT_TRACE_EXPOSURE)
        trace_collectives = rows(Q.REPORT_TRACE_COLLECTIVES)
        trace_wait = rows(Q.REPORT_TRACE_WAIT)
        trace_collective_wait = rows(Q.REPORT_TRACE_COLLECTIVE_WAIT)
        trace_lateness = rows(Q.REPORT_TRACE_LATENESS)
        traces = rows(Q.REPORT_TRACES)

    spec = json_value(sweep.get("spec")) or {}
    spec = spec if isinstance(spec, dict) else {}
    versions = json_value(sweep.get("versions")) or {}
    versions = versions if isinstance(versions, dict) else {"versions": versions}

    links_in_spec = list((spec.get("links") or {}).keys())
    baseline = next((r["baseline_link"] for r in sensitivity if r.get("baseline_link")), None)
    baseline = (
        baseline or spec.get("baseline_link") or (links_in_spec[0] if links_in_spec else None)
    )
    seen = {r["link"] for r in runs} | {r["link"] for r in bandwidth}
    order = [x for x in links_in_spec if x in seen or x == baseline]
    order += sorted(x for x in seen if x not in order and x is not None)
    if baseline in order:
        order.remove(baseline)
        order.insert(0, baseline)
    return ReportData(
        sweep=sweep,
        spec=spec,
        versions=versions,
        baseline_link=baseline,
        link_order=order,
        runs=runs,
        variants=variants,
        sensitivity=sensitivity,
        step_times=step_times,
        bandwidth=bandwidth,
        bench_failures=bench_failures,
        nodes=nodes,
        gpus=gpus,
        gpu_links=gpu_links,
        link_overview=link_overview,
        link_model=link_model,
        link_model_check=link_model_check,
        phases=phases,
        bandwidth_nccl_tests=bandwidth_nccl_tests,
        trace_exposure=trace_exposure,
        trace_collectives=trace_collectives,
        trace_wait=trace_wait,
        trace_collective_wait=trace_collective_wait,
        trace_lateness=trace_lateness,
        timelines=read_timelines(traces),
    )


def timeline_label(r: dict, vary: set[str]) -> str:
    """A traced variant in the timeline's words: its name where ``vary`` differ
    (``flavours.series_name``: ``ZeRO-3+cpu``, ``DDP (sync each)``), then its grad_accum."""
    return f"{series_name(r, vary)}, ga {r[GA]}"


def read_timelines(traces: list[dict]) -> list[dict]:
    """For each variant x link, its first traced run's ranks, one step each (the second traced
    step where there are two or more: the first may carry one-off work): the step's window,
    compute and communication intervals. Each rank is read from its copy on rank 0's clock
    (``traces.rebased_path``; ``common_clock`` True) where there is one, else from its own
    trace (``common_clock`` False: its own clock). A file that cannot be read is left out."""
    first: dict[tuple, str] = {}
    vary = varying(traces, GROUP_KEY)
    for t in traces:
        first.setdefault((timeline_label(t, vary), t["link"]), t["run_id"])
    out = []
    for t in traces:
        key = (timeline_label(t, vary), t["link"])
        if first[key] != t["run_id"]:
            continue
        step = 1 if (t["steps"] or 0) > 1 else 0
        found, common = None, False
        for src, on_rank0 in ((t.get("rebased_path"), True), (t["path"], False)):
            if not src:
                continue
            try:
                found, common = step_intervals(load_trace(src), step), on_rank0
                break
            except (OSError, ValueError):
                continue
        if found is not None:
            window, comm, compute = found
            out.append(
                {"label": key[0], "link": key[1], "rank": t["rank"], "window": window,
                 "comm": comm, "compute": compute, "common_clock": common}
            )  # fmt: skip
    return out
