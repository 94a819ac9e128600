"""Variant labels and ordering, shared by the figures and the tables: the label form of
``orchestrator.analysis.flavours`` (where every rule is read off the catalog), with grad_accum
always and the link last.

Pure functions of row dicts (keys as the schema's columns).

May import: orchestrator.analysis.flavours, orchestrator.analysis.stats.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from orchestrator.analysis.flavours import (  # noqa: F401 - the figures' and tables' import
    GA,
    LINK,
    label,
    label_parts,
    order_index,
    sort_key,
    strategy_label,
)
from orchestrator.analysis.stats import (  # noqa: F401 - the figures' and tables' import
    GROUP_KEY,
    VARIANT_KEY,
    varying,
)

OP_ORDER = ("all_reduce", "all_gather", "reduce_scatter")


def variant_sort_key(row: dict, link_order: Sequence[str]) -> tuple:
    """Variants in display order (``flavours.sort_key``), links in ``link_order``."""
    return sort_key(row, link_order)


def group_label(row: dict, vary: Iterable[str]) -> str:
    """A variant group's short name (every key but the link): the strategy (``zero3+cpu``) and
    grad_accum always, then ``short=value`` of each axis that varies and applies
    (``bucket=4MB``, ``overlap=false``, ``grads=bf16``, ``sync=each``, ``placement=spread``)."""
    return " ".join([strategy_label(row), label(GA, row.get(GA)), *label_parts(row, vary)])


def variant_label(row: dict, vary: Iterable[str]) -> str:
    """A short variant name: the group's label, then the link."""
    return f"{group_label(row, vary)} {row[LINK]}"


def series_key(row: dict, vary: Iterable[str]) -> tuple:
    """A figure's series (grad_accum on its x axis, the link its panel): the strategy, then
    ``short=value`` of each other axis that varies and applies."""
    return (strategy_label(row), *label_parts(row, vary))


def series_in_order(rows: Iterable[dict], vary: Iterable[str]) -> list[tuple]:
    """The rows' series (``series_key``) in display order (``variant_sort_key``)."""
    first: dict[tuple, dict] = {}
    for r in sorted(rows, key=lambda r: sort_key(r)):
        first.setdefault(series_key(r, vary), r)
    return list(first)
