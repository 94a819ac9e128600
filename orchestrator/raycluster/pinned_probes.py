"""The fleet check's Ray side: which nodes to check, and the probes pinned to them.

Every actor and task is pinned to its node (``NodeAffinitySchedulingStrategy(soft=False)``).
CPU ranks ask for 0 CPUs (a fleet check runs alone: a rank waiting for a CPU that another rank
of the check holds would deadlock it); GPU ranks ask for one GPU each, and choose their device
with ``workloads.device.choose_device``. What comes back is ``workloads.fleet_contract``'s
records; the measurements become ``fleet_rows.BenchResult`` here, with bandwidth from
``orchestrator.analysis.comm_model`` (the one place it is computed).

- :func:`fleet_nodes`: the alive nodes that can run something, and the others with why not.
- :class:`LinkProbes`: for one link env, one set of ``workloads.fleet_probe.FleetRank`` actors
  per node (NCCL reads its env once per process, so each link gets fresh actors), reused by
  :meth:`LinkProbes.intra` and :meth:`LinkProbes.round`. A group of ranks that fails or does not
  answer within ``timeout_s`` becomes a ``failed`` result, never an exception, and its nodes'
  actors are killed, to be restarted by the next call that needs them.
- :meth:`LinkProbes.compute`: the compute probe, on each node's first rank of the last link
  (torch is imported there already; a fresh worker per node cost 4-5 s of imports each).
- :func:`read_health`: one task per node, all at once.

May import: nodes, orchestrator.analysis.comm_model, orchestrator.errors, orchestrator.fleet.tables,
orchestrator.sweep.planner, workloads.fleet_contract,
workloads.fleet_probe, ray.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from orchestrator.analysis import comm_model
from orchestrator.errors import first_line
from orchestrator.fleet.tables import BenchResult
from orchestrator.raycluster.nodes import alive_nodes
from orchestrator.sweep.planner import link_env_defaults, rank_env_for
from workloads.fleet_contract import CollectiveTimes, ComputeRecord, HealthRecord
from workloads.fleet_probe import (
    FleetRank,
    max_over_ranks,
    median_s,
    node_health_task,
)

ONE_GPU = "one GPU: nothing to measure inside the node"
CPU_INTRA_RANKS = 2
"""Ranks of a CPU node's intra check: two processes, gloo over loopback."""


@dataclass(frozen=True)
class FleetNode:
    node_id: str
    ip: str
    hostname: str
    cpus: float
    gpus: float


def fleet_nodes() -> tuple[list[FleetNode], list[dict]]:
    """Alive nodes that can run something (cpus > 0 or gpus > 0), sorted by (ip, node_id); and
    the skipped ones as ``{node_id, ip, hostname, why}``."""
    nodes, skipped = [], []
    for n in alive_nodes():
        if n["cpus"] > 0 or n["gpus"] > 0:
            nodes.append(FleetNode(n["node_id"], n["ip"], n["hostname"], n["cpus"], n["gpus"]))
        else:
            skipped.append(
                {
                    "node_id": n["node_id"],
                    "ip": n["ip"],
                    "hostname": n["hostname"],
                    "why": "no CPUs and no GPUs in its Ray resources (e.g. the emulated "
                    "cluster's head): nothing of a sweep runs there",
                }
            )
    nodes.sort(key=lambda f: (f.ip, f.node_id))
    return nodes, skipped


def _size(msg_bytes: int | Mapping, key: object) -> int:
    """One size for every measurement, or the one a mapping gives ``key``."""
    if isinstance(msg_bytes, Mapping):
        if key not in msg_bytes:
            raise ValueError(f"msg_bytes: no size for {key!r}; the mapping must cover each one")
        return int(msg_bytes[key])
    return int(msg_bytes)


def _pin(node_id: str) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def _gpu_count(node: FleetNode) -> int:
    return int(node.gpus)


def rank_envs(nodes: list[FleetNode], env: dict[str, str]) -> dict[str, list[dict[str, str]]]:
    """The env of each rank process of a check, per node: one rank per GPU, else
    CPU_INTRA_RANKS gloo ranks. ``{rank}`` in a link value (a sweep's per-rank form,
    ``planner.rank_env_for``) becomes a number unique to each process: nodes in the order
    given, then the node's local ranks."""
    out: dict[str, list[dict[str, str]]] = {}
    first = 0
    for n in nodes:
        count = _gpu_count(n) or CPU_INTRA_RANKS
        out[n.node_id] = [rank_env_for(env, first + j) for j in range(count)]
        first += count
    return out


