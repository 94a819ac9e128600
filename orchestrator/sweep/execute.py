"""The sweep loop: plan -> place and run -> rows -> store -> statistics -> progress.

``execute_sweep`` reads top to bottom; each step is one call into the module named for it:
``planner`` (what runs, with which config and env), ``raycluster.runs`` and
``raycluster.launchers`` (Ray: place and run the ranks), ``rows`` (result -> table rows),
``longsweep`` (the run spooled, then committed in one transaction while the database is briefly
open, so a crash, a stop signal or a busy database keeps every finished run; start, resume and
end of the sweep), ``stats`` (the figures of the run's variant group only), ``ui`` (progress). A
failed run is a row (status ``failed`` and the error text) and the sweep goes on.

May import: orchestrator.topology.discovery, exclusions, orchestrator.analysis.linkmodel, orchestrator.analysis.links, ledger, planner, orchestrator.raycluster, resume, rows, spec,
orchestrator.analysis.stats, orchestrator.store, orchestrator.emulated.describe.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from orchestrator.analysis import linkmodel, stats
from orchestrator.raycluster.launchers import start_launchers, stop_launchers
from orchestrator.raycluster.result import RunResult
from orchestrator.raycluster.runs import ProgressHandle, execute_run
from orchestrator.store import Q
from orchestrator.sweep import ledger, rows
from orchestrator.sweep.exclusions import excluded_node_ids
from orchestrator.sweep.planner import (
    PlannedRun,
    Variant,
    launcher_for,
    link_placements,
    linkbench_config,
    linkbench_id_for,
    new_sweep_id,
    plan_runs,
    run_config,
    run_env,
)
from orchestrator.sweep.resume import RunSlot, fresh_slots
from orchestrator.sweep.spec import SweepSpec
from orchestrator.topology.discovery import discover_nodes, links_by_node, node_rows


def execute_sweep(
    spec: SweepSpec,
    store,
    address: str,
    bundle: dict[str, float],
    ui,
    resume: tuple[str, list[RunSlot]] | None = None,
    excluded: Sequence[dict] = (),
) -> str:
    """Run every planned run in order, storing each as it ends. Returns the sweep id.

    ``store`` is a ``LiveStore`` (the database is open only while a run is committed).
    ``resume``: (sweep id, slots left) from ``ledger.resume_plan``; the sweep keeps its id.
    ``excluded``: the nodes no rank may use (``exclusions.resolve_exclusions``), stored in
    ``sweeps.excluded_nodes`` (on resume: replacing what the sweep stored before).
    ``ui`` receives progress callbacks (see orchestrator/ui.py). A stop signal or Ctrl-C
    (``stopping.SweepStopped``, a KeyboardInterrupt) marks the sweep ``interrupted`` and
    re-raises; finished runs are already stored.
    """
    if resume is None:
        sweep_id = new_sweep_id()
        slots = fresh_slots(sweep_id, plan_runs(spec))
        ledger.start_sweep(store, spec, sweep_id, address, len(slots), excluded)
    else:
        sweep_id, slots = resume
        ledger.restart_sweep(store, sweep_id, address, excluded)
    avoid = excluded_node_ids(excluded)
    launchers = None
    with sweep_life(store, sweep_id, ui):
        try:
            topo_links, gpu_uuids = discover_topology(store, sweep_id, avoid)
            record_links(store, spec, sweep_id, address)
            ui.sweep_started(spec, sweep_id, len(slots))
            prices = (
                run_linkbenches(spec, store, sweep_id, bundle, ui, avoid)
                if spec.grid.linkbench
                else {}
            )
            if resume is not None:
                refresh_all_stats(store, spec, sweep_id)  # runs another command committed
            board = None
            if slots and launcher_for(spec, bundle) == "fork":
                launchers = start_launchers()
            elif slots:
                board = ProgressHandle()
            for slot in slots:
                p, run_id = slot.planned, slot.run_id
                ui.run_started(p, run_id)
                started = ledger.now()
                env = run_env(spec, p.variant.link, run_id, int(bundle.get("CPU", 1)))
                result = run_one(spec, p, run_id, bundle, board, ui.tick, launchers, env, avoid)
                link_prices = prices.get((p.variant.link, p.variant.placement))
                # a row that cannot be built is a failed run, never a stopped sweep
                run_rows = rows.build_rows_safely(
                    spec, sweep_id, p, run_id, result, started, ledger.now(), topo_links,
                    link_prices, env, gpu_uuids,
                )  # fmt: skip
                diag = ledger.diagnostic_rows(run_id, result)
                if ledger.commit_run(store, slot, run_rows, diag):
                    group = (store, spec, sweep_id, p.variant)
                    ledger.refresh_stats_if_free(refresh_stats, *group)
                    ledger.refresh_stats_if_free(refresh_link_model, *group)
                ui.run_finished(p, run_rows.run)
        finally:
            stop_launchers(launchers)
    return sweep_id


def execute_linkbench(
    spec: SweepSpec, store, address: str, bundle: dict[str, float], ui, excluded=()
) -> str:
    """``linksweep linkbench``: a sweep with no training runs: the nodes' topology, each link
    described, then each link x placement measured (``link_bench``), off the ``excluded``
    nodes. Returns the sweep id."""
    sweep_id = new_sweep_id()
    ledger.start_sweep(store, spec, sweep_id, address, 0, excluded)
    avoid = excluded_node_ids(excluded)
    with sweep_life(store, sweep_id, ui):
        discover_topology(store, sweep_id, avoid)
        record_links(store, spec, sweep_id, address)
        ui.sweep_started(spec, sweep_id, 0)
        run_linkbenches(spec, store, sweep_id, bundle, ui, avoid)
    return sweep_id


@contextmanager
def sweep_life(store, sweep_id: str, ui) -> Iterator[None]:
    """The sweep's heartbeat while the block runs, then its final status: ``interrupted`` when a
    stop signal or Ctrl-C ends the block (re-raised), else ok or failed from its runs."""
    heartbeat = store.heartbeat(sweep_id)
    status = "ok"
    try:
        yield
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        heartbeat.stop()
        ui.sweep_finished(sweep_id, ledger.finish_sweep(store, sweep_id, status))


def run_one(
    spec: SweepSpec,
    p: PlannedRun,
    run_id: str,
    bundle,
    board,
    on_progress,
    launchers=None,
    env: dict[str, str] | None = None,
    avoid_nodes: Sequence[str] = (),
) -> RunResult:
    """One run (fresh actors, or forked by ``launchers``) with ``env`` (default: ``run_env``,
    the CPUs of ``bundle`` as threads), off ``avoid_nodes``; its NVMe swap folder is removed
    whatever happens."""
    cfg = run_config(spec, p.variant, run_id)
    if env is None:
        env = run_env(spec, p.variant.link, run_id, int(bundle.get("CPU", 1)))
    try:
        return execute_run(
            cfg,
            spec.world_size,
            p.variant.placement,
            env,
            bundle,
            spec.run_timeout_s,
            board=board,
            on_progress=on_progress,
            launchers=launchers,
            avoid_nodes=avoid_nodes,
        )
    finally:
        if cfg.nvme_dir:
            shutil.rmtree(cfg.nvme_dir, ignore_errors=True)


def discover_topology(store, sweep_id: str, avoid: Sequence[str] = ()) -> tuple[dict, dict]:
    """One probe per node but the ``avoid`` ones (excluded: never touched): nvidia-smi topo -m
    and NVML inventory -> nodes, gpus, gpu_links. Returns each node's links
    (``discovery.links_by_node``) and GPU UUIDs -> indices (``rows.gpu_uuids_by_node``), what a
    run's link class is read from."""
    tables = node_rows(sweep_id, discover_nodes(skip=avoid))
    with store.transaction():
        for table, table_rows in tables.items():
            store.delete(table, {"sweep_id": sweep_id})  # a resumed sweep: the cluster now
            store.insert(table, table_rows)
    statuses = sorted({r["nvml"] for r in tables["nodes"]})
    store.update("sweeps", {"sweep_id": sweep_id}, {"topology_status": "; ".join(statuses)})
    return links_by_node(tables["gpu_links"]), rows.gpu_uuids_by_node(tables["gpus"])


