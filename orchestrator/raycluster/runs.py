"""One run, start to end: place its ranks, start them, wait for their records, clean up.

A run = a placement group of ``world_size`` bundles (a GPU and its CPUs where the cluster has
GPUs, else CPU:1; ``planner.rank_resources``), STRICT_PACK or STRICT_SPREAD, and its ranks:
fresh rank actors (``workloads.rank.Rank``) started with the link's env as ``runtime_env`` (NCCL
and gloo read env once per process), or processes forked by the node's launcher
(``launchers.py``, ``launcher: fork``) with that env; ``{rank}`` in it is filled in per rank.
A rank gets a ``workloads.contract.RunConfig`` and returns a ``RankRecord``: nothing untyped
crosses. The placement group and the ranks are removed after the run, also on failure or hang
(a hang's stacks are captured first: :func:`capture_diagnostics`), and every node the run used
gives back the NCCL logs no rank returned and loses the run's /tmp files
(:func:`collect_leftovers`). Rank 0's progress reaches the live display through a
:class:`ProgressBoard` actor (fresh actors) or its launcher (forked ranks). A sweep's excluded
nodes (``orchestrator/sweep/exclusions.py``) are kept off by the group's bundle label selector, so
no bundle, and no rank, lands there.

May import: launchers, result, session, orchestrator.errors, orchestrator.sweep.exclusions,
orchestrator.sweep.planner, ray, workloads.contract, workloads.diag, workloads.nccl_files,
workloads.rank.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

from orchestrator.errors import error_text, first_line, ranks_error_text
from orchestrator.raycluster import session
from orchestrator.raycluster.result import RunResult
from orchestrator.sweep.exclusions import label_selector
from orchestrator.sweep.planner import Launch, place_ranks, rank_env_for
from workloads.contract import RankRecord

if TYPE_CHECKING:
    from orchestrator.raycluster.launchers import LauncherPool

PLACEMENT_STRATEGY = {"pack": "STRICT_PACK", "spread": "STRICT_SPREAD"}
PLACEMENT_TIMEOUT_S = 120.0  # a group still unplaced by then will not be placed
ACTOR_READY_TIMEOUT_S = 300.0  # covers runtime_env set-up on a cold node
FAILURE_GRACE_S = 5.0  # after a rank fails, how long the others get to report theirs
TICK_S = 2.0  # the live display's refresh while ranks run; a finished rank is seen at once
DIAG_TIMEOUT_S = 20.0  # capturing every rank's stack on its node, before the actors are killed
LEFTOVERS_TIMEOUT_S = 20.0  # reading a run's NCCL logs and removing its /tmp files, per node


class RunFailure(Exception):
    """A run could not complete; the message is stored as the run's error."""


class RunTimeout(RunFailure):
    """The run reached run_timeout_s: its ranks' stacks are captured before they are killed."""


@ray.remote(num_cpus=0)
class ProgressBoard:
    """Rank 0 reports (run_id, step, total, warmup) here; the driver polls it for display."""

    def __init__(self) -> None:
        self.state: dict = {}

    def update(self, run_id: str, step: int, total: int, warmup: bool) -> None:
        self.state = {"run_id": run_id, "step": step, "total": total, "warmup": warmup}

    def get(self) -> dict:
        return self.state


class ProgressHandle:
    """The driver's end of a :class:`ProgressBoard`: ``actor`` goes to the ranks. Only for runs
    of fresh actors: forked ranks report to their launcher (no idle actor beside the ranks)."""

    def __init__(self) -> None:
        self.actor = ProgressBoard.remote()

    def poll(self) -> dict:
        """The latest progress report, without waiting long for it."""
        return _progress_report(self.actor.get.remote())


def _progress_report(ref) -> dict:
    try:
        return ray.get(ref, timeout=2)
    except Exception:  # noqa: BLE001 - progress display must never fail a run
        return {}


def _ticker(on_progress, poll) -> Callable[[], None] | None:
    """What :func:`_wait_all` calls every ``TICK_S``: the latest report to ``on_progress``."""
    return None if on_progress is None or poll is None else lambda: on_progress(poll())


