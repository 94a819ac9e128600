"""Nodes a sweep keeps off: the sweep file's ``exclude_nodes`` and a fleet check's suspects,
matched against the nodes alive when the sweep starts. Pure: plain dicts in, plain dicts out.

An entry is a Ray node id (hex), an IP or a hostname (also the short hostname, before the first
``.``). :func:`resolve_exclusions` matches every entry against the alive nodes and gives one
dict per excluded node ``{entry, source, node_id, ip, hostname}``, ``source`` being
``exclude_nodes`` or ``fleet <id>`` (``linksweep run --exclude-suspects ID``); an entry no
alive node matches keeps a dict with ``node_id`` None (said as a warning: the node may be gone
already). A hostname shared by several nodes (Ray nodes started on one machine) excludes all of
them. A node matched twice (the same entry twice, or by id and by IP, or by the file and by a
fleet) is excluded once, under the first entry that matched it. The list is stored as
``sweeps.excluded_nodes``; a resumed sweep re-resolves the same entries against the nodes alive
then (:func:`resume_entries`).

Words, the same through the sweep's path and ``raycluster/runs.py``: ``excluded`` is that list
of dicts; ``excluded_ids`` the node ids among them (:func:`excluded_node_ids`), what placement
keeps off.

Placement keeps every bundle off the excluded nodes with Ray's default node label
(:func:`label_selector`): every node carries ``ray.io/node-id``, and a placement group's
``bundle_label_selector`` ``!in(...)`` is honoured by STRICT_PACK and STRICT_SPREAD alike.

May import: nothing (the standard library only).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

SPEC_SOURCE = "exclude_nodes"
FLEET_SOURCE_PREFIX = "fleet "
NODE_ID_LABEL = "ray.io/node-id"
"""The label Ray gives every node, its hex node id (Ray 2.60)."""


def fleet_source(fleet_id: str) -> str:
    return f"{FLEET_SOURCE_PREFIX}{fleet_id}"


def _matches(entry: str, node: Mapping) -> bool:
    e = entry.strip().lower()
    node_id = (node.get("node_id") or "").lower()
    ip = (node.get("ip") or "").lower()
    host = (node.get("hostname") or "").lower()
    if e in (node_id, ip, host):
        return bool(e)
    # a short hostname names a node whose hostname is qualified (node7 -> node7.cluster.local)
    return "." not in e and bool(host) and host.split(".", 1)[0] == e


def resolve_exclusions(entries: Sequence[tuple[str, str]], nodes: Sequence[Mapping]) -> list[dict]:
    """``entries``: (entry, source) in order; ``nodes``: the alive nodes (``node_id``, ``ip``,
    ``hostname``). In entry order: one dict per node an entry matched, one per entry no node
    matched (node_id None); see the module docstring."""
    out: list[dict] = []
    seen_nodes: set[str] = set()
    seen_unmatched: set[str] = set()
    for entry, source in entries:
        matched = [n for n in nodes if _matches(entry, n)]
        if not matched:
            if entry not in seen_unmatched:
                seen_unmatched.add(entry)
                out.append(
                    {
                        "entry": entry,
                        "source": source,
                        "node_id": None,
                        "ip": None,
                        "hostname": None,
                    }
                )
            continue
        for n in matched:
            if n["node_id"] in seen_nodes:
                continue
            seen_nodes.add(n["node_id"])
            out.append(
                {
                    "entry": entry,
                    "source": source,
                    "node_id": n["node_id"],
                    "ip": n.get("ip"),
                    "hostname": n.get("hostname"),
                }
            )
    return out


def excluded_node_ids(excluded: Iterable[Mapping]) -> tuple[str, ...]:
    """The excluded nodes' ids (``excluded_ids``, what placement keeps off), sorted, each once."""
    return tuple(sorted({r["node_id"] for r in excluded if r.get("node_id")}))


T = TypeVar("T")


def usable_nodes(nodes: Sequence[T], excluded: Iterable[Mapping]) -> list[T]:
    """``nodes`` (anything with a ``node_id`` attribute) less the excluded ones."""
    excluded_ids = set(excluded_node_ids(excluded))
    return [n for n in nodes if n.node_id not in excluded_ids]


