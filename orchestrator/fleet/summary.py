"""A fleet check (``linksweep fleet``) as terminal text: node labels, the node x node busbw
matrix per link, the suspects with why, and the whole summary.

Pure: rows in (dicts keyed by the columns of ``fleet_checks``, ``fleet_nodes``, ``fleet_pairs``,
``fleet_rounds`` and the view ``fleet_suspects``; docs/schema.md), a string out. JSON cells
(``links``, ``notes``, ``rule``, ``versions``, ``skipped_nodes``) are read decoded (the loader
decodes them with ``orchestrator.store.json_value``); one left as text is shown as it is.

The matrix: row and column are nodes; a cell is the inter-node all_reduce busbw (GB/s,
1 GB = 1e9 B, three significant digits) of that pair, the diagonal the node's intra-node busbw
in brackets; ``*`` slow (below the suspect rule's bound), ``FAIL`` failed, ``skip`` skipped,
``-`` not measured; ``!`` before a label marks a suspect node.

May import: orchestrator.ui, orchestrator.report.fmt, orchestrator.store.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from typing import Any

from orchestrator.report.fmt import fmt_msg_size, fmt_seconds, sig3
from orchestrator.store import json_value
from orchestrator.ui import format_table

ID_PREFIX = 8
"""Characters of a Ray node id (56 hex digits) shown when nothing shorter tells nodes apart."""
MAX_LABEL_COLUMNS = 6
"""Up to this many nodes the matrix's columns are headed by labels; beyond, by row numbers."""
EXCLUDE_HINT = "linksweep run SWEEP.yaml --exclude-suspects {fleet_id}"


# --- labels -----------------------------------------------------------------------------------


def _base(node: dict) -> str:
    return str(
        node.get("ip") or node.get("hostname") or str(node.get("node_id") or "?")[:ID_PREFIX]
    )


def node_labels(nodes: Sequence[dict]) -> dict[str, str]:
    """node_id -> a short label, unique within ``nodes``: the IP when every node has its own,
    else the hostname when every node has its own, else the IP (or hostname, or id prefix)
    followed by ``/`` and the shortest node-id prefix (at least 8 characters) that tells the
    nodes sharing it apart (Ray's local test clusters put every node on 127.0.0.1)."""
    ids = [str(n.get("node_id")) for n in nodes]
    for key in ("ip", "hostname"):
        vals = [n.get(key) for n in nodes]
        if all(vals) and len(set(vals)) == len(vals):
            return {i: str(v) for i, v in zip(ids, vals, strict=True)}
    bases = [_base(n) for n in nodes]
    out = {}
    for i, b in zip(ids, bases, strict=True):
        sharing = [j for j, c in zip(ids, bases, strict=True) if c == b]
        if len(sharing) == 1:
            out[i] = b
            continue
        k = ID_PREFIX
        while k < max(len(j) for j in sharing) and len({j[:k] for j in sharing}) < len(sharing):
            k += 1
        out[i] = i[:k] if b == i[:ID_PREFIX] else f"{b}/{i[:k]}"
    return out


def node_label(node_row: dict, nodes: Sequence[dict] = ()) -> str:
    """A node's label (``node_labels``) among ``nodes``; alone, its IP, else hostname, else the
    first 8 characters of its node id."""
    if nodes:
        return node_labels(nodes).get(str(node_row.get("node_id")), _base(node_row))
    return _base(node_row)


# --- small readers ----------------------------------------------------------------------------


def link_names(check: dict, pairs: Sequence[dict]) -> list[str]:
    """The links in the order checked (``fleet_checks.links``), then any other in the pairs."""
    names = []
    for item in json_value(check.get("links")) or []:
        name = item.get("name") if isinstance(item, dict) else item
        if name is not None and str(name) not in names:
            names.append(str(name))
    for p in pairs:
        if p.get("link") is not None and str(p["link"]) not in names:
            names.append(str(p["link"]))
    return names


def gbps(v: float | None) -> str:
    """busbw in GB/s, three significant digits (``0.0125``, ``1.50``, ``123``)."""
    return "-" if v is None else sig3(float(v))


def _cell(pair: dict | None, intra: bool) -> str:
    if pair is None:
        text = "-"
    elif pair.get("status") == "failed":
        text = "FAIL"
    elif pair.get("status") == "skipped" or pair.get("busbw_gbps") is None:
        text = "skip" if pair.get("status") == "skipped" else "-"
    else:
        text = gbps(pair["busbw_gbps"]) + ("*" if pair.get("slow") else "")
    return f"[{text}]" if intra else text