@dataclass(frozen=True)
class RunContext:
    """How a sweep's runs start their ranks, the same for every run: forked by each node's
    launcher (``launchers``, ``launchers.start_launchers``), else as fresh actors reporting to
    ``progress_handle`` (the driver's end of their :class:`ProgressBoard`); ``on_progress``
    gets rank 0's latest report every ``TICK_S``. A run without one
    (the link microbenchmark) starts fresh actors and shows no progress."""

    launchers: LauncherPool | None = None
    progress_handle: ProgressHandle | None = None
    on_progress: Callable[[dict], None] | None = None


@contextlib.contextmanager
def sweep_context(
    launcher: str | None, on_progress: Callable[[dict], None]
) -> Iterator[RunContext]:
    """The sweep's :class:`RunContext` for ``launcher`` (``planner.launcher_for``): ``fork``
    starts the launchers (each node's on its first run) and stops them when the block ends,
    whatever happens; ``actors`` a progress board; None (no run) neither."""
    from orchestrator.raycluster.launchers import start_launchers, stop_launchers

    launchers = start_launchers() if launcher == "fork" else None
    progress_handle = ProgressHandle() if launcher == "actors" else None
    try:
        yield RunContext(launchers, progress_handle, on_progress)
    finally:
        stop_launchers(launchers)


def execute_run(launch: Launch, context: RunContext = RunContext()) -> RunResult:
    """Place, start, run and clean up one run (``launch``: its config, env, world size,
    placement, bundle, timeout). Never raises for run-level failures.

    ``context.launchers``: the ranks are forked by the launcher of the node their bundle landed
    on instead of starting as fresh actors.
    ``launch.excluded_ids``: node ids no bundle may land on (the sweep's excluded nodes), through
    Ray's ``ray.io/node-id`` label (``exclusions.label_selector``); forked ranks follow their
    bundles."""
    result = RunResult(launcher="fork" if context.launchers is not None else "actors")
    session.quiet_daemons()  # the embedded cluster: its agents may have started since
    t_placement = time.perf_counter()
    pg = _placement_group(launch)
    actors: list = []  # fresh rank actors, killed at the end whatever happens
    try:
        placed = pg.wait(timeout_seconds=PLACEMENT_TIMEOUT_S)
        result.driver_phases["placement"] = time.perf_counter() - t_placement
        if not placed:
            raise RunFailure(_unplaced(launch))
        if context.launchers is not None:
            result.rank_records = _run_forked(pg, launch, context, result)
        else:
            result.rank_records = _run_actors(pg, launch, context, result, actors)
    except RunTimeout as exc:
        result.error = str(exc)
        result.diagnostics = capture_diagnostics(launch.run_id, result.placements)
    except RunFailure as exc:
        result.error = str(exc)
    except Exception as exc:  # noqa: BLE001 - RayActorError, RayTaskError, GetTimeoutError...
        result.error = error_text(exc)
    finally:
        _tear_down(pg, launch.run_id, context.launchers, actors, result)
    return result


def _placement_group(launch: Launch):
    """The run's placement group: a bundle per rank (per ``ranks_per_bundle`` ranks, spread
    ``ranks_per_node``), packed or spread, off the excluded nodes (asked for;
    :func:`execute_run` waits for it)."""
    selector = label_selector(launch.excluded_ids)
    bundles = launch.bundles
    n = len(bundles)
    return placement_group(
        [dict(b) for b in bundles],
        strategy=PLACEMENT_STRATEGY[launch.placement],
        bundle_label_selector=[selector] * n if selector else None,
    )


def _unplaced(launch: Launch) -> str:
    excluded = f", {len(launch.excluded_ids)} node(s) excluded" if launch.excluded_ids else ""
    return (
        f"placement group {PLACEMENT_STRATEGY[launch.placement]} of {len(launch.bundles)} x "
        f"{launch.bundles[0]} could not be placed within {PLACEMENT_TIMEOUT_S:.0f} s (resources "
        f"busy or not present in the cluster{excluded})"
    )


