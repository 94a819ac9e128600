"""The driver's one Ray module: connect, list nodes, probe every node, place and run a run's
ranks, run pinned actors for the emulated cluster's check. No other driver module imports ray.

A run = a placement group of ``world_size`` bundles (GPU:1 where the cluster has GPUs, else
CPU:1), STRICT_PACK or STRICT_SPREAD, and fresh rank actors (``workloads.rank.Rank``) started
with the link's env as ``runtime_env`` (NCCL and gloo read env once per process). The rank gets
a ``workloads.contract.RunConfig`` and returns a ``RankRecord``: nothing untyped crosses. The
placement group and actors are removed after the run, also on failure or hang.

May import: ray, ``workloads`` (the contract and the code that runs on nodes), and the pure
driver modules (planner). Never the store.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from orchestrator import daemons
from orchestrator.errors import error_text, first_line, ranks_error_text
from orchestrator.planner import NodeCapacity, RunResult, place_ranks
from orchestrator.watchdog import MARKER_ENV, Watchdog
from workloads.contract import LinkbenchConfig, RankRecord, RunConfig

PLACEMENT_STRATEGY = {"pack": "STRICT_PACK", "spread": "STRICT_SPREAD"}
PLACEMENT_TIMEOUT_S = 120.0  # a group still unplaced by then will not be placed
ACTOR_READY_TIMEOUT_S = 300.0  # covers runtime_env set-up on a cold node
_watchdog: Watchdog | None = None  # the embedded cluster's (orchestrator/watchdog.py)
_connected_here = False  # connect() called ray.init (a caller's own connection is left alone)


class RunFailure(Exception):
    """A run could not complete; the message is stored as the run's error."""


class RunTimeout(RunFailure):
    """The run reached run_timeout_s: its ranks' stacks are captured before they are killed."""


FAILURE_GRACE_S = 5.0  # after a rank fails, how long the others get to report theirs
TICK_S = 2.0  # the live display's refresh while ranks run; a finished rank is seen at once
DIAG_TIMEOUT_S = 20.0  # capturing every rank's stack on its node, before the actors are killed


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


def connect(address: str | None) -> str:
    """Embedded Ray when no address and no RAY_ADDRESS; else join the cluster. Returns a label."""
    address = address or os.environ.get("RAY_ADDRESS")
    if ray.is_initialized():
        return address or "embedded"
    global _connected_here
    env = {"RAY_DISABLE_USAGE_STATS": "1"}
    os.environ.update(env)
    _connected_here = True
    if address:
        kwargs = {}
        if not os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR"):
            # Not inside `ray job submit` (which ships --working-dir itself): ship our code.
            import orchestrator
            import workloads

            kwargs["runtime_env"] = {
                "py_modules": [
                    os.path.dirname(orchestrator.__file__),
                    os.path.dirname(workloads.__file__),
                ]
            }
        ray.init(address=address, logging_level="ERROR", log_to_driver=False, **kwargs)
        return address
    global _watchdog
    _watchdog = Watchdog()  # a kill -9'd driver leaves no embedded Ray process behind
    os.environ[MARKER_ENV] = str(os.getpid())  # inherited by every process of the cluster
    os.environ.update(daemons.quiet_env(os.environ))
    ray.init(
        address="local",  # a new cluster, never one some `ray start` left in /tmp/ray
        num_cpus=os.cpu_count() or 1,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
    )
    with contextlib.suppress(Exception):  # private API: the marker is a help, not a need
        _watchdog.tell(ray._private.worker._global_node.get_session_dir_path())
    daemons.yield_quietly()
    return "embedded"


def disconnect() -> None:
    """Leave Ray; for the embedded cluster, stop it and wait until none of its processes is
    left (the watchdog reaps any straggler)."""
    global _watchdog, _connected_here
    if _connected_here and ray.is_initialized():
        ray.shutdown()
    _connected_here = False
    if _watchdog is not None:
        _watchdog.stop()
        _watchdog = None


def alive_nodes() -> list[dict]:
    """Every alive node: node_id, hostname, ip, cpus, gpus and its full resources."""
    return [
        {
            "node_id": n["NodeID"],
            "hostname": n.get("NodeManagerHostname"),
            "ip": n.get("NodeManagerAddress"),
            "cpus": float(n.get("Resources", {}).get("CPU", 0)),
            "gpus": float(n.get("Resources", {}).get("GPU", 0)),
            "resources": dict(n.get("Resources", {})),
        }
        for n in ray.nodes()
        if n.get("Alive")
    ]


def cluster_nodes() -> list[NodeCapacity]:
    return [
        NodeCapacity(node_id=n["node_id"], cpus=n["cpus"], gpus=n["gpus"]) for n in alive_nodes()
    ]


@dataclass(frozen=True)
class NodeAnswer:
    """One node's answer to :func:`run_on_every_node`: its result, or why there is none."""

    node: dict
    result: object | None = None
    error: str | None = None