def pair_matrix(
    nodes: Sequence[dict], pairs: Sequence[dict], link: str
) -> dict[tuple[str, str], dict]:
    """(row node, column node) -> the pair row of ``link``: inter pairs both ways round, intra
    rows on the diagonal. A pair measured twice keeps its ok row over a failed one."""
    known = {str(n.get("node_id")) for n in nodes}
    out: dict[tuple[str, str], dict] = {}
    for p in pairs:
        if str(p.get("link")) != link:
            continue
        a, b = str(p.get("node_a")), str(p.get("node_b"))
        if a not in known or b not in known:
            continue
        keys = [(a, a)] if p.get("kind") == "intra" or a == b else [(a, b), (b, a)]
        for k in keys:
            if k not in out or out[k].get("status") != "ok":
                out[k] = p
    return out


def msg_size(pairs: Sequence[dict], link: str | None = None) -> str:
    sizes = sorted(
        {p["msg_bytes"] for p in pairs if p.get("msg_bytes") and link in (None, p.get("link"))}
    )
    return ", ".join(fmt_msg_size(s) for s in sizes) or "-"


# --- the matrix -------------------------------------------------------------------------------


def heatmap_text(nodes: Sequence[dict], pairs: Sequence[dict], link: str) -> str:
    """The node x node busbw matrix of one link (see the module docstring), with a legend."""
    labels = node_labels(nodes)
    ids = [str(n.get("node_id")) for n in nodes]
    suspect = {str(n.get("node_id")) for n in nodes if n.get("suspect")}
    cells = pair_matrix(nodes, pairs, link)
    by_label = len(ids) <= MAX_LABEL_COLUMNS
    rows_head = [
        ("! " if i in suspect else "  ") + (labels[i] if by_label else f"{k + 1:>2} {labels[i]}")
        for k, i in enumerate(ids)
    ]
    cols_head = [labels[i] if by_label else f"{k + 1}" for k, i in enumerate(ids)]
    # every cell keeps one character for its mark, so the digits of a column line up
    grid = [[_cell(cells.get((a, b)), a == b) for b in ids] for a in ids]
    grid = [[c if c.endswith("*") else c + " " for c in row] for row in grid]
    w0 = max([len(h) for h in rows_head] + [0])
    widths = [max([len(cols_head[j])] + [len(r[j]) for r in grid]) for j in range(len(ids))]
    lines = [
        f"link {link}: all_reduce busbw, GB/s, at {msg_size(pairs, link)} "
        f"(row x column; diagonal in brackets: intra-node)"
    ]
    lines.append(
        " " * w0 + "  " + "  ".join(h.rjust(w) for h, w in zip(cols_head, widths, strict=True))
    )
    for head, row in zip(rows_head, grid, strict=True):
        body = "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True))
        lines.append(f"{head.ljust(w0)}  {body}".rstrip())
    lines.append(
        "legend: [x] intra-node busbw (the node's own GPUs or CPU ranks); x inter-node pair; "
        "* slow (below the rule's bound); FAIL failed; skip skipped; - not measured; "
        "! suspect node"
    )
    if not any(str(p.get("link")) == link for p in pairs):
        lines.append(f"(no pair was measured on link {link})")
    return "\n".join(lines)


# --- suspects ---------------------------------------------------------------------------------


def labelled(text: str, labels: dict[str, str]) -> str:
    """``text`` (a stored why or note, which names nodes by Ray node id) with each node id
    replaced by the node's label, for reading; the stored text keeps the ids."""
    for node_id, label in sorted(labels.items(), key=lambda kv: -len(kv[0])):
        if node_id and node_id != label:
            text = text.replace(node_id, label)
    return text


def suspects_text(suspect_rows: Sequence[dict], nodes: Sequence[dict]) -> str:
    """One line per suspect (view ``fleet_suspects``): a node with its label, IP, hostname and
    why; a pair with both labels, its link and why. "no suspect" when there is none."""
    if not suspect_rows:
        return "no suspect"
    labels = node_labels(nodes)
    lines = []
    for s in suspect_rows:
        a = str(s.get("node_id"))
        la = labels.get(a, _base(s))
        why = labelled(s.get("why") or "(no reason stored)", labels)
        if s.get("kind") == "pair":
            b = str(s.get("partner_id"))
            lb = labels.get(b, str(s.get("partner_ip") or b[:ID_PREFIX]))
            lines.append(f"pair {la} <-> {lb} on link {s.get('link')}: {why}")
        else:
            lines.append(
                f"node {la} (ip {s.get('ip') or '-'}, host {s.get('hostname') or '-'}, "
                f"id {a[:ID_PREFIX]}): {why}"
            )
    return "\n".join(lines)