def _run_actors(
    pg, launch: Launch, context: RunContext, result: RunResult, actors: list
) -> list[RankRecord]:
    """The ranks of a placed run as fresh actors, one per bundle (appended to ``actors`` as
    they are made, so the caller kills them whatever happens), reporting progress to
    ``context.progress_handle``."""
    from workloads.rank import Rank

    bundle, world_size, progress_handle = launch.bundle, launch.world_size, context.progress_handle
    rank_actor = ray.remote(Rank)
    result.actors_created_wall_s = time.time()
    for i in range(world_size):
        actors.append(
            rank_actor.options(
                num_cpus=bundle.get("CPU", 0),
                num_gpus=bundle.get("GPU", 0),
                max_restarts=0,  # a restarted rank would break the process group
                max_task_retries=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    pg, placement_group_bundle_index=i // launch.ranks_per_bundle
                ),
                runtime_env={"env_vars": rank_env_for(launch.env, i)},  # {rank} filled in
            ).remote()
        )
    infos = ray.get([a.node_info.remote() for a in actors], timeout=ACTOR_READY_TIMEOUT_S)
    result.placements = place_ranks(infos)
    master_addr = infos[0].ip
    master_port = ray.get(actors[0].free_port.remote(), timeout=60)
    refs = [
        a.run.remote(
            launch.config,
            p.rank,
            world_size,
            p.local_rank,
            master_addr,
            master_port,
            list(p.visible_gpus) if p.visible_gpus else None,
            progress_handle.actor if progress_handle is not None else None,
        )
        for a, p in zip(actors, result.placements, strict=True)
    ]
    poll = progress_handle.poll if progress_handle is not None else None
    return _wait_all(refs, launch.timeout_s, _ticker(context.on_progress, poll))


def _tear_down(
    pg, run_id: str, launchers: LauncherPool | None, actors: list, result: RunResult
) -> None:
    """After every run, also a failed or hung one: its ranks ended (forked ones by their
    launchers, actors killed), the NCCL logs and /tmp files of its nodes collected
    (:func:`collect_leftovers`), its placement group removed; the time it took is the run's
    ``teardown`` phase."""
    t_teardown = time.perf_counter()
    if launchers is not None:
        _kill_forked(launchers, run_id, result)
    for a in actors:
        ray.kill(a, no_restart=True)
    collect_leftovers(run_id, _run_nodes(pg, result.placements), result, launchers)
    remove_placement_group(pg)
    result.driver_phases["teardown"] = time.perf_counter() - t_teardown