def record_links(store, spec: SweepSpec, sweep_id: str, address: str) -> None:
    """Each link's physical description (``link_descriptions``): for the emulated cluster the tc
    shape ``cluster up`` recorded, elsewhere what the link's env asks for and its rated rate
    from the inventory and topology ``discover_topology`` stored just before."""
    from orchestrator.analysis.links import describe_links
    from orchestrator.emulated.describe import recorded_link_shapes

    gpus = store.rows(Q.REPORT_GPUS, sweep_id=sweep_id)
    gpu_links = store.rows(Q.REPORT_GPU_LINKS, sweep_id=sweep_id)
    rows_ = describe_links(
        spec.links, recorded_link_shapes(address), sweep_id, gpus, gpu_links,
        list(spec.grid.placement),
    )  # fmt: skip
    with store.transaction():
        store.delete("link_descriptions", {"sweep_id": sweep_id})  # a resumed sweep: now
        store.insert("link_descriptions", rows_)


def run_linkbenches(
    spec: SweepSpec, store, sweep_id: str, bundle, ui, avoid_nodes: Sequence[str] = ()
) -> dict:
    """The link microbenchmark per (link, placement), off ``avoid_nodes``; returns each one's
    prices (op, size) -> algbw, read back from the ``link_bandwidth`` view (where its medians
    are computed)."""
    prices = {}
    for link, placement in link_placements(spec):
        measured = store.rows(Q.LINK_ALGBW, sweep_id=sweep_id, link=link, placement=placement)
        if measured:  # a resumed sweep measured it already
            prices[(link, placement)] = {
                (r["op"], r["msg_bytes"]): r["algbw_gbps"] for r in measured
            }
            continue
        run_id = linkbench_id_for(sweep_id, link, placement)
        ui.linkbench_started(link, placement)
        result = execute_run(
            linkbench_config(spec, run_id, gpu="GPU" in bundle),
            spec.world_size,
            placement,
            run_env(spec, link, run_id, int(bundle.get("CPU", 1))),
            bundle,
            spec.run_timeout_s,
            avoid_nodes=avoid_nodes,
        )
        with store.transaction():
            store.insert(
                "link_bench",
                rows.linkbench_rows(sweep_id, link, placement, spec.world_size, result),
            )
        measured = store.rows(Q.LINK_ALGBW, sweep_id=sweep_id, link=link, placement=placement)
        prices[(link, placement)] = {(r["op"], r["msg_bytes"]): r["algbw_gbps"] for r in measured}
        ui.linkbench_finished(link, placement, result.error)
    return prices


def refresh_all_stats(store, spec: SweepSpec, sweep_id: str) -> None:
    """Every variant group's figures (a resumed sweep: runs may have been committed by another
    command from the spool, without their statistics)."""
    seen = set()
    for p in plan_runs(spec):
        key = tuple(getattr(p.variant, k) for k in stats.GROUP_KEY)
        if key not in seen:
            seen.add(key)
            refresh_stats(store, spec, sweep_id, p.variant)
            refresh_link_model(store, spec, sweep_id, p.variant)


def refresh_stats(store, spec: SweepSpec, sweep_id: str, v: Variant) -> None:
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


def refresh_link_model(store, spec: SweepSpec, sweep_id: str, v: Variant) -> None:
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