# --- the summary ------------------------------------------------------------------------------


def round_times(rounds: Sequence[dict]) -> dict[str, Any]:
    """The inter-node rounds' wall_s: n, median_s, max_s (None without rounds); and per stage
    kind (intra, compute, health, inter) the total wall_s."""
    inter = [
        float(r["wall_s"])
        for r in rounds
        if r.get("kind") == "inter" and r.get("wall_s") is not None
    ]
    stages: dict[str, float] = {}
    for r in rounds:
        if r.get("wall_s") is not None:
            stages[str(r.get("kind"))] = stages.get(str(r.get("kind")), 0.0) + float(r["wall_s"])
    return {
        "n": len(inter),
        "median_s": statistics.median(inter) if inter else None,
        "max_s": max(inter) if inter else None,
        "stages_s": stages,
    }


def _verdict(node: dict) -> str:
    """SUSPECT, ok, or '-' when the node was not judged (a check that stopped early)."""
    if node.get("suspect") is None:
        return "-"
    return "SUSPECT" if node["suspect"] else "ok"


def judged(check: dict) -> bool:
    """Whether the check got as far as a verdict (status ok); otherwise 'no suspect' means
    nothing."""
    return check.get("status") == "ok"


def _compute(node: dict) -> str:
    if node.get("compute_status") == "failed":
        return "failed"
    v = node.get("compute_tokens_per_s")
    return "-" if v is None else sig3(float(v))


def group_of(node: dict) -> str | None:
    """The group a stored node was judged in (``fleet_nodes.health`` JSON, key ``group``: the
    device kind and GPU model, ``orchestrator/fleet/groups.py``); None for a check stored before
    groups, or a health cell that is not JSON."""
    health = json_value(node.get("health"))
    return health.get("group") if isinstance(health, dict) else None


def groups_line(nodes: Sequence[dict]) -> str | None:
    """``groups (judged apart): gpu:NVIDIA A10G (2), cpu (1)``, or None without groups."""
    count: dict[str, int] = {}
    for n in nodes:
        if (g := group_of(n)) is not None:
            count[g] = count.get(g, 0) + 1
    if not count:
        return None
    return "groups (judged apart): " + ", ".join(f"{g} ({k})" for g, k in count.items())


def node_rows(
    nodes: Sequence[dict], pairs: Sequence[dict], links: Sequence[str]
) -> tuple[list[str], list[tuple]]:
    """The node table's columns and rows (also the HTML's): label, ip, hostname, gpus, group
    (when the check stored groups), compute tokens/s, intra-node busbw per link, health,
    verdict, why."""
    labels = node_labels(nodes)
    grouped = any(group_of(n) is not None for n in nodes)
    intra = {
        (str(p.get("node_a")), str(p.get("link"))): p for p in pairs if p.get("kind") == "intra"
    }
    intra_cols = [f"intra GB/s {ln}" if len(links) > 1 else "intra GB/s" for ln in links]
    cols = ["node", "ip", "hostname", "gpus", *(["group"] if grouped else []), "tokens/s"]
    cols += [*intra_cols, "health", "verdict", "why"]
    rows = []
    for n in nodes:
        i = str(n.get("node_id"))
        gpus = n.get("gpus")
        rows.append(
            (
                labels[i],
                n.get("ip") or "-",
                n.get("hostname") or "-",
                "-" if gpus is None else f"{float(gpus):g}",
                *([group_of(n) or "-"] if grouped else []),
                _compute(n),
                *(_cell(intra.get((i, ln)), False) for ln in links),
                n.get("health_note") or ("ok" if n.get("health") else "-"),
                _verdict(n),
                labelled(n.get("why") or "", labels),
            )
        )
    return cols, rows


def _note_lines(value: Any) -> list[str]:
    value = json_value(value)
    if not value:
        return []
    if isinstance(value, dict):
        return [
            f"{k}: {v if isinstance(v, str) else json.dumps(v, default=str)}"
            for k, v in value.items()
        ]
    if isinstance(value, list):
        return [
            v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str) for v in value
        ]
    return [str(value)]


