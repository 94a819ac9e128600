"""nccl-tests beside linksweep's busbw: the report's table of both sources for the same link,
collective and message size (``linksweep import nccl-tests FILE --link L --sweep ID``).

``beside_rows`` joins linksweep's own microbenchmark (view ``link_bandwidth``, source linksweep)
with nccl-tests' imported figures (out-of-place and in-place, never pooled) per link x collective
x size; ``beside_html`` renders it. nccl-tests' values are shown as it printed them (two
decimals); linksweep's with three significant digits. Pure string functions.

May import: reading, fmt, markup, orchestrator.analysis.links.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.analysis.links import fmt_gbps
from orchestrator.report.fmt import fmt_msg_size
from orchestrator.report.markup import esc

if TYPE_CHECKING:
    from orchestrator.report.reading import ReportData


def beside_rows(linksweep: list[dict], nccl_tests: list[dict]) -> list[dict]:
    """One row per (link, collective, msg_bytes) of a link and collective nccl-tests measured:
    ``linksweep`` busbw (per placement, when the sweep measured several), ``oop`` and ``ip``
    (nccl-tests out-of-place and in-place busbw), the world sizes of each side."""
    pairs = {(r["link"], r["collective"]) for r in nccl_tests}
    out: dict[tuple, dict] = {}

    def row(r: dict) -> dict:
        key = (r["link"], r["collective"], r["msg_bytes"])
        return out.setdefault(
            key,
            {"link": key[0], "collective": key[1], "msg_bytes": key[2], "linksweep": {},
             "oop": None, "ip": None, "n_linksweep": None, "n_nccl_tests": None},
        )  # fmt: skip

    for r in linksweep:
        if (r["link"], r["collective"]) in pairs and (r.get("msg_bytes") or 0) > 0:
            x = row(r)
            x["linksweep"][r.get("placement") or ""] = r.get("busbw_gbps")
            x["n_linksweep"] = r.get("world_size")
    for r in nccl_tests:
        x = row(r)
        x["ip" if r.get("in_place") else "oop"] = r.get("busbw_gbps")
        x["n_nccl_tests"] = r.get("world_size")
    return [out[k] for k in sorted(out, key=lambda k: (str(k[0]), str(k[1]), k[2]))]


def _ours(values: dict) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return fmt_gbps(next(iter(values.values())))
    return ", ".join(f"{p}: {fmt_gbps(v)}" for p, v in sorted(values.items()))


def _printed(v: float | None) -> str:
    return "–" if v is None else f"{v:g}"


def beside_html(data: ReportData) -> str:
    """The table, one per link x collective; empty when the sweep holds no nccl-tests rows."""
    rows = beside_rows(data.bandwidth, data.bandwidth_nccl_tests)
    if not rows:
        return ""
    parts = [
        "<p class='note'>busbw in GB/s (1e9 B/s) per message size: linksweep's own "
        "microbenchmark (median over iterations) beside nccl-tests' output imported with "
        "<code>linksweep import nccl-tests</code>, its out-of-place and in-place columns as it "
        "printed them. Both use nccl-tests' bus-bandwidth factors (doc/PERFORMANCE.md), so "
        "equal link use gives equal busbw whatever the rank count; a gap is the difference "
        "between the two programs (gloo or torch.distributed vs nccl-tests' own kernels, "
        "timing, world size) on the same link. Rows: view <code>link_bandwidth</code>, "
        "column <code>source</code>.</p>"
    ]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["link"], r["collective"]), []).append(r)
    for (link, coll), rs in groups.items():
        n_ours = next((r["n_linksweep"] for r in rs if r["n_linksweep"]), None)
        n_theirs = next((r["n_nccl_tests"] for r in rs if r["n_nccl_tests"]), None)
        body = "".join(
            f"<tr><td class='num'>{esc(fmt_msg_size(r['msg_bytes']))}</td>"
            f"<td class='num'>{esc(_ours(r['linksweep']))}</td>"
            f"<td class='num'>{esc(_printed(r['oop']))}</td>"
            f"<td class='num'>{esc(_printed(r['ip']))}</td></tr>"
            for r in rs
        )
        parts.append(
            f"<table class='classic'><caption>{esc(link)}, {esc(coll)}: linksweep "
            f"({esc(n_ours or '?')} ranks) and nccl-tests ({esc(n_theirs or '?')} ranks)"
            "</caption><thead><tr><th>size</th><th>linksweep busbw</th><th>nccl-tests "
            "out-of-place</th><th>nccl-tests in-place</th></tr></thead>"
            f"<tbody>{body}</tbody></table>"
        )
    return "".join(parts)
