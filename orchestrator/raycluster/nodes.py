"""The cluster's nodes: list them, run a function once on each, pin actors to them.

:func:`alive_nodes` and :func:`cluster_nodes` describe the nodes of the connected cluster;
:func:`run_on_every_node` runs a probe on each (``discovery.discover_nodes``); a node that fails
or does not answer becomes a :class:`NodeAnswer` with ``error`` set, never an exception.
:func:`run_pinned_actors` runs the emulated cluster's link check; :func:`gcs_nodes` asks a GCS
that no ``ray.init`` has joined (the emulated cluster coming up).

May import: reach, orchestrator.errors, orchestrator.sweep.planner, ray.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection
from dataclasses import dataclass

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from orchestrator.errors import first_line
from orchestrator.raycluster.reach import split_address, tcp_probe
from orchestrator.sweep.planner import NodeCapacity


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


def run_on_every_node(
    fn: Callable[..., object],
    timeout_s: float,
    skip: Collection[str] = (),
    args: tuple = (),
    only: Collection[str] | None = None,
) -> list[NodeAnswer]:
    """Run ``fn(*args)`` once on every alive node but those in ``skip`` (node ids), or only on
    those in ``only`` when given, in parallel (a task pinned to the node, 0 CPUs).

    Never raises for a node: a task that raises, lands on a dead node or has not answered after
    ``timeout_s`` becomes an answer with ``error`` set (and is cancelled).
    """
    nodes = [
        n
        for n in alive_nodes()
        if n["node_id"] not in skip and (only is None or n["node_id"] in only)
    ]
    remote_fn = ray.remote(num_cpus=0, max_retries=0)(fn)
    refs = [
        remote_fn.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=n["node_id"], soft=False)
        ).remote(*args)
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


def gcs_nodes(address: str, timeout_s: float = 5.0) -> list[dict] | None:
    """Nodes the GCS at ``address`` (host:port) knows, without ``ray.init``; None when it cannot
    be reached. Used while a cluster is coming up (the emulated cluster's ``up`` and ``status``).
    """
    hp = split_address(address)
    # GcsClient waits ~40 s for an unreachable GCS; a plain connect fails fast.
    if hp is None or tcp_probe(*hp, timeout_s=1.0) is not None:
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