def rule_text(rule: object) -> str:
    """``low when 50% below the median and 3 scaled MADs, or under 25% of it; a node slow with
    2+ partners``: the stored rule (``fleet_checks.rule``) in words, or ``-``. A check that
    judged CPU and GPU nodes with different rules (``by_kind``) says each: ``cpu: ...; gpu: ...``."""
    if not isinstance(rule, dict) or "rel" not in rule:
        return "-"
    by_kind = rule.get("by_kind")
    if (
        isinstance(by_kind, dict)
        and len({json.dumps(r, sort_keys=True) for r in by_kind.values()}) > 1
    ):
        return " | ".join(f"{k.upper()} nodes: {rule_text(r)}" for k, r in by_kind.items())
    k = rule.get("mad_k")
    k = f"{k:g}" if isinstance(k, (int, float)) else "-"
    text = f"low when {rule['rel']:.0%} below the median and {k} scaled MADs"
    if rule.get("floor"):
        text += f", or under {rule['floor']:.0%} of it"
    if rule.get("min_partners") is not None:
        text += f"; a node slow with {rule['min_partners']}+ partners"
    return text


def header_lines(
    check: dict, nodes: Sequence[dict], pairs: Sequence[dict], rounds: Sequence[dict]
) -> list[str]:
    """What was checked and how long it took, one fact per line (the HTML shows them too)."""
    links = link_names(check, pairs)
    rt = round_times(rounds)
    per_round = (
        f"median {fmt_seconds(rt['median_s'])}, max {fmt_seconds(rt['max_s'])} over {rt['n']} round(s)"
        if rt["n"]
        else "no inter-node round"
    )
    stages = ", ".join(f"{k} {fmt_seconds(v)}" for k, v in sorted(rt["stages_s"].items()))
    wall = check.get("wall_s")
    return [
        f"status: {check.get('status') or '-'}",
        f"nodes: {len(nodes)}"
        + (
            f" (checked count {check['n_nodes']})"
            if check.get("n_nodes") not in (None, len(nodes))
            else ""
        ),
        f"links: {', '.join(links) or '-'}"
        + (f" (from {check['sweep_file']})" if check.get("sweep_file") else ""),
        f"pairs: {check.get('pairs_mode') or '-'}",
        f"message size: {msg_size(pairs)}"
        + (
            f" (--max-mb {check['max_mb']:g})"
            if isinstance(check.get("max_mb"), (int, float))
            else ""
        ),
        *([line] if (line := groups_line(nodes)) else []),
        f"inter-node rounds per link: {check.get('n_rounds') if check.get('n_rounds') is not None else '-'}",
        f"rule: {rule_text(json_value(check.get('rule')))}",
        f"wall time: {fmt_seconds(float(wall)) if wall is not None else '-'}",
        f"per inter-node round: {per_round}",
        *([f"time per stage (sum of wall_s): {stages}"] if stages else []),
    ]


def summary_text(
    check: dict,
    nodes: Sequence[dict],
    pairs: Sequence[dict],
    rounds: Sequence[dict],
    suspects: Sequence[dict],
) -> str:
    """The whole check as text: header, node table, matrix per link, notes, suspects, and what
    to do about them."""
    fid = check.get("fleet_id")
    out = [f"fleet check {fid}"]
    out += [f"  {line}" for line in header_lines(check, nodes, pairs, rounds)]
    if check.get("error"):
        out.append(f"  error: {check['error']}")
    links = link_names(check, pairs)
    cols, rows = node_rows(nodes, pairs, links)
    out += ["", *format_table(cols, rows, title="Nodes")]
    for link in links:
        out += ["", heatmap_text(nodes, pairs, link)]
    notes = _note_lines(check.get("notes"))
    skipped = _note_lines(check.get("skipped_nodes"))
    if notes or skipped:
        out += (
            ["", "Notes"]
            + [f"  - {labelled(n, node_labels(nodes))}" for n in notes]
            + [f"  - skipped node: {s}" for s in skipped]
        )
    out += ["", f"Suspects ({len(suspects)})"]
    out += [f"  {line}" for line in suspects_text(suspects, nodes).splitlines()]
    if suspects:
        out.append(f"  exclude them: {EXCLUDE_HINT.format(fleet_id=fid)}")
        out.append(
            "  (or list them under exclude_nodes: in the sweep file, by node id, IP or hostname)"
        )
    elif judged(check):
        out.append("  nothing to exclude")
    else:
        out.append(f"  no verdict: the check ended {check.get('status') or 'unfinished'}")
    return "\n".join(out)
