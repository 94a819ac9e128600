"""HTML building blocks: escaping, tables of rows, the "missing" box.

Pure string functions.

May import: fmt, labels.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from orchestrator.report.fmt import fmt_value
from orchestrator.report.labels import variant_sort_key


def esc(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _header(name: str) -> str:
    """Long column names may wrap after an underscore, never before a short unit (``_s``)."""
    parts = str(name).split("_")
    if len(name) <= 12 or len(parts) < 2:
        return esc(name)
    if len(parts[-1]) <= 2:
        parts[-2:] = [f"{parts[-2]}_{parts[-1]}"]
    return "_<wbr>".join(esc(p) for p in parts)


def _is_num_col(col: str, rows: list[dict]) -> bool:
    vals = [r.get(col) for r in rows if r.get(col) is not None]
    return bool(vals) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals)


def html_table(
    rows: list[dict],
    cols: Sequence[str] | None = None,
    headers: dict[str, str] | None = None,
    fold: bool = False,
) -> str:
    """A plain table; numbers right-aligned and formatted by their column's unit suffix.

    ``fold``: columns with one value in every row (or none at all) move to a line above the
    table, so a wide table keeps only the columns that tell rows apart.
    """
    if not rows:
        return "<p class='note'>(no rows)</p>"
    cols = list(cols or rows[0].keys())
    headers = headers or {}
    prefix = ""
    if fold and len(rows) > 1:
        same = [c for c in cols if len({fmt_value(c, r.get(c)) for r in rows}) == 1]
        empty = [c for c in same if rows[0].get(c) is None]
        const = [c for c in same if c not in empty]
        cols = [c for c in cols if c not in same]
        notes = []
        if const:
            notes.append(
                "same in every row: "
                + ", ".join(f"{headers.get(c, c)} = {fmt_value(c, rows[0].get(c))}" for c in const)
            )
        if empty:
            notes.append("not recorded: " + ", ".join(headers.get(c, c) for c in empty))
        prefix = "".join(f"<p class='note'>{esc(n)}</p>" for n in notes)
        if not cols:
            return prefix
    numeric = {c: _is_num_col(c, rows) for c in cols}
    head = "".join(f"<th>{_header(headers.get(c, c))}</th>" for c in cols)
    body = []
    for r in rows:
        cells = "".join(
            f"<td class='num'>{esc(fmt_value(c, r.get(c)))}</td>"
            if numeric[c]
            else f"<td>{esc(fmt_value(c, r.get(c)))}</td>"
            for c in cols
        )
        body.append(f"<tr>{cells}</tr>")
    return (
        f"{prefix}<div class='scroll'><table><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def sorted_variants(rows: list[dict], link_order: Sequence[str]) -> list[dict]:
    return sorted(rows, key=lambda r: variant_sort_key(r, link_order))


def missing(text: str) -> str:
    return f"<div class='missing'>{esc(text)}</div>"