def run_on_every_node(fn: Callable[[], object], timeout_s: float) -> list[NodeAnswer]:
    """Run ``fn`` once on every alive node, in parallel (a task pinned to the node, 0 CPUs).

    Never raises for a node: a task that raises, lands on a dead node or has not answered after
    ``timeout_s`` becomes an answer with ``error`` set (and is cancelled).
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = alive_nodes()
    remote_fn = ray.remote(num_cpus=0, max_retries=0)(fn)
    refs = [
        remote_fn.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=n["node_id"], soft=False)
        ).remote()
        for n in nodes
    ]
    done, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s) if refs else ([], [])
    done_set = set(done)
    answers = []
    for n, ref in zip(nodes, refs, strict=True):
        if ref in done_set:
            try:
                answers.append(NodeAnswer(n, result=ray.get(ref)))
            except Exception as exc:  # noqa: BLE001 - a failed probe is an answer, not a crash
                answers.append(NodeAnswer(n, error=first_line(exc)))
        else:
            with contextlib.suppress(Exception):  # already finished or gone: nothing to stop
                ray.cancel(ref, force=True)
            answers.append(
                NodeAnswer(
                    n,
                    error=f"no answer within {timeout_s:.0f} s (node busy, hung driver, or "
                    "runtime_env still installing)",
                )
            )
    return answers


def run_pinned_actors(
    cls: type,
    pins: list[dict[str, float]],
    env: dict[str, str],
    args: list[tuple],
    timeout_s: float,
) -> list:
    """One fresh actor of ``cls`` per entry of ``pins`` (custom resources that pin it to a node),
    started with ``env``; calls ``run(*args[i])`` on actor i and returns the results in order.

    Raises TimeoutError when they have not all finished after ``timeout_s``; actors are killed in
    every case.
    """
    remote_cls = ray.remote(num_cpus=0, max_restarts=0)(cls)
    actors = [
        remote_cls.options(resources=dict(pin), runtime_env={"env_vars": dict(env)}).remote()
        for pin in pins
    ]
    try:
        refs = [a.run.remote(*a_args) for a, a_args in zip(actors, args, strict=True)]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        if len(ready) != len(refs):
            raise TimeoutError(f"{len(refs) - len(ready)} of {len(refs)} actors unfinished")
        return ray.get(refs)
    finally:
        for a in actors:
            ray.kill(a)


def execute_run(
    run_cfg: RunConfig | LinkbenchConfig,
    world_size: int,
    placement: str,
    env: dict[str, str],
    bundle: dict[str, float],
    timeout_s: float,
    board: ProgressHandle | None = None,
    on_progress: Callable[[dict], None] | None = None,
    launchers: LauncherPool | None = None,
) -> RunResult:
    """Place, start, run and clean up one run. Never raises for run-level failures.

    ``launchers`` (node id -> launcher actor, :func:`start_launchers`): the ranks are forked by
    the launcher of the node their bundle landed on instead of starting as fresh actors.
    ``on_progress`` gets rank 0's latest report every ``TICK_S``: from ``board`` (fresh
    actors) or from rank 0's launcher (forked ranks)."""
    from workloads.rank import Rank

    result = RunResult(launcher="fork" if launchers is not None else "actors")
    if _watchdog is not None:  # the embedded cluster: its agents may have started since
        daemons.yield_quietly()
    t_placement = time.perf_counter()
    pg = placement_group([dict(bundle)] * world_size, strategy=PLACEMENT_STRATEGY[placement])
    actors = []
    try:
        placed = pg.wait(timeout_seconds=PLACEMENT_TIMEOUT_S)
        result.driver_phases["placement"] = time.perf_counter() - t_placement
        if not placed:
            raise RunFailure(
                f"placement group {PLACEMENT_STRATEGY[placement]} of {world_size} x {bundle} "
                f"could not be placed within {PLACEMENT_TIMEOUT_S:.0f} s (resources busy or "
                "not present in the cluster)"
            )
        if launchers is not None:
            result.rank_records = _run_forked(
                pg, launchers, run_cfg, env, timeout_s, on_progress, result
            )
            return result
        gpu = bundle.get("GPU", 0)
        rank_actor = ray.remote(Rank)
        result.actors_created_wall_s = time.time()
        for i in range(world_size):
            actors.append(
                rank_actor.options(
                    num_cpus=bundle.get("CPU", 0),
                    num_gpus=gpu,
                    max_restarts=0,  # a restarted rank would break the process group
                    max_task_retries=0,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        pg, placement_group_bundle_index=i
                    ),
                    runtime_env={"env_vars": dict(env)},
                ).remote()
            )
        infos = ray.get([a.node_info.remote() for a in actors], timeout=ACTOR_READY_TIMEOUT_S)
        result.placements = place_ranks(infos)
        master_addr = infos[0].ip
        master_port = ray.get(actors[0].free_port.remote(), timeout=60)
        refs = [
            a.run.remote(
                run_cfg,
                p.rank,
                world_size,
                p.local_rank,
                master_addr,
                master_port,
                list(p.visible_gpus) if p.visible_gpus else None,
                board.actor if board is not None else None,
            )
            for a, p in zip(actors, result.placements, strict=True)
        ]
        poll = board.poll if board is not None else None
        result.rank_records = _wait_all(refs, timeout_s, _ticker(on_progress, poll))
    except RunTimeout as exc:
        result.error = str(exc)
        result.diagnostics = capture_diagnostics(run_cfg.run_id, result.placements)
    except RunFailure as exc:
        result.error = str(exc)
    except Exception as exc:  # noqa: BLE001 - RayActorError, RayTaskError, GetTimeoutError...
        result.error = error_text(exc)
    finally:
        t_teardown = time.perf_counter()
        if launchers is not None:
            _kill_forked(launchers, run_cfg.run_id)
        for a in actors:
            ray.kill(a, no_restart=True)
        remove_placement_group(pg)
        result.driver_phases["teardown"] = time.perf_counter() - t_teardown
    return result


