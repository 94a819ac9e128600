"""How strategies and variants are named, worded and ordered: every rule read off the catalog.

One home for the words a reader sees for a variant (the headline, the report's tables and
figures, ``linksweep compare`` and ``project``), so each is written once and a strategy or axis
added to ``workloads/catalog.py`` is named, labelled and ordered with no change here.

What an axis is named by (``Axis`` fields):

- a strategy: its ``display`` name in prose (``ZeRO-3``), its stored name in labels and keyed
  tables (``zero3``), its ``title`` over a report section;
- an axis *in the strategy's name* (``in_strategy_name``): beside the strategy, never as a word
  of its own. One that applies to every strategy joins it as ``+value`` (``ZeRO-3+cpu``); one
  that applies to some (a *flavour*: ``grad_sync``, ``reshard_after_forward``) goes in brackets
  in its ``phrase`` (``FSDP2 (reshard, sync each)``). Either is named where its value is not the
  strategy's default (``catalog.default``: plain ``DDP`` is DDP's own ``sync last``), and a
  strategy's ``named`` axes always (each FSDP2 flavour sends different bytes);
- any other axis: only where it varies among the rows shown (``stats.varying``), as its phrase
  in prose (``DDP (bf16 gradients)``, ``bucket 25 MB``) or ``short=value`` in a label
  (``grads=bf16``, ``bucket=25MB``: a phrase ``NAME VALUE UNIT`` gives the label its unit);
- nowhere where it does not apply to the row (``catalog.applies``; its placeholder ``na``).

Order: strategies in ``catalog.names()`` order, each axis's values in ``Axis.values`` order
(numbers by size, unknown values last); within a strategy, axes as its name reads them (joined,
then its ``named`` axes, then other flavours, then the rest in variant-key order), grad_accum
and the link last.

A row from an older database or an export that lacks an axis (or holds NULL) reads as its
strategy ran before the axis existed (``catalog.filled``: the default, or the placeholder where
the axis does not apply), so an old DDP or ZeRO variant matches the same variant of a new sweep
and never forms a key of its own.

May import: workloads.catalog.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from workloads import catalog

GA, LINK, STRATEGY = "grad_accum", "link", "strategy"
"""The key columns that are not axes of a name: the strategy names itself, grad_accum and the
link are the columns or panels of every table and figure keyed by variant."""


def _in_name() -> list[catalog.Axis]:
    return [a for a in catalog.AXES.values() if a.in_strategy_name and a.name != STRATEGY]


def joined_axes() -> tuple[str, ...]:
    """In-name axes that apply to every strategy: named as ``+value`` (``zero3+cpu``)."""
    knobs = {a.name for a in catalog.knob_axes()}
    return tuple(a.name for a in _in_name() if a.name not in knobs)


def flavour_axes() -> tuple[str, ...]:
    """In-name axes that apply to some strategies only: named in words in brackets."""
    joined = joined_axes()
    return tuple(a.name for a in _in_name() if a.name not in joined)


FLAVOUR_KEYS = flavour_axes()
"""The flavour axes at import (``grad_sync``, ``reshard_after_forward``): tables that name the
strategy with ``flavoured_strategy`` leave out their columns."""


def _entry(strategy: Any) -> catalog.Strategy | None:
    return catalog.STRATEGIES.get(str(strategy))


def display(strategy: Any) -> str:
    """``DDP``, ``ZeRO-3``, ``FSDP2``; a name not in the catalog as stored."""
    entry = _entry(strategy)
    return entry.display if entry else str(strategy)


def title(strategy: Any) -> str:
    """A report section's title: ``HSDP (FSDP2, replicate x shard)``."""
    entry = _entry(strategy)
    return entry.title if entry else str(strategy)


def with_flavour(row: Mapping[str, Any]) -> Mapping[str, Any]:
    """``row`` with every axis it lacks (or holds as NULL) read as its strategy's default, and a
    stored boolean as ``true``/``false`` text (``catalog.filled``); the row itself (not a copy)
    when nothing was missing."""
    out = catalog.filled(row)
    return row if out == dict(row) else out


