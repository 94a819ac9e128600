"""The sweep loop: plan -> place and run -> rows -> store -> statistics -> progress.

``execute_sweep`` reads top to bottom; each step is one call into the module named for it:
``planner`` (asked once: every run with its config, env, placement and timeout, the link
microbenchmarks, how ranks start), ``raycluster.runs`` and ``raycluster.launchers`` (Ray: place
and run the ranks; imported when a sweep runs, so this module loads without Ray), ``rows``
(result -> table rows), ``ledger`` (the run spooled, then committed in one transaction while
the database is briefly open, so a crash, a stop signal or a busy database keeps every finished
run; start, resume and end of the sweep), ``stats`` (the figures of the run's variant group
only), ``ui`` (progress). A failed run is a row (status ``failed`` and the error text) and the
sweep goes on. What the sweep writes, when and by which route: ``store.writes.SWEEP_WRITES``.

May import: ledger, planner, rows, spec, stopping, trace_rows, orchestrator.analysis.comm_model,
orchestrator.analysis.linkmodel, orchestrator.analysis.links, orchestrator.analysis.stats,
orchestrator.emulated.describe, orchestrator.raycluster, orchestrator.store,
orchestrator.topology.discovery.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.analysis import linkmodel, stats
from orchestrator.analysis.comm_model import AlgbwBySize
from orchestrator.raycluster.result import RunResult
from orchestrator.store import Q, SweepStore, TableStore
from orchestrator.sweep import ledger, rows, stopping, trace_rows
from orchestrator.sweep.planner import (
    LinkbenchPlan,
    PlannedRun,
    RunPlan,
    RunSlot,
    Variant,
    plan_linkbench,
    plan_runs,
    plan_sweep,
)
from orchestrator.sweep.spec import SweepSpec
from orchestrator.topology.discovery import discover_nodes, links_by_node, node_rows

if TYPE_CHECKING:
    from orchestrator.raycluster.runs import RunContext


@dataclass(frozen=True)
class SweepStart:
    """How a sweep starts: fresh or resumed, and the nodes its ranks keep off."""

    resume: tuple[str, list[RunSlot]] | None = None
    """(sweep id, slots left) from ``ledger.resume_plan``: the sweep keeps its id, and each
    slot its run id."""
    excluded: Sequence[dict] = ()
    """The nodes no rank may use (``exclusions.resolve_exclusions``), stored in
    ``sweeps.excluded_nodes`` (on resume: replacing what the sweep stored before)."""


@dataclass(frozen=True)
class SweepRun:
    """What each run of a sweep needs from the sweep: where it is stored and shown, what the
    sweep learned before its first run (the topology, each link's measured bandwidths) and how
    its ranks start (``raycluster.runs.RunContext``)."""

    spec: SweepSpec
    sweep_id: str
    store: SweepStore
    ui: Any
    context: RunContext
    topo_links: dict
    """Each node's GPU links (``discovery.links_by_node``)."""
    gpu_uuids: dict
    """Each node's GPU UUIDs -> indices (``rows.gpu_uuids_by_node``)."""
    link_algbw: dict
    """(link, placement) -> that link's measured algbw per (op, size) (``run_linkbenches``)."""


def execute_sweep(
    spec: SweepSpec,
    store: SweepStore,
    address: str,
    bundle: dict[str, float],
    ui,
    start: SweepStart = SweepStart(),
) -> str:
    """Run every planned run in order, storing each as it ends. Returns the sweep id.

    ``store`` is a ``LiveStore`` (the database is open only while it is used; what the sweep
    writes, when and by which route: ``store.writes.SWEEP_WRITES``).
    ``start``: fresh or resumed, and the nodes kept off (:class:`SweepStart`).
    ``ui`` receives progress callbacks (see orchestrator/ui.py). A stop signal or Ctrl-C
    (``stopping.SweepStopped``, a KeyboardInterrupt) marks the sweep ``interrupted`` and
    re-raises; finished runs are already stored.
    """
    from orchestrator.raycluster.runs import sweep_context

    plan = plan_sweep(spec, bundle, start.resume, start.excluded)  # the planner, once
    sweep_id = plan.sweep_id
    if start.resume is None:
        ledger.start_sweep(store, spec, sweep_id, address, len(plan.runs), start.excluded)
    else:
        ledger.restart_sweep(store, sweep_id, address, start.excluded)
    with sweep_life(store, sweep_id, ui):
        topo_links, gpu_uuids = discover_topology(store, sweep_id, plan.excluded_ids)
        record_links(store, spec, sweep_id, address)
        ui.sweep_started(spec, sweep_id, len(plan.runs))
        link_algbw = run_linkbenches(store, sweep_id, plan.linkbenches, ui)
        if start.resume is not None:  # runs another command committed
            refresh_all_stats(store, spec, sweep_id, plan.planned)
        with sweep_context(plan.launcher, ui.tick) as context:  # launchers: once per sweep
            sweep = SweepRun(spec, sweep_id, store, ui, context, topo_links, gpu_uuids, link_algbw)
            for run in plan.runs:
                run_and_store(sweep, run)
    return sweep_id


def run_and_store(sweep: SweepRun, run: RunPlan) -> None:
    """One run as planned: its ranks run, its rows built (a row that cannot be built is a failed
    run, never a stopped sweep), spooled and committed, then its variant group's figures."""
    planned, v = run.planned, run.planned.variant
    sweep.ui.run_started(planned, run.run_id)
    started = ledger.now()
    result = run_one(run, sweep.context)
    facts = rows.RunFacts(
        spec=sweep.spec,
        sweep_id=sweep.sweep_id,
        planned=planned,
        run_id=run.run_id,
        started_at=started,
        finished_at=ledger.now(),
        rank_env=run.launch.env,
        topo_links=sweep.topo_links,
        gpu_uuids=sweep.gpu_uuids,
        link_algbw=sweep.link_algbw.get((v.link, v.placement)),
        trace_dir=_trace_dir(sweep),
    )
    run_rows = rows.build_rows_safely(facts, result)
    _keep_traces(run_rows.traces, result, run_rows.trace_files)
    diagnostics = ledger.diagnostic_rows(run.run_id, result)
    if ledger.commit_run(sweep.store, run.slot, run_rows, diagnostics):
        group = (sweep.store, sweep.spec, sweep.sweep_id, v)
        ledger.refresh_stats_if_free(refresh_stats, *group)
        ledger.refresh_stats_if_free(refresh_link_model, *group)
    sweep.ui.run_finished(planned, run_rows.run)


def _trace_dir(sweep: SweepRun) -> str | None:
    """The sweep's trace folder beside its database (None when it traces nothing)."""
    path = getattr(sweep.store, "path", None)
    if sweep.spec.trace is None or not path:
        return None
    return trace_rows.trace_dir_for(str(path), sweep.sweep_id)


def _keep_traces(files: list[dict], result: RunResult, derived: dict[str, bytes]) -> None:
    """Write each traced rank's trace where its ``traces`` row says, and the traces derived from
    them (``trace_rows.TraceRows.files``: on rank 0's clock, merged), before the run is
    committed (a row never names a file that is not there)."""
    by_rank = {r.rank: r.training.trace for r in result.rank_records if r.training is not None}
    out_files = {
        f["path"]: by_rank[f["rank"]].chrome_trace_gz
        for f in files
        if f["path"] and by_rank.get(f["rank"]) is not None
    }
    for path, data in {**out_files, **derived}.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as out:
            out.write(data)


def execute_linkbench(
    spec: SweepSpec, store: SweepStore, address: str, bundle: dict[str, float], ui, excluded=()
) -> str:
    """``linksweep linkbench``: a sweep with no training runs: the nodes' topology, each link
    described, then each link x placement measured (``link_bench``), off the ``excluded``
    nodes. Returns the sweep id."""
    plan = plan_linkbench(spec, bundle, excluded)  # the planner, once
    sweep_id = plan.sweep_id
    ledger.start_sweep(store, spec, sweep_id, address, 0, excluded)
    with sweep_life(store, sweep_id, ui):
        discover_topology(store, sweep_id, plan.excluded_ids)
        record_links(store, spec, sweep_id, address)
        ui.sweep_started(spec, sweep_id, 0)
        run_linkbenches(store, sweep_id, plan.linkbenches, ui)
    return sweep_id


@contextmanager
def sweep_life(store: SweepStore, sweep_id: str, ui) -> Iterator[None]:
    """The sweep's heartbeat while the block runs, then its final status: ``interrupted`` when a
    stop signal or Ctrl-C ends the block (re-raised; also when the signal reached a DuckDB query
    and came out as DuckDB's error), else ok or failed from its runs."""
    heartbeat = store.heartbeat(sweep_id)
    status = "ok"
    try:
        yield
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    except Exception as exc:
        signum = stopping.stopping_for()
        if signum is None:
            raise
        status = "interrupted"  # the stop signal came inside a DuckDB query: its error, ours
        raise stopping.SweepStopped(signum) from exc
    finally:
        heartbeat.stop()
        ui.sweep_finished(sweep_id, ledger.finish_sweep(store, sweep_id, status))


def run_one(run: RunPlan, context: RunContext) -> RunResult:
    """One run as planned, its ranks started as ``context`` says; its NVMe swap folder is
    removed whatever happens."""
    from orchestrator.raycluster.runs import execute_run

    try:
        return execute_run(run.launch, context)
    finally:
        nvme_dir = getattr(run.launch.config, "nvme_dir", None)
        if nvme_dir:
            shutil.rmtree(nvme_dir, ignore_errors=True)


def discover_topology(
    store: TableStore, sweep_id: str, excluded_ids: Sequence[str] = ()
) -> tuple[dict, dict]:
    """One probe per node but the excluded ones (never touched): nvidia-smi topo -m
    and NVML inventory -> nodes, gpus, gpu_links. Returns each node's links
    (``discovery.links_by_node``) and GPU UUIDs -> indices (``rows.gpu_uuids_by_node``), what a
    run's link class is read from."""
    tables = node_rows(sweep_id, discover_nodes(skip=excluded_ids))
    with store.transaction():
        for table, table_rows in tables.items():
            store.delete(table, {"sweep_id": sweep_id})  # a resumed sweep: the cluster now
            store.insert(table, table_rows)
    statuses = sorted({r["nvml"] for r in tables["nodes"]})
    store.update("sweeps", {"sweep_id": sweep_id}, {"topology_status": "; ".join(statuses)})
    return links_by_node(tables["gpu_links"]), rows.gpu_uuids_by_node(tables["gpus"])


def record_links(store: TableStore, spec: SweepSpec, sweep_id: str, address: str) -> None:
    """Each link's physical description (``link_descriptions``): for the emulated cluster the tc
    shape ``cluster up`` recorded, elsewhere what the link's env asks for and its rated rate
    from the inventory and topology ``discover_topology`` stored just before."""
    from orchestrator.analysis.links import describe_links
    from orchestrator.emulated.describe import recorded_link_shapes

    gpus = store.rows(Q.REPORT_GPUS, sweep_id=sweep_id)
    gpu_links = store.rows(Q.REPORT_GPU_LINKS, sweep_id=sweep_id)
    descriptions = describe_links(
        spec.links, recorded_link_shapes(address), sweep_id, gpus, gpu_links,
        list(spec.grid.placement),
    )  # fmt: skip
    with store.transaction():
        store.delete("link_descriptions", {"sweep_id": sweep_id})  # a resumed sweep: now
        store.insert("link_descriptions", descriptions)


def run_linkbenches(store: TableStore, sweep_id: str, benches: Sequence[LinkbenchPlan], ui) -> dict:
    """The link microbenchmark per (link, placement) as planned; returns each one's measured
    algbw per (op, size) (``comm_model.AlgbwBySize``), read back from the ``link_bandwidth`` view (where its medians are
    computed)."""
    from orchestrator.raycluster.runs import execute_run

    algbw_by_link: dict[tuple[str, str], AlgbwBySize] = {}
    for bench in benches:
        link, placement = bench.link, bench.placement
        measured = store.rows(Q.LINK_ALGBW, sweep_id=sweep_id, link=link, placement=placement)
        if measured:  # a resumed sweep measured it already
            algbw_by_link[(link, placement)] = {
                (r["op"], r["msg_bytes"]): r["algbw_gbps"] for r in measured
            }
            continue
        ui.linkbench_started(link, placement)
        result = execute_run(bench.launch)
        world_size = bench.launch.world_size
        with store.transaction():
            store.insert(
                "link_bench", rows.linkbench_rows(sweep_id, link, placement, world_size, result)
            )
        measured = store.rows(Q.LINK_ALGBW, sweep_id=sweep_id, link=link, placement=placement)
        algbw_by_link[(link, placement)] = {
            (r["op"], r["msg_bytes"]): r["algbw_gbps"] for r in measured
        }
        ui.linkbench_finished(link, placement, result.error)
    return algbw_by_link


def refresh_all_stats(
    store: TableStore, spec: SweepSpec, sweep_id: str, planned: Sequence[PlannedRun] | None = None
) -> None:
    """Every variant group's figures (a resumed sweep: runs may have been committed by another
    command from the spool, without their statistics); the groups of ``planned`` (default: the
    spec's whole plan, ``planner.plan_runs``)."""
    seen = set()
    for p in plan_runs(spec) if planned is None else planned:
        key = tuple(getattr(p.variant, k) for k in stats.GROUP_KEY)
        if key not in seen:
            seen.add(key)
            refresh_stats(store, spec, sweep_id, p.variant)
            refresh_link_model(store, spec, sweep_id, p.variant)


def refresh_stats(store: TableStore, spec: SweepSpec, sweep_id: str, v: Variant) -> None:
    """Recompute the figures of the run's variant group (its variant on every link, and their
    slowdowns), from the stored runs of that group only: the cost does not grow with the sweep."""
    group = {k: getattr(v, k) for k in stats.GROUP_KEY}
    runs = store.rows(Q.VARIANT_GROUP_RUNS, sweep_id=sweep_id, **group)
    variant_rows, sens_rows = stats.variant_and_sensitivity_rows(
        sweep_id, runs, spec.baseline, spec.seed
    )
    with store.transaction():
        store.delete("variant_stats", {"sweep_id": sweep_id, **group})
        store.insert("variant_stats", variant_rows)
        store.delete("sensitivity_stats", {"sweep_id": sweep_id, **group})
        store.insert("sensitivity_stats", sens_rows)


def refresh_link_model(store: TableStore, spec: SweepSpec, sweep_id: str, v: Variant) -> None:
    """Refit the link model of the run's variant group (``link_model``, one row) and its
    leave-one-link-out check (``link_model_check``) from that group's stored runs only."""
    group = {k: getattr(v, k) for k in stats.GROUP_KEY}
    runs = store.rows(Q.VARIANT_GROUP_RUNS, sweep_id=sweep_id, **group)
    model_rows, check_rows = linkmodel.link_model_rows(sweep_id, runs, spec.seed)
    with store.transaction():
        store.delete("link_model", {"sweep_id": sweep_id, **group})
        store.insert("link_model", model_rows)
        store.delete("link_model_check", {"sweep_id": sweep_id, **group})
        store.insert("link_model_check", check_rows)
