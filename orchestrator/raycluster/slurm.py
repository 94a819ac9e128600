"""A Slurm allocation, read from the environment Slurm gives a job: its nodes, what each node
may give Ray, the head's address, and whether a sweep fits. Pure: every function takes the
environment (or the values) it reads, so unit tests need no Slurm.

Slurm tells a job its allocation in environment variables (sbatch(1), srun(1), "OUTPUT
ENVIRONMENT VARIABLES"): ``SLURM_JOB_ID``, ``SLURM_JOB_NODELIST`` (a hostlist such as
``gpu[01-03,07]``), ``SLURM_JOB_CPUS_PER_NODE`` (``72(x2),36``: counts in node order), and
inside a step, for the node the task runs on, ``SLURM_CPUS_ON_NODE`` and ``SLURM_GPUS_ON_NODE``.
``clusters/slurm/linksweep.sbatch`` starts one Ray node per Slurm node from these, and
``linksweep`` uses them to say which nodes it sees and to refuse a sweep the allocation cannot
hold before anything runs.

Words used here:
    allocation   the nodes Slurm gave one job (``Allocation``); the first runs the batch script,
                 and so the Ray head and the linksweep driver.
    node share   what one node of the allocation may give Ray (``NodeShare``): its CPUs and GPUs.

May import: nothing (the standard library only).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

JOB_ID_ENV = "SLURM_JOB_ID"
"""Set in every process of a job (batch script, steps, ``salloc``'s shell): we are inside one."""


@dataclass(frozen=True)
class Allocation:
    """The nodes Slurm gave one job, in Slurm's order."""

    job_id: str
    nodes: tuple[str, ...]
    """Slurm's node names (``SLURM_JOB_NODELIST`` expanded); the first runs the batch script."""
    cpus_per_node: tuple[int, ...] = ()
    """CPUs Slurm gave the job on each node, in the order of ``nodes``; () when not told."""

    @property
    def head(self) -> str:
        """The node the batch script runs on: where the Ray head and the driver go."""
        return self.nodes[0]


@dataclass(frozen=True)
class NodeShare:
    """What one node of the allocation may give Ray (``ray start --num-cpus/--num-gpus``)."""

    cpus: int | None
    """CPUs Slurm gave the job on this node; None when not told (Ray counts the machine's)."""
    gpus: int
    """GPUs Slurm gave the job on this node; 0 when it gave none."""
    gpus_from: str
    """The variable ``gpus`` was read from, for the log line (``none`` when 0 by default)."""


class SlurmEnvError(ValueError):
    """A Slurm variable that cannot be read; the message names it and its value."""


# --- hostlists and counts ---


def expand_nodelist(text: str) -> tuple[str, ...]:
    """Slurm's hostlist expression as node names, in order: ``node[01-03,07],login`` ->
    node01 node02 node03 node07 login. A range keeps the zero padding of its start; several
    bracket groups in one name multiply (``r[1-2]n[1-2]`` -> r1n1 r1n2 r2n1 r2n2), as
    ``scontrol show hostnames`` does."""
    names: list[str] = []
    for item in _split_top_level(text.strip()):
        if not item:
            raise SlurmEnvError(f"nodelist {text!r}: an empty name")
        names.extend(_expand_item(item, text))
    return tuple(names)


def _split_top_level(text: str) -> list[str]:
    """Split on the commas that are not inside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
        if depth not in (0, 1):
            raise SlurmEnvError(f"nodelist {text!r}: unbalanced brackets")
    if depth:
        raise SlurmEnvError(f"nodelist {text!r}: unbalanced brackets")
    items.append(text[start:])
    return items


def _expand_item(item: str, whole: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", item)
    if m is None:
        return [item]
    head, tail = item[: m.start()], item[m.end() :]
    out = []
    for value in _expand_ranges(m.group(1), whole):
        out.extend(_expand_item(head + value + tail, whole))
    return out


def _expand_ranges(body: str, whole: str) -> list[str]:
    values = []
    for part in body.split(","):
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise SlurmEnvError(f"nodelist {whole!r}: {part!r} is not a number or a range")
        if not sep:
            values.append(lo)
            continue
        if int(hi) < int(lo):
            raise SlurmEnvError(f"nodelist {whole!r}: range {part!r} runs backwards")
        values.extend(str(i).zfill(len(lo)) for i in range(int(lo), int(hi) + 1))
    return values


def expand_counts(text: str) -> tuple[int, ...]:
    """Slurm's per-node counts (``SLURM_JOB_CPUS_PER_NODE``, ``SLURM_TASKS_PER_NODE``), one per
    node: ``72(x2),36`` -> 72 72 36."""
    counts: list[int] = []
    for part in text.strip().split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if m is None:
            raise SlurmEnvError(f"per-node counts {text!r}: {part!r} is not N or N(xK)")
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    return tuple(counts)


# --- the allocation and this node's share ---


def allocation_from_env(env: Mapping[str, str]) -> Allocation | None:
    """The job's allocation from its environment; None outside a Slurm job (no
    ``SLURM_JOB_ID``). ``SLURM_NODELIST`` stands in for ``SLURM_JOB_NODELIST`` (older Slurm)."""
    job_id = env.get(JOB_ID_ENV) or env.get("SLURM_JOBID")
    if not job_id:
        return None
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise SlurmEnvError(f"{JOB_ID_ENV}={job_id} is set but SLURM_JOB_NODELIST is not")
    nodes = expand_nodelist(nodelist)
    cpus_text = env.get("SLURM_JOB_CPUS_PER_NODE")
    cpus = expand_counts(cpus_text) if cpus_text else ()
    if cpus and len(cpus) != len(nodes):
        raise SlurmEnvError(
            f"SLURM_JOB_CPUS_PER_NODE={cpus_text!r} counts {len(cpus)} node(s), "
            f"SLURM_JOB_NODELIST={nodelist!r} names {len(nodes)}"
        )
    return Allocation(job_id=job_id, nodes=nodes, cpus_per_node=cpus)


def _count_list(text: str) -> int:
    """Devices in a list such as ``0,1,3`` (``CUDA_VISIBLE_DEVICES``, ``SLURM_STEP_GPUS``)."""
    return len([d for d in text.split(",") if d.strip()])


GPU_SOURCES = ("SLURM_GPUS_ON_NODE", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES")
"""Where this node's GPUs are read from, first found wins. ``SLURM_GPUS_ON_NODE`` is the count
(any of ``--gpus``, ``--gpus-per-node``, ``--gres=gpu:N``); the two ``*_GPUS`` lists are the
GPU indices Slurm bound (older Slurm sets only these); ``CUDA_VISIBLE_DEVICES``, which Slurm's
gres plugin sets in the task, last. Ray's own docs pass ``SLURM_GPUS_PER_TASK``, which only
``--gpus-per-task`` sets: with ``--gpus-per-node`` or ``--gres`` Ray would get an empty
``--num-gpus``."""


def node_share(env: Mapping[str, str]) -> NodeShare:
    """What the node this task runs on may give Ray, from the task's environment (one task per
    node, started by ``srun --whole``: ``SLURM_CPUS_ON_NODE`` is then every CPU the job has
    there, which may differ from node to node)."""
    cpus_text = env.get("SLURM_CPUS_ON_NODE", "").strip()
    if cpus_text and not cpus_text.isdigit():
        raise SlurmEnvError(f"SLURM_CPUS_ON_NODE={cpus_text!r} is not a count")
    cpus = int(cpus_text) if cpus_text else None
    for name in GPU_SOURCES:
        value = env.get(name, "").strip()
        if not value or value == "NoDevFiles":  # NoDevFiles: a gres without device files
            continue
        if name == "SLURM_GPUS_ON_NODE":
            if not value.isdigit():
                raise SlurmEnvError(f"SLURM_GPUS_ON_NODE={value!r} is not a count")
            return NodeShare(cpus, int(value), name)
        return NodeShare(cpus, _count_list(value), name)
    return NodeShare(cpus, 0, "none")


def ray_resource_args(share: NodeShare) -> list[str]:
    """``ray start`` flags that give Ray exactly the node's share: an explicit ``--num-gpus``
    always (0 too: Ray would otherwise count the GPUs it sees, Slurm's or not), ``--num-cpus``
    where Slurm said."""
    args = [] if share.cpus is None else [f"--num-cpus={share.cpus}"]
    return [*args, f"--num-gpus={share.gpus}"]


def pick_head_ip(resolved: Sequence[str], interfaces: Sequence[str], n_nodes: int) -> str | None:
    """The address the other nodes dial the Ray head at: the head's hostname as it resolves
    (Ray's docs: ``hostname --ip-address``), unless that is a loopback address and other
    nodes must reach it (Debian maps its own hostname to 127.0.1.1), then the first IPv4
    address of its interfaces that is neither loopback nor link-local. One node: loopback
    will do. None when no address fits."""

    def usable(addr: str, loopback_ok: bool) -> bool:
        try:
            ip = ipaddress.ip_address(addr.split("%")[0])
        except ValueError:
            return False
        return (loopback_ok or not ip.is_loopback) and not ip.is_link_local

    alone = n_nodes <= 1
    for addr in resolved:
        if usable(addr, alone) and ":" not in addr:
            return addr
    for addr in interfaces:
        if usable(addr, False) and ":" not in addr:
            return addr
    return None


# --- does a sweep fit the allocation ---


def nodes_needed(world_size: int, ranks_per_node: int | None, placements: Iterable[str]) -> int:
    """Nodes a sweep's placements need at least: ``spread`` puts ``ranks_per_node`` ranks (one
    by default) on each of world_size / ranks_per_node nodes, ``pack`` all on one."""
    need = 1
    for placement in placements:
        if placement == "spread":
            need = max(need, world_size // (ranks_per_node or 1))
    return need


def too_few_nodes(
    alloc: Allocation, needed: int, world_size: int, ranks_per_node: int | None
) -> str | None:
    """The refusal when the allocation has fewer nodes than the sweep needs, naming both and
    what would fit; None when it has enough."""
    if len(alloc.nodes) >= needed:
        return None
    k = ranks_per_node or 1
    how = "each on its own node" if k == 1 else f"{k} to a node (ranks_per_node)"
    return (
        f"Slurm job {alloc.job_id} has {_count(len(alloc.nodes), 'node')} "
        f"({', '.join(alloc.nodes)}), but grid.placement 'spread' puts world_size={world_size} "
        f"ranks {how}, on {needed} nodes; allowed: sbatch --nodes={needed} (or more), or "
        f"world_size <= {len(alloc.nodes) * k}, or placement 'pack'"
    )


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _short(host: str | None) -> str:
    return (host or "?").split(".")[0]


def describe(alloc: Allocation, ray_nodes: Sequence[Mapping], embedded: bool) -> str:
    """One line: the allocation's nodes and the Ray nodes this driver joined
    (``raycluster.nodes.alive_nodes`` dicts: hostname, ip), and the allocated nodes Ray does
    not have, matched by short hostname (where Slurm's names are not the hostnames, no names
    match and only the counts are said)."""
    seen = ", ".join(f"{_short(n.get('hostname'))} {n.get('ip', '?')}" for n in ray_nodes)
    line = (
        f"inside Slurm job {alloc.job_id}: {_count(len(alloc.nodes), 'node')} allocated "
        f"({', '.join(alloc.nodes)}); Ray: {_count(len(ray_nodes), 'node')} joined ({seen})"
    )
    if embedded and len(alloc.nodes) > 1:
        return (
            f"{line}: an embedded cluster on this node only, the other allocated nodes stay idle "
            "(clusters/slurm/linksweep.sbatch starts Ray on every node)"
        )
    ray_names = {_short(n.get("hostname")) for n in ray_nodes}
    if ray_names & {_short(h) for h in alloc.nodes}:
        missing = [h for h in alloc.nodes if _short(h) not in ray_names]
        if missing:
            line += f"; allocated but not in Ray: {', '.join(missing)}"
    return line