def default_flavour(strategy: str) -> dict[str, Any]:
    """Each flavour axis's value that ``strategy`` runs when the grid names none; the
    placeholder where the axis does not apply (to the strategy, or to the defaults of the axes
    it requires: DDP's ``powersgd_rank`` where its compression is none)."""
    row = catalog.filled({"strategy": strategy})
    return {k: row[k] for k in flavour_axes()}


def applies(row: Mapping[str, Any], name: str) -> bool:
    """The axis applies to the row and the row holds a value of it (not the placeholder)."""
    value = row.get(name)
    return value is not None and value != catalog.AXES[name].na and catalog.applies(name, row)


def _named(row: Mapping[str, Any], name: str, always: Sequence[str] = ()) -> bool:
    """Is an in-name axis named beside the strategy (module doc)? ``always``: axes named even at
    their default (the accumulation check names the sync it judged)."""
    if not applies(row, name):
        return False
    entry = _entry(row.get(STRATEGY))
    if name in always or (entry is not None and name in entry.named):
        return True
    return row.get(name) != catalog.default(name, row.get(STRATEGY))


def _name_order(strategy: Any) -> list[str]:
    """The axes as a strategy's name reads them: joined, its ``named`` ones, other flavours."""
    entry = _entry(strategy)
    flavours = flavour_axes()
    named = [n for n in (entry.named if entry else ()) if n in flavours]
    return [*joined_axes(), *dict.fromkeys([*named, *flavours])]


def _rest() -> list[str]:
    """The axes not in a strategy's name, in variant-key order (grad_accum and link aside)."""
    in_name = {a.name for a in _in_name()}
    return [n for n in catalog.AXES if n not in in_name and n not in (STRATEGY, GA, LINK)]


def _phrase(name: str, value: Any) -> str:
    return catalog.AXES[name].phrase(value)


def joined(row: Mapping[str, Any]) -> str:
    """``+cpu`` (offload) where a joined axis is not the strategy's default; else empty."""
    row = catalog.filled(row)
    return "".join(f"+{row[n]}" for n in joined_axes() if _named(row, n))


def flavour_words(row: Mapping[str, Any], always: Sequence[str] = ()) -> list[str]:
    """The words of a variant's flavour: ``["reshard", "sync each"]`` for FSDP2 (always),
    ``["sync each"]`` for DDP's non-default sync, none for ZeRO (module doc)."""
    row = catalog.filled(row)
    flavours = flavour_axes()
    return [
        _phrase(n, row[n])
        for n in _name_order(row.get(STRATEGY))
        if n in flavours and _named(row, n, always)
    ]


def _bracket(name: str, words: Sequence[str]) -> str:
    return f"{name} ({', '.join(words)})" if words else name


def strategy_name(row: Mapping[str, Any], always: Sequence[str] = ()) -> str:
    """``DDP``, ``ZeRO-3+cpu``, ``FSDP2 (reshard, sync each)``, ``HSDP (no reshard, sync
    replicate_last)``, ``DDP (sync each)``: the display name, joined axes, flavour words."""
    return _bracket(display(row.get(STRATEGY)) + joined(row), flavour_words(row, always))


def flavoured_strategy(row: Mapping[str, Any]) -> str:
    """``fsdp (reshard, sync each)``, ``ddp (sync each)``, plain ``ddp`` / ``zero3``: the
    strategy as stored, so a table keeps its column's values, with the flavour beside it (the
    joined axes keep their own columns there)."""
    return _bracket(str(row.get(STRATEGY)), flavour_words(row))


