"""The fleet check's groups: which nodes are judged against which. Pure.

A figure means something only against figures of the same hardware: a CPU node's gloo busbw and
tokens/s are not a slow GPU's, and an A10G's tokens/s (a g5 node) are not a slow A100's (a p4d
node), yet one population put them in one median, and a CPU node switched the whole check to
the CPU message size and threshold. So nodes are grouped by device kind and GPU model, and every
comparison stays inside a group:

- **The key** (:func:`group_key`): ``cpu`` for a node without a whole GPU in its Ray resources
  (its ranks run on CPU); else ``gpu:`` and the model NVML names (``gpu:NVIDIA A100-SXM4-40GB``;
  several models on one node, sorted and joined by `` + ``; ``gpu:unknown`` when NVML named none,
  e.g. it could not be read: that node is compared only with others NVML could not read).
- **Per group**: the message size (the CPU or the GPU default, ``fleet.MAX_MB_*``) and the rule
  (:func:`rule_for`: ``suspects.CPU_REL`` for ``cpu``, 0.15 for a GPU group; ``--threshold``
  overrides both).
- **The verdict** (:func:`judge_groups`): ``suspects.judge`` once per group, on the group's nodes,
  their compute probe and intra-node figures, and the pairs between two nodes of the group.
- **A pair across groups** is measured (it tells whether the two can run one job) and stored,
  but its busbw is judged against nothing: no group's pairs are a reference for it (an A100
  node's NIC and an A10G node's differ by design; a CPU node's gloo is not NCCL). A failed one
  is slow, and a suspect unless a suspect node explains it; a note says how many there were.

May import: suspects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from orchestrator.fleet.suspects import (
    Bound,
    NodeVerdict,
    PairVerdict,
    Rule,
    Value,
    Verdict,
    default_rule,
    error_of,
    judge,
)

CPU = "cpu"
UNKNOWN_MODEL = "unknown"


def group_key(gpus: float, gpu_names: Iterable[str | None]) -> str:
    """``cpu``, or ``gpu:`` and the node's GPU model(s) (see the module docstring)."""
    if int(gpus) < 1:  # a fraction of a GPU runs no fleet rank on it: the node's ranks use CPU
        return CPU
    names = sorted({str(n).strip() for n in gpu_names if n and str(n).strip()})
    return "gpu:" + (" + ".join(names) or UNKNOWN_MODEL)


def node_groups(nodes: Sequence[Any], health: Mapping[str, Any]) -> dict[str, str]:
    """node_id -> group key, from Ray's GPU count per node (``.gpus``) and the GPU names of the
    node's health record (``HealthRecord.gpus[i]["name"]``, as NVML reads them; a GPU in MIG
    mode by its instances' names, ``... MIG 1g.10gb``: a slice is not judged as a whole GPU)."""
    out = {}
    for n in nodes:
        record = health.get(n.node_id)
        names = [
            name
            for g in (getattr(record, "gpus", None) or ())
            for name in (g.get("mig_instances") or [g.get("name")])
        ]
        out[n.node_id] = group_key(n.gpus, names)
    return out


def rule_for(group: str, override: Rule | None = None) -> Rule:
    """The rule a group is judged by: ``override`` (``--threshold``) when given, else the CPU or
    the GPU default (``suspects.default_rule``)."""
    return override or default_rule(gpu_fleet=group != CPU)


def pair_msg_bytes(a: str, b: str, groups: Mapping[str, str], sizes: Mapping[str, int]) -> int:
    """The all_reduce size of pair (a, b): its group's size, or across groups the smaller of the
    two (a pair with a CPU node runs gloo, as a CPU pair does)."""
    return min(sizes[groups[a]], sizes[groups[b]])


def _members(groups: Mapping[str, str], nodes: Sequence[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for n in nodes:
        if n not in groups:
            raise ValueError(f"groups: node {n!r} has no group; every node needs one")
        out.setdefault(groups[n], []).append(n)
    return out


def judge_groups(
    nodes: Sequence[str],
    groups: Mapping[str, str],
    rules: Mapping[str, Rule],
    pairs: Mapping[str, Mapping[tuple[str, str], Value]],
    intra: Mapping[str, Mapping[str, Value]],
    compute: Mapping[str, Value],
    health: Mapping[str, Sequence[str]],
    shared_host: Iterable[str] = (),
) -> Verdict:
    """``suspects.judge`` per group (arguments as there; ``groups``: node -> key, ``rules``: key
    -> Rule), and the pairs across groups judged by failure alone. With more than one group,
    each note starts with its group, and a bound's check is ``<check> <group>``."""
    members = _members(groups, nodes)
    missing = sorted(set(members) - set(rules))
    if missing:
        raise ValueError(f"rules: no rule for group(s) {missing}; every group needs one")
    shared = set(shared_host)
    several = len(members) > 1
    node_v: dict[str, NodeVerdict] = {}
    pair_v: dict[tuple[str, str, str], PairVerdict] = {}
    intra_v: dict[tuple[str, str], PairVerdict] = {}
    notes: list[str] = []
    bounds: dict[tuple[str, str | None], Bound] = {}
    for key, ids in members.items():
        inside = set(ids)
        group_pairs = {
            link: {k: v for k, v in ps.items() if set(k) <= inside} for link, ps in pairs.items()
        }
        v = judge(
            ids,
            {link: ps for link, ps in group_pairs.items() if ps},
            {link: {n: x for n, x in xs.items() if n in inside} for link, xs in intra.items()},
            {n: x for n, x in compute.items() if n in inside},
            {n: why for n, why in health.items() if n in inside},
            shared_host=shared & inside,
            rule=rules[key],
        )
        node_v.update(v.nodes)
        pair_v.update(v.pairs)
        intra_v.update(v.intra)
        notes += [f"group {key}: {note}" if several else note for note in v.notes]
        bounds.update(
            {((f"{c} {key}" if several else c), link): b for (c, link), b in v.bounds.items()}
        )
    suspects = {n for n, nv in node_v.items() if nv.suspect}
    for link, ps in pairs.items():
        across = [k for k in ps if groups[k[0]] != groups[k[1]]]
        for a, b in across:
            err = error_of(ps[(a, b)])
            by = [x for x in (a, b) if x in suspects]
            why = None if err is None else f"all_reduce failed: {err}"
            if why and by:
                why += f"; explained by suspect node {' and '.join(by)}"
            pair_v[(link, a, b)] = PairVerdict(err is not None, err is not None and not by, why)
        if across:
            kinds = sorted({" x ".join(sorted((groups[a], groups[b]))) for a, b in across})
            notes.append(
                f"link {link}: {len(across)} pair(s) across groups ({'; '.join(kinds)}) measured "
                "but not judged by busbw: nodes of different kinds or GPU models have no common "
                "reference (a failed one is still a suspect)"
            )
    return Verdict(node_v, pair_v, intra_v, tuple(notes), bounds)
