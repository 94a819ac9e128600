"""The fleet check's page (``linksweep report --fleet [FLEET_ID]``): ``fleet.html`` and one
node x node busbw heatmap per link, ``fleet_heatmap_<link>.png``.

The page is self-contained like ``report.html`` (the same inline CSS, PNGs as base64 data URIs,
no scripts, no links outside the file): the verdict, what was checked and how long it took, the
heatmaps, the suspects with why, then the nodes, pairs, rounds and provenance tables.

The heatmap: row and column are nodes, a cell the inter-node all_reduce busbw of that pair
(GB/s, colour and number); slow cells outlined in red, failed cells hatched and marked FAIL,
unmeasured cells grey. The diagonal holds each node's intra-node busbw, written in brackets on
a neutral background and left out of the colour scale: it measures other hardware (a node's own
GPUs or CPU ranks) and would squash the inter-node colours.

Pure apart from matplotlib (imported inside the functions): rows in (see
``orchestrator.fleet.summary``), HTML and PNG bytes out.

May import: draw, fmt, html, markup, orchestrator.fleet.summary, orchestrator.store,
matplotlib, numpy.
"""

from __future__ import annotations

import base64
import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.fleet.summary import (
    EXCLUDE_HINT,
    header_lines,
    judged,
    labelled,
    link_names,
    msg_size,
    node_labels,
    node_rows,
    pair_matrix,
)
from orchestrator.report.draw import RC, figure_png, new_figure
from orchestrator.report.fmt import fmt_value, sig3
from orchestrator.report.html import CSS
from orchestrator.report.markup import esc, html_table, missing
from orchestrator.store import json_value

SLOW_EDGE = "#c53030"
DIAGONAL_FACE = "#e8ecf2"
UNMEASURED_FACE = "#f4f5f7"
MAX_ANNOTATED = 24
"""Beyond this many nodes the cells are too small for numbers: colour only."""


def heatmap_png_name(link: str) -> str:
    """``fleet_heatmap_<link>.png``, the link name kept to characters safe in a file name."""
    return f"fleet_heatmap_{re.sub(r'[^A-Za-z0-9_.-]+', '_', link)}.png"