def series_words(
    row: Mapping[str, Any], vary: Iterable[str], omit: Iterable[str] = (GA, LINK)
) -> list[str]:
    """The phrases of the axes outside the strategy's name that vary (``vary``) and apply to
    the row, in variant-key order: ``["bucket 25 MB", "overlap off"]``."""
    row, vary, omit = catalog.filled(row), set(vary), set(omit)
    return [_phrase(n, row[n]) for n in _rest() if n in vary and n not in omit and applies(row, n)]


def series_name(
    row: Mapping[str, Any], vary: Iterable[str], omit: Iterable[str] = (GA, LINK)
) -> str:
    """A variant's name in prose where ``vary`` differ: ``DDP (bf16 gradients, overlap off)``,
    ``FSDP2 (no reshard, sync each, placement spread)``; the strategy's name where none does."""
    words = [*flavour_words(row), *series_words(row, vary, omit)]
    return _bracket(display(row.get(STRATEGY)) + joined(row), words)


def _unit(a: catalog.Axis) -> str:
    """The unit of a phrase ``NAME VALUE UNIT`` (bucket's ``MB``); empty for other phrases."""
    if not isinstance(a.words, str) or "{value}" not in a.words:
        return ""
    before, after = a.words.split("{value}", 1)
    return after.strip() if before.strip() in ("{name}", a.short) else ""


def label(name: str, value: Any) -> str:
    """``ga=8``, ``bucket=25MB``, ``sync=each``: an axis in a label."""
    a = catalog.AXES[name]
    return f"{a.short}={value}{_unit(a)}"


def strategy_label(row: Mapping[str, Any]) -> str:
    """``zero3+cpu``, ``ddp``: the stored name with its joined axes."""
    return str(row.get(STRATEGY)) + joined(row)


def label_parts(
    row: Mapping[str, Any], vary: Iterable[str], omit: Iterable[str] = (GA, LINK)
) -> list[str]:
    """``short=value`` of every axis but the strategy's own and the joined ones that varies and
    applies to the row, in variant-key order (a flavour too: ``sync=last`` beside
    ``sync=each``)."""
    row, vary, omit = catalog.filled(row), set(vary), set(omit)
    skip = {STRATEGY, *joined_axes(), *omit}
    return [
        label(n, row[n]) for n in catalog.AXES if n in vary and n not in skip and applies(row, n)
    ]


def fixed_words(row: Mapping[str, Any], vary: Iterable[str]) -> list[str]:
    """What a table of one strategy's variants shares, worth a word under its title: each axis
    that does not vary (``vary``) and applies, where it is named (a strategy's ``named`` axes)
    or is not the strategy's default (``offload cpu``, ``bucket 25 MB``: a resolved size is
    never the default's word), as the name reads them."""
    row, vary = catalog.filled(row), set(vary)
    order = [*_name_order(row.get(STRATEGY)), *_rest()]
    return [_phrase(n, row[n]) for n in order if n not in vary and _named(row, n)]


def value_key(name: str, value: Any) -> tuple:
    """Where ``value`` sorts among the axis's: its ``values`` order, then numbers by size, then
    other text, NULL last."""
    a = catalog.AXES.get(name)
    values = a.values if a is not None and a.values else ()
    if value in values:
        return (0, values.index(value), "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (1, value, "")
    return (3, 0, "") if value is None else (2, 0, str(value))


def order_index(value: Any, order: Sequence[Any]) -> tuple:
    """Where ``value`` sorts in a given order; values outside it last, by text."""
    return (order.index(value), "") if value in order else (len(order), str(value))


def sort_key(row: Mapping[str, Any], link_order: Sequence[str] = ()) -> tuple:
    """Rows in display order (module doc): the strategy in ``catalog.names()`` order, its axes
    as its name reads them, the other axes, grad_accum, then the link in ``link_order``."""
    row = catalog.filled(row)
    strategy = row.get(STRATEGY)
    axes = [*_name_order(strategy), *_rest(), GA]
    return (
        order_index(strategy, catalog.names()),
        *(value_key(n, row.get(n)) for n in axes),
        order_index(row.get(LINK), list(link_order)),
    )
