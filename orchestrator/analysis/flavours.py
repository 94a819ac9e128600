"""A variant's flavour (``grad_sync``, ``reshard_after_forward``) where a row does not say it.

Both are variant keys since schema v8 (``stats.VARIANT_KEY``): two FSDP2 flavours are two
variants, never one. A row read from a database before v8 (the migration fills them, but a row
from an export, a test, or a column left NULL may lack them) is taken to have run its strategy's
default flavour, the one it would run today when the grid names none:

- ``grad_sync``: ``spec.default_grad_sync`` (DDP ``last``: ``no_sync`` until the last
  micro-batch, what DDP always did before v8; FSDP2 ``each``; ZeRO ``n/a``);
- ``reshard_after_forward``: FSDP2's blocks reshard (``FsdpOptions``' default, ``true``); every
  other strategy ``n/a``.

So a DDP or ZeRO variant of an old sweep matches the same variant of a new one, and a row
without a flavour never forms a key of its own beside (or fails to sort against) one with it.

May import: orchestrator.sweep.spec, workloads.fsdp.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.sweep.spec import GRAD_DTYPE_NA, default_grad_sync
from workloads.fsdp import FSDP_STRATEGIES, FsdpOptions

FLAVOUR_KEYS = ("grad_sync", "reshard_after_forward")
DEFAULT_RESHARD = str(FsdpOptions.reshard_after_forward).lower()
"""``true``: stored as text, as the planner writes it."""


def default_flavour(strategy: str) -> dict[str, str]:
    """``{"grad_sync": ..., "reshard_after_forward": ...}`` that ``strategy`` runs when the
    grid names none (module doc); ``n/a`` where an axis does not apply."""
    reshard = DEFAULT_RESHARD if strategy in FSDP_STRATEGIES else GRAD_DTYPE_NA
    return {"grad_sync": default_grad_sync(strategy), "reshard_after_forward": reshard}


def with_flavour(row: Mapping[str, Any]) -> Mapping[str, Any]:
    """``row`` with a missing or NULL flavour key filled by its strategy's default; the row
    itself (not a copy) when it has both. A stored boolean reshard reads as ``true``/``false``."""
    missing = [k for k in FLAVOUR_KEYS if row.get(k) is None]
    reshard = row.get("reshard_after_forward")
    if not missing and not isinstance(reshard, bool):
        return row
    out = dict(row)
    if missing:
        defaults = default_flavour(str(row.get("strategy")))
        out.update({k: defaults[k] for k in missing})
    if isinstance(reshard, bool):
        out["reshard_after_forward"] = str(reshard).lower()
    return out


RESHARD_WORDS = {"true": "reshard", "false": "no reshard"}
"""As ``headline.RESHARD_WORDS``: blocks free their parameters after forward, or keep them."""


def flavour_words(row: Mapping[str, Any]) -> list[str]:
    """The words that name a variant's flavour, as the headline names it: an FSDP2 strategy
    always (``reshard``/``no reshard``, ``sync each``), DDP only where its sync is not its
    default (``sync each``), ZeRO never. A row without a flavour reads as its default."""
    row = with_flavour(row)
    strategy, sync = str(row.get("strategy")), str(row["grad_sync"])
    reshard = str(row["reshard_after_forward"])
    words = []
    if strategy in FSDP_STRATEGIES and reshard != GRAD_DTYPE_NA:
        words.append(RESHARD_WORDS.get(reshard, f"reshard {reshard}"))
    if sync != GRAD_DTYPE_NA and (
        strategy in FSDP_STRATEGIES or sync != default_grad_sync(strategy)
    ):
        words.append(f"sync {sync}")
    return words


def flavoured_strategy(row: Mapping[str, Any]) -> str:
    """``fsdp (reshard, sync each)``, ``hsdp (no reshard, sync replicate_last)``,
    ``ddp (sync each)``, plain ``ddp`` / ``zero3`` where there is no flavour to name: the
    strategy key as stored, so a table keeps its column's values, with the flavour beside it."""
    words = flavour_words(row)
    strategy = str(row.get("strategy"))
    return f"{strategy} ({', '.join(words)})" if words else strategy