def plot_heatmap(nodes: Sequence[dict], pairs: Sequence[dict], link: str) -> tuple[Any | None, str]:
    """(Figure, caption) of one link's node x node busbw; (None, why) when nothing was measured."""
    cells = pair_matrix(nodes, pairs, link)
    if not cells:
        return None, f"No pair was measured on link {link}."
    import matplotlib
    import numpy as np

    ids = [str(node.get("node_id")) for node in nodes]
    suspects = {str(node.get("node_id")) for node in nodes if node.get("suspect")}
    n = len(ids)
    values = _busbw_matrix(ids, cells)
    side = min(2.2 + 0.75 * n, 14.0)
    with matplotlib.rc_context(RC):
        fig = new_figure(side + 1.6, side)
        ax = fig.add_subplot(1, 1, 1)
        cmap = matplotlib.colormaps["viridis"].with_extremes(bad=UNMEASURED_FACE)
        finite = values[np.isfinite(values)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        im = ax.imshow(
            np.ma.masked_invalid(values),
            cmap=cmap,
            vmin=0.0,
            vmax=hi if hi > 0 else 1.0,
            aspect="equal",
        )
        if finite.size:  # no inter-node value measured ok: a colour bar would mean nothing
            fig.colorbar(im, ax=ax, shrink=0.8, label="inter-node busbw (GB/s)")
        font_size = max(6.0, 10.5 - 0.25 * n) if n <= MAX_ANNOTATED else 0.0
        for r, a in enumerate(ids):
            for c, b in enumerate(ids):
                cell = _HeatmapCell(ax, r, c, font_size)
                _draw_cell(cell, cells.get((a, b)), a == b, values[r, c], hi)
        _label_nodes(ax, ids, node_labels(nodes), suspects)
        ax.set_title(f"link {link}: all_reduce busbw at {msg_size(pairs, link)} (GB/s)")
    return fig, heatmap_caption(link, cells, lo, hi, bool(finite.size))


def _busbw_matrix(ids: Sequence[str], cells: dict[tuple[str, str], dict]) -> Any:
    """node x node inter-node busbw (GB/s) of the pairs measured ok; NaN elsewhere and on the
    diagonal (intra-node, left out of the colour scale)."""
    import numpy as np

    values = np.full((len(ids), len(ids)), np.nan)
    for r, a in enumerate(ids):
        for c, b in enumerate(ids):
            p = cells.get((a, b))
            if (
                a != b
                and p is not None
                and p.get("status") == "ok"
                and p.get("busbw_gbps") is not None
            ):
                values[r, c] = float(p["busbw_gbps"])
    return values


@dataclass(frozen=True)
class _HeatmapCell:
    """Where one cell is drawn: its axes, row and column, and the font size of its text (0: too
    many nodes for numbers)."""

    ax: Any
    row: int
    col: int
    font_size: float

    def box(self, **kw):
        from matplotlib.patches import Rectangle

        self.ax.add_patch(Rectangle((self.col - 0.5, self.row - 0.5), 1, 1, **kw))

    def say(self, text: str, **kw) -> None:
        if self.font_size:
            self.ax.text(
                self.col, self.row, text, ha="center", va="center", fontsize=self.font_size, **kw
            )


def _draw_cell(cell: _HeatmapCell, p: dict | None, diagonal: bool, value: float, hi: float) -> None:
    """One cell: intra-node in brackets on a neutral background, not measured as a dash, failed
    hatched with FAIL, slow outlined in red with a star."""
    import math

    if diagonal:
        cell.box(facecolor=DIAGONAL_FACE, edgecolor="white")
        if p is not None:
            bad = p.get("status") == "failed"
            cell.say("FAIL" if bad else f"[{_num(p)}]", style="italic", color="#4a5568")
    elif p is None:
        cell.say("–", color="#7f7f7f")
    elif p.get("status") == "failed":
        cell.box(facecolor="white", edgecolor="#e6a3a3", hatch="xx", linewidth=0)
        plate = {"facecolor": "white", "edgecolor": "none", "pad": 1.5}
        cell.say("FAIL", color=SLOW_EDGE, weight="bold", bbox=plate)
    elif math.isfinite(value):
        is_slow = bool(p.get("slow"))
        if is_slow:
            cell.box(fill=False, edgecolor=SLOW_EDGE, linewidth=2.5)
        dark = value < 0.55 * (hi if hi > 0 else 1.0)
        cell.say(
            _num(p) + ("*" if is_slow else ""),
            color="white" if dark else "black",
            weight="bold" if is_slow else "normal",
        )


def _label_nodes(ax, ids: Sequence[str], labels: dict[str, str], suspect: set[str]) -> None:
    """Both axes ticked with the node labels, suspects marked (!) in bold red; no spines."""
    n = len(ids)
    ticks = [labels[i] + (" (!)" if i in suspect else "") for i in ids]
    ax.set_xticks(range(n))
    ax.set_yticks(range(n))
    ax.set_xticklabels(ticks, rotation=35 if n > 2 else 0, ha="right" if n > 2 else "center")
    ax.set_yticklabels(ticks)
    for tick, i in zip([*ax.get_xticklabels(), *ax.get_yticklabels()], [*ids, *ids], strict=True):
        if i in suspect:
            tick.set_color(SLOW_EDGE)
            tick.set_fontweight("bold")
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_ylim(n - 0.5, -0.5)
    for s in ax.spines.values():
        s.set_visible(False)


def heatmap_caption(
    link: str, cells: dict[tuple[str, str], dict], lo: float, hi: float, coloured: bool
) -> str:
    """What the heatmap shows, with its colour range (``lo``..``hi`` GB/s, when any pair was
    measured ok: ``coloured``) and the counts of slow and failed pairs."""
    slow = sum(1 for k, p in cells.items() if k[0] < k[1] and p.get("slow"))
    failed = sum(1 for k, p in cells.items() if k[0] < k[1] and p.get("status") == "failed")
    return (
        f"Link {link}: each off-diagonal cell is the inter-node all_reduce busbw of the pair "
        f"(row, column), GB/s (1 GB = 1e9 B), "
        + (
            f"colour from 0 to the fleet's best {sig3(hi)} GB/s (lowest {sig3(lo)}). "
            if coloured
            else "none measured ok. "
        )
        + "The diagonal is each node's intra-node busbw "
        "(its own GPUs, or two CPU ranks), in brackets and not coloured: it measures other "
        f"hardware. Red outline and *: slow (below the suspect rule's bound), {slow} pair(s); "
        f"hatched FAIL: failed, {failed}; grey –: not measured; (!) in red: a suspect node."
    )


def _num(p: dict) -> str:
    v = p.get("busbw_gbps")
    return "–" if v is None else sig3(float(v))


def _img(name: str, png: bytes, caption: str) -> str:
    b64 = base64.b64encode(png).decode("ascii")
    return (
        f"<figure><img alt='{esc(name)}' src='data:image/png;base64,{b64}'>"
        f"<figcaption>{esc(caption)} <code>{esc(name)}</code></figcaption></figure>"
    )


SUSPECT_COLS = ("kind", "node", "ip", "hostname", "partner", "link", "why")
PAIR_COLS = ("link", "kind", "round", "node_a", "node_b", "world_size", "backend", "ifname",
             "msg_bytes", "time_s", "busbw_gbps", "status", "slow", "suspect", "why", "error")  # fmt: skip
ROUND_COLS = ("link", "kind", "round", "n_pairs", "wall_s")
PROVENANCE = ("fleet_id", "started_at", "finished_at", "status", "ray_address", "driver_host",
              "git_sha", "git_dirty", "sweep_file", "pairs_mode", "max_mb", "n_nodes",
              "n_rounds", "n_suspects", "wall_s", "error")  # fmt: skip


def suspects_html(suspects: Sequence[dict], nodes: Sequence[dict]) -> str:
    labels = node_labels(nodes)
    rows = [
        {
            "kind": s.get("kind"),
            "node": labels.get(str(s.get("node_id")), s.get("ip") or s.get("node_id")),
            "ip": s.get("ip"),
            "hostname": s.get("hostname"),
            "partner": labels.get(str(s.get("partner_id")), s.get("partner_ip"))
            if s.get("partner_id")
            else None,
            "link": s.get("link"),
            "why": labelled(str(s.get("why") or ""), labels),
        }
        for s in suspects
    ]
    return html_table(rows, SUSPECT_COLS) if rows else "<div class='ok'>No suspect.</div>"


def _pairs_table(pairs: Sequence[dict], labels: dict[str, str]) -> str:
    rows = [
        dict(p, node_a=labels.get(str(p.get("node_a")), p.get("node_a")),
             node_b=labels.get(str(p.get("node_b")), p.get("node_b")))
        for p in pairs
    ]  # fmt: skip
    cols = [c for c in PAIR_COLS if any(r.get(c) is not None for r in rows)]
    return (
        f"<details><summary>{len(rows)} pair row(s): intra-node (node_b = node_a) and inter-node"
        "</summary>" + html_table(rows, cols, fold=True) + "</details>"
        if rows
        else missing("No pair was measured.")
    )


def _kv(rows: Sequence[tuple[str, Any]]) -> str:
    return (
        "<dl class='kv'>"
        + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows)
        + "</dl>"
    )


