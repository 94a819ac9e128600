"""A sweep's launchers: one ``workloads.launcher.Launcher`` actor per node, started the first
time a run needs that node, whose fork server then forks the ranks of every run placed there
(``launcher: fork``; ``runs.execute_run`` with ``launchers``). Started once per node and kept
for the driver's next sweep, so the imports (torch, transformers, deepspeed: 4-6 s a node on 2
cores) are paid once per node per driver process, not once per run nor once per sweep: a
``selftest`` runs five sweeps, a Python caller or a test session many.

Between sweeps a kept launcher has no process left (:func:`stop_launchers` ends every run's
ranks and waits until they are gone) and holds no resource (``num_cpus=0``, no GPU; its fork
server never touched CUDA nor NVML). The GPUs its forked ranks use stay reserved by their run's
placement group (``runs._run_forked``), not by the launcher. A launcher serves CPU ranks or GPU
ranks (``accelerator``: its fork server preloads DeepSpeed for one or the other), and is kept
per (job, node, accelerator). Before a later sweep uses it, it must answer a fork (``warm``) within
:data:`REUSE_CHECK_TIMEOUT_S`, else it is killed and a new one started. Kept launchers are keyed
by Ray job and node: a new ``ray.init`` (another job, maybe another cluster) never sees the old
ones, and they die with the driver that owns them (Ray's fate sharing of actors).

May import: ray, workloads.launcher.
"""

from __future__ import annotations

import contextlib

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

LAUNCHER_START_TIMEOUT_S = 600.0  # a cold node imports torch, transformers, deepspeed once
REUSE_CHECK_TIMEOUT_S = 60.0
"""A kept launcher forks a child and hears back within this, or it is replaced."""
_kept: dict[tuple[str, str, str], object] = {}
"""Launchers kept after a sweep, by (Ray job id, node id, accelerator), for this driver's next
sweep."""


def _job_id() -> str:
    return ray.get_runtime_context().get_job_id()


def _spawn_launcher(node_id: str, accelerator: str):
    """A new launcher actor on the node, its fork server starting: (actor, its ``warm`` ref)."""
    from workloads.launcher import Launcher

    remote_cls = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=1024)(Launcher)
    actor = remote_cls.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
        runtime_env={"env_vars": {"RAY_worker_niceness": "0"}},
    ).remote(accelerator)
    return actor, actor.warm.remote()


def _kept_launcher(node_id: str, accelerator: str):
    """The launcher an earlier sweep of this driver kept on the node, if it still forks; None
    when there is none or it did not answer (then it is killed)."""
    actor = _kept.pop((_job_id(), node_id, accelerator), None)
    if actor is None:
        return None
    try:
        ray.get(actor.warm.remote(), timeout=REUSE_CHECK_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - dead node, dead actor, a hung fork server: start anew
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)
        return None
    return actor


class LauncherPool:
    """This sweep's launcher actors (``workloads.launcher.Launcher``), one per node, each got
    (kept from an earlier sweep, else started and its fork server warmed: imports done) the
    first time a run needs that node. ``accelerator``: ``cuda`` when the run's ranks get GPUs
    (``workloads.launcher.server_env``); a sweep's runs all ask for the same."""

    def __init__(self) -> None:
        self.actors: dict[str, object] = {}
        self.accelerators: dict[str, str] = {}

    def get(self, node_id: str, accelerator: str = "cpu"):
        """The node's launcher (:meth:`prepare` it first where it may not be started)."""
        self.prepare([node_id], accelerator)
        return self.actors[node_id]

    def prepare(self, node_ids, accelerator: str = "cpu") -> None:
        """Every node of ``node_ids`` gets its launcher: a kept one that still forks, else a
        new one, the new ones' fork servers importing in parallel (a cold node: seconds)."""
        for node_id in node_ids:
            if self.accelerators.get(node_id, accelerator) != accelerator:
                raise ValueError(
                    f"node {node_id[:12]}: this sweep's launcher there serves "
                    f"{self.accelerators[node_id]} ranks, asked for {accelerator}"
                )
        new = {}
        for node_id in dict.fromkeys(n for n in node_ids if n not in self.actors):
            kept = _kept_launcher(node_id, accelerator)
            if kept is not None:
                self.actors[node_id], self.accelerators[node_id] = kept, accelerator
            else:
                new[node_id] = _spawn_launcher(node_id, accelerator)
        if new:
            ray.get([ref for _, ref in new.values()], timeout=LAUNCHER_START_TIMEOUT_S)
        for node_id, (actor, _) in new.items():
            self.actors[node_id], self.accelerators[node_id] = actor, accelerator

    def values(self):
        return self.actors.values()

    def started(self, node_id: str):
        """The node's launcher when this sweep started one there, else None (never starts one)."""
        return self.actors.get(node_id)


def start_launchers() -> LauncherPool:
    """The sweep's launchers (started lazily, per node); :func:`stop_launchers` ends them."""
    return LauncherPool()


def stop_launchers(launchers: LauncherPool | None) -> None:
    """The sweep is over: every run's ranks on each launcher are ended and waited for, and the
    launcher is kept for this driver's next sweep. One that does not answer within 30 s is
    killed (its fork server exits, and any rank left dies with it), and so is one with a rank
    still there after ``kill_all``'s wait (a GPU process the driver did not let go)."""
    if launchers is None or not launchers.actors or not ray.is_initialized():
        return  # nothing started, or Ray already shut down (its actors went with it)
    job = _job_id()
    for node_id, actor in list(launchers.actors.items()):
        try:
            left = ray.get(actor.kill_all.remote(), timeout=60)
            if left:
                raise RuntimeError(f"rank processes {left} outlived SIGKILL")
        except Exception:  # noqa: BLE001 - dead, hung, or a rank that outlived its kill
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
            continue
        _kept[(job, node_id, launchers.accelerators[node_id])] = actor