@dataclass
class _Group:
    """The ranks of one measurement: (node id, actor index on that node) per rank."""

    kind: str
    node_a: str
    node_b: str
    ranks: list[tuple[str, int]]
    use_gpu: bool
    loopback: bool
    msg_bytes: int
    refs: list = field(default_factory=list)
    answers: dict[int, CollectiveTimes] = field(default_factory=dict)
    error: str | None = None
    t0: float = 0.0
    wall_s: float = 0.0

    @property
    def node_ids(self) -> set[str]:
        return {n for n, _ in self.ranks}


class LinkProbes:
    """Pinned all_reduce ranks for one link env, reused across rounds; killed on exit."""

    def __init__(self, nodes: list[FleetNode], env: dict[str, str], timeout_s: float = 120.0):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self._nodes = {n.node_id: n for n in nodes}
        # what a sweep's ranks get over this link, unless the link sets it (one rule, planner's)
        self._env = {**link_env_defaults(env), **env}
        self._rank_envs = rank_envs(nodes, self._env)
        self.timeout_s = timeout_s
        self._actors: dict[str, list] = {}
        self._gpu_ids: dict[str, list[str]] = {}
        self._broken: dict[str, str] = {}
        self._remote = ray.remote(max_restarts=0)(FleetRank)

    def __enter__(self) -> LinkProbes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> dict[str, str]:
        """Start every node's ranks now (else the first measurement of a node starts them, and
        not in its ``wall_s``); returns {node_id: why} for the nodes whose ranks did not start.
        Their measurements fail with that reason, and each later call tries them again."""
        self._start(set(self._nodes))
        return dict(self._broken)

    def close(self) -> None:
        """Kill every rank (also on ``with`` exit)."""
        for node_id in list(self._actors):
            self._kill(node_id)

    # -- actors ----------------------------------------------------------------------------------
    def _kill(self, node_id: str) -> None:
        for actor in self._actors.pop(node_id, []):
            with contextlib.suppress(Exception):  # already dead: nothing to stop
                ray.kill(actor)
        self._gpu_ids.pop(node_id, None)

    def _start(self, node_ids: set[str]) -> None:
        """Actors for every node of ``node_ids`` that has none, ready (imports done); a node
        whose actors do not get ready within ``timeout_s`` is recorded in ``_broken``."""
        todo = sorted(n for n in node_ids if n not in self._actors)
        refs = {}
        for node_id in todo:
            self._broken.pop(node_id, None)
            n_gpus = _gpu_count(self._nodes[node_id])
            actors = [
                self._remote.options(
                    scheduling_strategy=_pin(node_id),
                    runtime_env={"env_vars": rank_env},
                    num_cpus=0,
                    **({"num_gpus": 1} if n_gpus else {}),
                ).remote()
                for rank_env in self._rank_envs[node_id]
            ]
            self._actors[node_id] = actors
            refs[node_id] = [a.ready.remote() for a in actors]
        flat = [r for rs in refs.values() for r in rs]
        if flat:
            ray.wait(flat, num_returns=len(flat), timeout=self.timeout_s)
        for node_id, rs in refs.items():
            try:
                infos = ray.get(rs, timeout=0)
            except Exception as exc:  # noqa: BLE001 - the node's failure is its results' error
                why = (
                    f"ranks not ready within {self.timeout_s:g} s"
                    if isinstance(exc, ray.exceptions.GetTimeoutError)
                    else first_line(exc)
                )
                self._broken[node_id] = f"actors on the node did not start: {why}"
                self._kill(node_id)
                continue
            self._gpu_ids[node_id] = [i["gpu_ids"][0] if i["gpu_ids"] else "" for i in infos]

    # -- measurements ----------------------------------------------------------------------------
    def _check(self, node_ids: list[str], sizes: list[int], iters: int, warmup: int) -> None:
        unknown = sorted(set(node_ids) - set(self._nodes))
        if unknown:
            raise ValueError(
                f"node ids {unknown} are not this LinkProbes' nodes {sorted(self._nodes)}"
            )
        for msg_bytes in sizes:
            if msg_bytes < 4 or msg_bytes & (msg_bytes - 1):
                raise ValueError(
                    f"msg_bytes must be a power of two >= 4 (float32 elements), got {msg_bytes}"
                )
        if iters < 1 or warmup < 0:
            raise ValueError(f"need iters >= 1 and warmup >= 0, got iters={iters}, warmup={warmup}")

    def intra(
        self,
        node_ids: list[str],
        msg_bytes: int | Mapping[str, int],
        iters: int = 5,
        warmup: int = 2,
    ) -> list[BenchResult]:
        """Each node measured alone, all given nodes at the same time (results in their order).
        GPU node with >= 2 GPUs: one NCCL rank per GPU; one GPU: skipped; CPU node: two gloo
        ranks over loopback. ``msg_bytes``: one size, or a size per node id."""
        size = {n: _size(msg_bytes, n) for n in node_ids}
        self._check(node_ids, list(size.values()), iters, warmup)
        if len(set(node_ids)) != len(node_ids):
            raise ValueError(f"node_ids lists a node twice: {node_ids}")
        groups: list[_Group | BenchResult] = []
        for node_id in node_ids:
            msg_bytes_n = size[node_id]
            n_gpus = _gpu_count(self._nodes[node_id])
            if n_gpus == 1:
                args = ("intra", node_id, node_id, 1, "nccl", msg_bytes_n, "skipped", ONE_GPU, 0.0)
                groups.append(BenchResult.unmeasured(*args))
                continue
            n = n_gpus or CPU_INTRA_RANKS
            groups.append(
                _Group(
                    "intra",
                    node_id,
                    node_id,
                    [(node_id, i) for i in range(n)],
                    use_gpu=n_gpus > 0,
                    loopback=n_gpus == 0,
                    msg_bytes=msg_bytes_n,
                )
            )
        return self._measure(groups, iters, warmup)

    def round(
        self,
        pairs: list[tuple[str, str]],
        msg_bytes: int | Mapping[tuple[str, str], int],
        iters: int = 5,
        warmup: int = 2,
    ) -> list[BenchResult]:
        """Every pair at the same time, one rank on each node (results in the pairs' order).
        NCCL when both nodes have GPUs (one GPU each), else gloo on CPU over the link's
        interface (its GLOO_SOCKET_IFNAME, else the one holding each node's Ray IP).
        ``msg_bytes``: one size, or a size per pair (as given in ``pairs``)."""
        flat = [n for p in pairs for n in p]
        size = {p: _size(msg_bytes, p) for p in pairs}
        self._check(flat, list(size.values()), iters, warmup)
        if len(set(flat)) != len(flat):
            raise ValueError(
                f"pairs {pairs}: a node is in two pairs of a round (or paired with itself)"
            )
        groups: list[_Group | BenchResult] = []
        for a, b in pairs:
            gpu = _gpu_count(self._nodes[a]) > 0 and _gpu_count(self._nodes[b]) > 0
            ranks = [(a, 0), (b, 0)]
            groups.append(_Group("inter", a, b, ranks, gpu, False, size[(a, b)]))
        return self._measure(groups, iters, warmup)

    def compute(
        self, node_ids: list[str], timeout_s: float = 300.0
    ) -> dict[str, ComputeRecord | str]:
        """The compute probe on each given node's first rank, all at once; per node id its
        record or the error text (ranks that did not start, a raise, no answer within
        ``timeout_s``). Run it after the link's measurements: the ranks are idle then."""
        self._check(node_ids, [], 1, 0)
        self._start(set(node_ids))
        out: dict[str, ComputeRecord | str] = {
            n: self._broken[n] for n in node_ids if n in self._broken
        }
        refs = {
            n: self._actors[n][0].compute.remote(self._gpu_ids[n]) for n in node_ids if n not in out
        }
        if refs:
            ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
        for node_id, ref in refs.items():
            try:
                out[node_id] = ray.get(ref, timeout=0)
            except ray.exceptions.GetTimeoutError:
                self._kill(node_id)  # a probe still running: its rank goes, not the answer
                out[node_id] = f"no answer within {timeout_s:g} s"
            except Exception as exc:  # noqa: BLE001 - this node's answer is its error
                out[node_id] = first_line(exc)
        return {n: out[n] for n in node_ids}

    def _measure(
        self, groups: list[_Group | BenchResult], iters: int, warmup: int
    ) -> list[BenchResult]:
        live = [g for g in groups if isinstance(g, _Group)]
        t_start = time.monotonic()
        self._start(set().union(*(g.node_ids for g in live)) if live else set())
        for g in live:  # wall_s counts from ranks ready: a process start is not the link's time
            g.t0 = time.monotonic()
            broken = sorted(self._broken[n] for n in g.node_ids if n in self._broken)
            if broken:
                g.error, g.wall_s = broken[0], g.t0 - t_start
        started = [g for g in live if g.error is None]
        self._launch(started, iters, warmup)
        self._collect(started)
        return [g if isinstance(g, BenchResult) else self._result(g) for g in groups]

    def _launch(self, groups: list[_Group], iters: int, warmup: int) -> None:
        """Rank 0 of each group picks a port on its node; then every rank joins."""
        ports = [self._actors[g.ranks[0][0]][g.ranks[0][1]].free_port.remote() for g in groups]
        if ports:
            ray.wait(ports, num_returns=len(ports), timeout=self.timeout_s)
        for g, port_ref in zip(groups, ports, strict=True):
            try:
                port = ray.get(port_ref, timeout=0)
            except Exception as exc:  # noqa: BLE001 - the group's failure, not the call's
                self._fail(g, f"no rendezvous port: {first_line(exc)}")
                continue
            init_method = f"tcp://{self._nodes[g.ranks[0][0]].ip}:{port}"
            world = len(g.ranks)
            for rank, (node_id, idx) in enumerate(g.ranks):
                actor = self._actors[node_id][idx]
                g.refs.append(
                    actor.all_reduce.remote(
                        rank,
                        world,
                        init_method,
                        g.use_gpu,
                        idx,
                        self._gpu_ids[node_id],
                        g.loopback,
                        g.msg_bytes,
                        warmup,
                        iters,
                        self.timeout_s,
                    )
                )

    def _collect(self, groups: list[_Group]) -> None:
        """Wait for every rank; a rank that fails fails its group at once (its nodes' actors
        are killed, which ends the group's other ranks); the rest fail at the deadline."""
        owner = {ref: (g, rank) for g in groups for rank, ref in enumerate(g.refs)}
        pending = list(owner)
        deadline = time.monotonic() + self.timeout_s
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            done, pending = ray.wait(pending, num_returns=1, timeout=left)
            for ref in done:
                g, rank = owner[ref]
                if g.error is not None:
                    continue
                try:
                    g.answers[rank] = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - this group failed; the others go on
                    self._fail(g, f"rank {rank}: {first_line(exc)}")
                    pending = [r for r in pending if owner[r][0] is not g]
                    continue
                if len(g.answers) == len(g.ranks):
                    g.wall_s = time.monotonic() - g.t0
        for g in groups:
            if g.error is None and len(g.answers) < len(g.ranks):
                missing = sorted(set(range(len(g.ranks))) - set(g.answers))
                self._fail(g, f"no answer within {self.timeout_s:g} s from rank(s) {missing}")
        # A failed group's other ranks end in errors (their own, or the kill's) that nobody read;
        # read them, so Ray does not print each one as an "Unhandled error" on the console.
        unread = [ref for g in groups if g.error is not None for ref in g.refs]
        if unread:
            done, _ = ray.wait(unread, num_returns=len(unread), timeout=5.0)
            for ref in done:
                with contextlib.suppress(Exception):
                    ray.get(ref, timeout=0)

    def _fail(self, g: _Group, error: str) -> None:
        g.error = error
        g.wall_s = time.monotonic() - g.t0
        for node_id in g.node_ids:  # fresh processes for the next call: no half-dead group
            self._kill(node_id)

    def _result(self, g: _Group) -> BenchResult:
        common = {"kind": g.kind, "node_a": g.node_a, "node_b": g.node_b, "wall_s": g.wall_s}
        world = len(g.ranks)
        if g.error is not None:
            backend = "nccl" if g.use_gpu else "gloo"
            return BenchResult.unmeasured(
                g.kind, g.node_a, g.node_b, world, backend, g.msg_bytes, "failed", g.error, g.wall_s
            )
        first = g.answers[0]
        # linkbench already reduced with MAX over ranks; again here, so a rank that disagrees
        # could only make the figure slower, never faster
        times_s = max_over_ranks([a.times_s for _, a in sorted(g.answers.items())])
        time_s = median_s(times_s)
        busbw = (
            comm_model.busbw_gbps("all_reduce", world, first.msg_bytes, time_s) if time_s else None
        )
        return BenchResult(
            **common,
            world_size=world,
            backend=first.backend,
            ifname=first.ifname,
            msg_bytes=first.msg_bytes,
            times_s=times_s,
            time_s=time_s,
            busbw_gbps=busbw,
            status="ok",
            error=None,
        )