def _json_block(title: str, value: Any) -> str:
    import json

    value = json_value(value)
    if value in (None, "", [], {}):
        return ""
    text = (
        value
        if isinstance(value, str)
        else json.dumps(value, indent=2, sort_keys=True, default=str)
    )
    return f"<h3>{esc(title)}</h3><pre>{esc(text)}</pre>"


def _heatmaps_html(
    nodes: Sequence[dict], pairs: Sequence[dict], links: Sequence[str]
) -> tuple[str, dict[str, bytes]]:
    """One heatmap per link, embedded (or why there is none), and the PNGs by file name."""
    pngs: dict[str, bytes] = {}
    figures = []
    for link in links:
        fig, caption = plot_heatmap(nodes, pairs, link)
        if fig is None:
            figures.append(f"<h3>link {esc(link)}</h3>" + missing(caption))
            continue
        name = heatmap_png_name(link)
        pngs[name] = figure_png(fig)
        figures.append(f"<h3>link {esc(link)}</h3>" + _img(name, pngs[name], caption))
    return "".join(figures), pngs


def _verdict_box(check: dict, nodes: Sequence[dict], suspects: Sequence[dict]) -> str:
    """The page's first word: the suspects and how to exclude them, no suspect, or no verdict;
    and the error the check stopped with."""
    if suspects:
        box = (
            f"<div class='warn'><b>{len(suspects)} suspect(s)</b>: exclude them from a sweep with "
            f"<code>{esc(EXCLUDE_HINT.format(fleet_id=check.get('fleet_id')))}</code>, or list "
            "them under <code>exclude_nodes:</code> in the sweep file (node id, IP or "
            "hostname).</div>"
        )
    elif judged(check):
        box = f"<div class='ok'>No suspect among {len(nodes)} node(s).</div>"
    else:
        box = missing(
            f"No verdict: the check ended {check.get('status') or 'unfinished'}; what it "
            "measured is below, unjudged."
        )
    if check.get("error"):
        box += missing(f"The check stopped with an error: {check['error']}")
    return box