def _run_forked(pg, launch: Launch, context: RunContext, result: RunResult) -> list[RankRecord]:
    """The ranks of a placed run, each forked by the launcher of its bundle's node, with the
    GPU ids Ray fixed for its bundle (:func:`bundle_gpu_ids`; every GPU id of the run's ranks
    on its node, as :func:`_run_actors` gives them)."""
    from ray.util.placement_group import placement_group_table

    launchers, run_cfg, env = context.launchers, launch.config, launch.env
    world_size = launch.world_size
    accelerator = "cuda" if launch.bundle.get("GPU") else "cpu"
    by_bundle = placement_group_table(pg)["bundles_to_node_id"]
    nodes = [by_bundle[i // launch.ranks_per_bundle] for i in range(world_size)]
    # a node's launcher starts once per driver (its imports), in parallel with the others',
    # before this run's ranks are asked for: not a run's start-up, as imports are not a
    # forked rank's (the first run's wall still holds it)
    launchers.prepare(nodes, accelerator)
    result.actors_created_wall_s = time.time()
    infos = {n: launchers.get(n, accelerator).node_info.remote() for n in set(nodes)}
    ids = bundle_gpu_ids(pg, launch)
    infos = dict(zip(infos, ray.get(list(infos.values()), timeout=60), strict=True))
    per_rank = launch.bundle.get("GPU", 0.0)
    result.placements = place_ranks(
        [
            replace(infos[n], gpu_ids=rank_gpu_ids(ids, r, launch.ranks_per_bundle, per_rank))
            for r, n in enumerate(nodes)
        ]
    )
    master_addr = infos[nodes[0]].ip
    master_port = ray.get(launchers.get(nodes[0], accelerator).free_port.remote(), timeout=60)
    refs = [
        launchers.get(nodes[p.rank], accelerator).run_rank.remote(
            rank_env_for(env, p.rank),
            run_cfg,
            p.rank,
            world_size,
            p.local_rank,
            master_addr,
            master_port,
            list(p.visible_gpus) if p.visible_gpus else None,  # None: a CPU rank, GPUs hidden
        )
        for p in result.placements
    ]
    rank0 = launchers.get(nodes[0], accelerator)
    poll = lambda: _progress_report(rank0.progress.remote(run_cfg.run_id))  # noqa: E731
    return _wait_all(refs, launch.timeout_s, _ticker(context.on_progress, poll))


def bundle_gpu_ids(pg, launch: Launch) -> list[tuple[str, ...]]:
    """Per bundle of the run's placement group, the GPU ids Ray fixed for it; ``()`` each for
    CPU bundles (no call). A forked rank is no Ray worker, so Ray cannot tell it its GPUs: a
    zero-CPU task scheduled into each bundle with the bundle's GPUs asks Ray
    (``workloads.rank.assigned_gpu_ids``) and ends.

    Why the ids stay the rank's after that task ended: a bundle's GPU instances are chosen when
    the group is prepared on its node and fixed at commit (Ray's raylet,
    ``placement_group_resource_manager.cc`` ``CommitBundle``: the bundle's ``GPU_group_*``
    resources get exactly the instances prepared for it), and they return to the node only in
    ``ReturnBundle``, when the group is removed. Any task or actor in that bundle gets the same
    ids; nothing else can take them while the group lives. :func:`_tear_down` removes the
    group only after the launchers' ``kill_run`` has waited for the ranks to be gone. A holder
    actor living as long as the rank would reserve nothing more, and cost an actor start per
    run. ``num_gpus`` goes through ``.options``: the worker stays for the next run's task
    (``@ray.remote(num_gpus=...)`` would make it single-use)."""
    n = len(launch.bundles)
    gpus = launch.bundles[0].get("GPU", 0.0) if n else 0.0
    if not gpus:
        return [()] * n
    from workloads.rank import assigned_gpu_ids

    task = ray.remote(num_cpus=0, max_retries=0)(assigned_gpu_ids)
    refs = [
        task.options(
            num_gpus=gpus,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=b
            ),
        ).remote()
        for b in range(n)
    ]
    return ray.get(refs, timeout=ACTOR_READY_TIMEOUT_S)


def rank_gpu_ids(
    bundle_ids: list[tuple[str, ...]], rank: int, ranks_per_bundle: int, gpus_per_rank: float
) -> tuple[str, ...]:
    """Rank ``rank``'s GPU ids among its bundle's (``bundle_gpu_ids``): its share in order when
    each rank has whole GPUs; the bundle's GPU when ranks share one (``ranks_per_gpu``). Pure."""
    ids = tuple(bundle_ids[rank // ranks_per_bundle]) if bundle_ids else ()
    if gpus_per_rank < 1 or not ids:
        return ids
    k, j = round(gpus_per_rank), rank % ranks_per_bundle
    return ids[j * k : (j + 1) * k]


def _kill_forked(launchers: LauncherPool, run_id: str, result: RunResult) -> None:
    """End whatever is left of a run's forked ranks (after a failure or a timeout) and wait
    until they are gone; a rank still there after the launcher's wait is noted in
    ``result.cleanup_errors`` (its GPU may still be busy when the group is removed)."""
    refs = [a.kill_run.remote(run_id) for a in launchers.values()]
    try:
        left = [pid for pids in ray.get(refs, timeout=60) for pid in pids]
    except Exception as exc:  # noqa: BLE001 - a launcher that does not answer: noted
        result.cleanup_errors.append(f"ending the forked ranks: {first_line(exc)}")
        return
    if left:
        result.cleanup_errors.append(f"forked rank processes {left} outlived SIGKILL")


def _wait_all(refs: list, timeout_s: float, on_tick: Callable[[], None] | None) -> list[RankRecord]:
    """Collect every rank's result (``refs`` in rank order); the deadline or a failure ends the
    run. After the first failure the other ranks get ``FAILURE_GRACE_S`` to report theirs, so
    the error names every failed rank: the one that failed first (the cause) is often not the
    one whose error arrives first (a peer's "connection closed")."""
    deadline = time.monotonic() + timeout_s
    pending = list(refs)
    results: dict = {}
    failures: dict = {}
    grace_end = float("inf")
    while pending:
        remaining = deadline - time.monotonic()
        if failures:
            remaining = min(remaining, grace_end - time.monotonic())
            if remaining <= 0:
                break
        elif remaining <= 0:
            raise RunTimeout(
                f"run timed out after {timeout_s:.0f} s (run_timeout_s) with "
                f"{len(pending)} of {len(refs)} ranks unfinished: a hang, e.g. a rank stuck in "
                "a collective; actors were killed"
            )
        done, pending = ray.wait(pending, num_returns=1, timeout=min(remaining, TICK_S))
        for ref in done:
            try:
                results[ref] = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - RayTaskError, RayActorError...
                if not failures:
                    grace_end = time.monotonic() + FAILURE_GRACE_S
                failures[refs.index(ref)] = exc
        if on_tick is not None:
            on_tick()
    if failures:
        raise RunFailure(ranks_error_text(failures, len(refs)))
    return sorted((results[r] for r in refs), key=lambda r: r.rank)


def capture_diagnostics(run_id: str, placements: list) -> list:
    """Every rank's stack (and NCCL trace), each read on the rank's own node by a pinned task
    (``workloads.diag.capture``); a rank whose node does not answer gets a row saying so."""
    from workloads.contract import RankDiagnostic
    from workloads.diag import capture

    remote_capture = ray.remote(num_cpus=0, max_retries=0)(capture)
    refs = [
        remote_capture.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=p.node_id, soft=False)
        ).remote(run_id, p.rank, p.pid)
        for p in placements
    ]
    out = []
    for p, ref in zip(placements, refs, strict=True):
        try:
            out.append(ray.get(ref, timeout=DIAG_TIMEOUT_S))
        except Exception as exc:  # noqa: BLE001 - the diagnosis must not stop the cleanup
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
            out.append(RankDiagnostic(rank=p.rank, pid=p.pid, error=first_line(exc)))
    return out


def _run_nodes(pg, placements: list) -> list[str]:
    """The node ids a run used: its ranks' (placements), else its placement group's bundles
    (a run that failed before its ranks reported where they ran); [] when neither is known."""
    nodes = [p.node_id for p in placements]
    if not nodes:
        from ray.util.placement_group import placement_group_table

        with contextlib.suppress(Exception):
            nodes = list(placement_group_table(pg)["bundles_to_node_id"].values())
    return sorted({n for n in nodes if n})


def collect_leftovers(
    run_id: str, node_ids: list[str], result: RunResult, launchers: LauncherPool | None = None
) -> None:
    """After every run, on each node it used (``workloads.nccl_files``): read the NCCL logs no
    rank returned into ``result.nccl_logs`` (a failed or hung run returns no record, so this is
    its only transport evidence) and remove the run's NCCL logs, flight-recorder dumps and
    pipes, stack and pid files. Runs after the ranks were killed, so no file is still being
    written. On a node with this sweep's launcher, the launcher does it (no worker to start: a
    pinned task cost 0.5-2 s a run); elsewhere a pinned task. A node that does not answer is
    noted in ``result.cleanup_errors``; it never fails the run."""
    from workloads.nccl_files import collect_run_files

    remote_collect = ray.remote(num_cpus=0, max_retries=0)(collect_run_files)
    refs = {}
    for n in node_ids:
        launcher = launchers.started(n) if launchers is not None else None
        if launcher is not None:
            refs[n] = launcher.collect_files.remote(run_id)
        else:
            refs[n] = remote_collect.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=n, soft=False)
            ).remote(run_id)
    for node, ref in refs.items():
        try:
            got = ray.get(ref, timeout=LEFTOVERS_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - a cleanup must not fail the run
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
            result.cleanup_errors.append(f"node {node[:12]}: {first_line(exc)}")
            continue
        result.nccl_logs.update({f"{got.hostname}:{p}": t for p, t in got.nccl_logs.items()})
        result.cleanup_errors.extend(f"{got.hostname}: {e}" for e in got.errors)
