"""A sweep's launchers: one ``workloads.launcher.Launcher`` actor per node, started the first
time a run needs that node, whose fork server then forks the ranks of every run placed there
(``launcher: fork``; ``runs.execute_run`` with ``launchers``). Started once per sweep, so the
imports (torch, transformers, deepspeed) are paid once per node, not once per run.

May import: ray, workloads.launcher.
"""

from __future__ import annotations

import contextlib

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

LAUNCHER_START_TIMEOUT_S = 600.0  # a cold node imports torch, transformers, deepspeed once


class LauncherPool:
    """This sweep's launcher actors (``workloads.launcher.Launcher``), one per node, each started
    (and its fork server warmed: imports done) the first time a run needs that node."""

    def __init__(self) -> None:
        self.actors: dict[str, object] = {}

    def get(self, node_id: str):
        if node_id not in self.actors:
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

    def started(self, node_id: str):
        """The node's launcher when this sweep started one there, else None (never starts one)."""
        return self.actors.get(node_id)


def start_launchers() -> LauncherPool:
    """The sweep's launchers (started lazily, per node); :func:`stop_launchers` ends them."""
    return LauncherPool()


def stop_launchers(launchers: LauncherPool | None) -> None:
    """Kill the launcher actors: their fork servers exit, and any rank left dies with them."""
    for a in list(launchers.values()) if launchers is not None else []:
        with contextlib.suppress(Exception):
            ray.kill(a, no_restart=True)