def _notes_html(check: dict, labels: dict[str, str]) -> str:
    """The rule's notes (what it could not judge), node ids written as labels."""
    notes = json_value(check.get("notes"))
    note_items = notes if isinstance(notes, list) else ([notes] if notes else [])
    if not note_items:
        return "<p class='note'>None: the rule judged every node and pair.</p>"
    return (
        "<ul>"
        + "".join(
            f"<li>{esc(labelled(n, labels) if isinstance(n, str) else fmt_value('', n))}</li>"
            for n in note_items
        )
        + "</ul>"
    )


def _provenance_html(check: dict) -> str:
    return (
        _kv([(k, fmt_value(k, check.get(k))) for k in PROVENANCE if check.get(k) is not None])
        + _json_block("links", check.get("links"))
        + _json_block("suspect rule", check.get("rule"))
        + _json_block("versions", check.get("versions"))
        + _json_block("skipped nodes", check.get("skipped_nodes"))
    )


def render_fleet_html(
    check: dict,
    nodes: Sequence[dict],
    pairs: Sequence[dict],
    rounds: Sequence[dict],
    suspects: Sequence[dict],
) -> tuple[str, dict[str, bytes]]:
    """(the page, {``fleet_heatmap_<link>.png``: PNG bytes}) of one fleet check."""
    labels = node_labels(nodes)
    links = link_names(check, pairs)
    heatmaps, pngs = _heatmaps_html(nodes, pairs, links)
    cols, rows = node_rows(nodes, pairs, links)
    summary = [tuple(line.split(": ", 1)) for line in header_lines(check, nodes, pairs, rounds)]
    sections = [
        ("summary", "What was checked",
         _kv(summary) + "<h3>Notes</h3>" + _notes_html(check, labels)),
        ("heatmaps", "Node x node busbw", heatmaps or missing("No link was checked.")),
        ("suspects", "Suspects, and why", suspects_html(suspects, nodes)),
        ("nodes", "Nodes", html_table([dict(zip(cols, r, strict=True)) for r in rows], cols)
         if rows else missing("No node was checked.")),
        ("pairs", "Pairs", _pairs_table(pairs, labels)),
        ("rounds", "Rounds (wall times)", html_table(list(rounds), ROUND_COLS)
         if rounds else missing("No round was timed.")),
        ("provenance", "Provenance", _provenance_html(check)),
    ]  # fmt: skip
    meta = (
        f"{fmt_value('started_at', check.get('started_at'))} · status {check.get('status') or '–'}"
        f" · {len(nodes)} node(s) · links {', '.join(links) or '–'} · git "
        f"{(check.get('git_sha') or '–')[:12]}{' (dirty)' if check.get('git_dirty') else ''}"
    )
    page = _page(
        f"linksweep fleet check {check.get('fleet_id')}",
        meta,
        _verdict_box(check, nodes, suspects),
        sections,
    )
    return page, pngs


def _page(title: str, meta: str, box: str, sections: Sequence[tuple[str, str, str]]) -> str:
    """The self-contained page: title, meta line, verdict box, a nav of the sections, the
    sections, and where the rows live."""
    nav = "".join(f"<a href='#{sid}'>{esc(t)}</a>" for sid, t, _ in sections)
    body = "".join(f"<h2 id='{sid}'>{esc(t)}</h2>{content}" for sid, t, content in sections)
    generated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>"
        f"<h1>{esc(title)}</h1><p class='meta'>{esc(meta)}</p>{box}<nav>{nav}</nav>{body}"
        f"<p class='note'>Generated {generated} by <code>linksweep report --fleet</code>. "
        "The rows are in the tables fleet_checks, fleet_nodes, fleet_pairs, fleet_rounds and "
        "the view fleet_suspects (docs/schema.md).</p></main></body></html>\n"
    )