def label_selector(excluded_ids: Sequence[str]) -> dict[str, str] | None:
    """One bundle's label selector keeping it off ``excluded_ids``; None when there are none."""
    if not excluded_ids:
        return None
    return {NODE_ID_LABEL: "!in(" + ",".join(excluded_ids) + ")"}


def describe_node(r: Mapping) -> str:
    """``node 1a2b3c4d5e6f (10.0.0.7, gpu-07)`` for an excluded node's dict."""
    where = ", ".join(str(x) for x in (r.get("ip"), r.get("hostname")) if x)
    return f"node {r['node_id'][:12]}" + (f" ({where})" if where else "")


def describe_exclusions(excluded: Sequence[Mapping]) -> str:
    """One line naming every excluded node and the entry that excluded it."""
    parts = [
        f"{describe_node(r)} by {r['source']} entry {r['entry']!r}"
        for r in excluded
        if r.get("node_id")
    ]
    return "; ".join(parts) if parts else "no alive node"


def exclusion_notes(excluded: Sequence[Mapping]) -> list[str]:
    """What to tell the user: each node kept off, entries matching several nodes, entries
    matching none (a warning, not an error: the node may be gone already)."""
    notes = []
    by_entry: dict[tuple[str, str], list[Mapping]] = {}
    for r in excluded:
        by_entry.setdefault((r["entry"], r["source"]), []).append(r)
    for (entry, source), rs in by_entry.items():
        if rs[0].get("node_id") is None:
            notes.append(
                f"warning: {source} entry {entry!r} matches no alive node (node id, IP or "
                "hostname); nothing excluded for it (the node may be gone already)"
            )
        elif len(rs) > 1:
            names = ", ".join(describe_node(r) for r in rs)
            notes.append(f"{source} entry {entry!r} matches {len(rs)} nodes, all excluded: {names}")
        else:
            notes.append(f"excluded {describe_node(rs[0])} ({source} entry {entry!r})")
    return notes


def spec_entries(exclude_nodes: Sequence[str]) -> list[tuple[str, str]]:
    return [(e, SPEC_SOURCE) for e in exclude_nodes]


def suspect_entries(
    fleet_id: str, suspects: Sequence[Mapping]
) -> tuple[list[tuple[str, str]], list[str]]:
    """A fleet check's suspects (rows of the ``fleet_suspects`` view) -> (entries by node id,
    what to say). Suspect pairs are not excluded: a pair names no single node to avoid, so the
    warning names the pair and suggests ``exclude_nodes`` for one of its nodes."""
    source = fleet_source(fleet_id)
    entries = [(s["node_id"], source) for s in suspects if s["kind"] == "node" and s["node_id"]]
    notes = []
    if not entries:
        notes.append(f"fleet {fleet_id} named no suspect node: nothing excluded from it")
    for s in suspects:
        if s["kind"] != "pair":
            continue
        a = s.get("ip") or s.get("hostname") or (s.get("node_id") or "?")[:12]
        b = s.get("partner_ip") or (s.get("partner_id") or "?")[:12]
        link = f" on link {s['link']!r}" if s.get("link") else ""
        notes.append(
            f"warning: fleet {fleet_id} names the pair {a} <-> {b}{link} ({s.get('why')}); "
            f"pairs are not excluded: to avoid it, add one of its nodes ({a} or {b}) to the "
            "sweep file's exclude_nodes"
        )
    return entries, notes


def resume_entries(stored: Sequence[Mapping] | None) -> list[tuple[str, str]]:
    """The fleet entries a stored sweep excluded (``sweeps.excluded_nodes``), to re-resolve on
    resume; the file's own entries come from the spec, which a resume may not change."""
    out: list[tuple[str, str]] = []
    for r in stored or []:
        if str(r.get("source", "")).startswith(FLEET_SOURCE_PREFIX):
            pair = (r["entry"], r["source"])
            if pair not in out:
                out.append(pair)
    return out