def read_health(nodes: list[FleetNode], timeout_s: float = 60.0) -> dict[str, HealthRecord]:
    """Every node's health at idle, one task pinned to each node, all at once; a node that fails
    to answer (a raise, a dead node, nothing within ``timeout_s``) gets ``HealthRecord(error=...)``.
    NVML only: no GPU asked for, no CUDA context, nothing stays in the worker after it. No CPU
    asked for either: a fleet check runs alone."""
    remote = ray.remote(max_retries=0)(node_health_task)
    env = {"env_vars": link_env_defaults({})}  # the env a sweep's ranks get
    refs = {
        n.node_id: remote.options(
            scheduling_strategy=_pin(n.node_id), num_cpus=0, num_gpus=0, runtime_env=env
        ).remote(n.gpus > 0)
        for n in nodes
    }
    if refs:
        ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    out: dict[str, HealthRecord] = {}
    for node_id, ref in refs.items():
        try:
            answer = ray.get(ref, timeout=0)
        except ray.exceptions.GetTimeoutError:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
            answer = f"no answer within {timeout_s:g} s"
        except Exception as exc:  # noqa: BLE001 - this node's answer is its error
            answer = first_line(exc)
        out[node_id] = (
            answer
            if isinstance(answer, HealthRecord)
            else HealthRecord(error=f"health not read: {answer}")
        )
    return out