LAUNCHER_START_TIMEOUT_S = 600.0  # a cold node imports torch, transformers, deepspeed once


class LauncherPool:
    """This sweep's launcher actors (``workloads.launcher.Launcher``), one per node, each started
    (and its fork server warmed: imports done) the first time a run needs that node."""

    def __init__(self) -> None:
        self.actors: dict[str, object] = {}

    def get(self, node_id: str):
        if node_id not in self.actors:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            from workloads.launcher import Launcher

            remote_cls = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=1024)(Launcher)
            actor = remote_cls.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
                runtime_env={"env_vars": {"RAY_worker_niceness": "0"}},
            ).remote()
            self.actors[node_id] = actor
            ray.get(actor.warm.remote(), timeout=LAUNCHER_START_TIMEOUT_S)
        return self.actors[node_id]

    def values(self):
        return self.actors.values()


def start_launchers() -> LauncherPool:
    """The sweep's launchers (started lazily, per node); :func:`stop_launchers` ends them."""
    return LauncherPool()


def stop_launchers(launchers: LauncherPool | None) -> None:
    """Kill the launcher actors: their fork servers exit, and any rank left dies with them."""
    for a in list(launchers.values()) if launchers is not None else []:
        with contextlib.suppress(Exception):
            ray.kill(a, no_restart=True)


def _run_forked(
    pg, launchers: LauncherPool, run_cfg, env, timeout_s, on_progress, result
) -> list[RankRecord]:
    """The ranks of a placed run, each forked by the launcher of its bundle's node."""
    from ray.util.placement_group import placement_group_table

    world_size = len(pg.bundle_specs)
    by_bundle = placement_group_table(pg)["bundles_to_node_id"]
    nodes = [by_bundle[i] for i in range(world_size)]
    result.actors_created_wall_s = time.time()
    infos = {n: launchers.get(n).node_info.remote() for n in set(nodes)}
    infos = dict(zip(infos, ray.get(list(infos.values()), timeout=60), strict=True))
    result.placements = place_ranks([infos[n] for n in nodes])
    master_addr = infos[nodes[0]].ip
    master_port = ray.get(launchers.get(nodes[0]).free_port.remote(), timeout=60)
    refs = [
        launchers.get(nodes[p.rank]).run_rank.remote(
            dict(env), run_cfg, p.rank, world_size, p.local_rank, master_addr, master_port, None
        )
        for p in result.placements
    ]
    rank0 = launchers.get(nodes[0])
    poll = lambda: _progress_report(rank0.progress.remote(run_cfg.run_id))  # noqa: E731
    return _wait_all(refs, timeout_s, _ticker(on_progress, poll))


def _kill_forked(launchers: LauncherPool, run_id: str) -> None:
    """End whatever is left of a run's forked ranks (after a failure or a timeout)."""
    refs = [a.kill_run.remote(run_id) for a in launchers.values()]
    with contextlib.suppress(Exception):
        ray.get(refs, timeout=30)


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
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

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


def gcs_nodes(address: str, timeout_s: float = 5.0) -> list[dict] | None:
    """Nodes the GCS at ``address`` (host:port) knows, without ``ray.init``; None when it cannot
    be reached. Used while a cluster is coming up (the emulated cluster's ``up`` and ``status``).
    """
    import socket

    host, port = address.rsplit(":", 1)
    try:
        # GcsClient waits ~40 s for an unreachable GCS; a plain connect fails fast.
        with socket.create_connection((host, int(port)), timeout=1.0):
            pass
    except OSError:
        return None
    try:
        from ray._raylet import GcsClient  # private, but the only client that needs no
        from ray.core.generated.gcs_pb2 import GcsNodeInfo  # ray.init(); Ray 2.60

        infos = GcsClient(address=address).get_all_node_info(timeout=timeout_s)
    except Exception:  # noqa: BLE001 - unreachable or not ready yet: the caller polls again
        return None
    alive = GcsNodeInfo.GcsNodeState.ALIVE
    return [
        {
            "ip": info.node_manager_address,
            "alive": info.state == alive,
            "is_head": info.is_head_node,
            "resources": dict(info.resources_total),
        }
        for info in infos.values()
    ]
