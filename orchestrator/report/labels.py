"""Variant labels and ordering, shared by the figures and the tables.

Pure functions of row dicts (keys as the schema's columns).

May import: orchestrator.analysis.stats.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.analysis.stats import (  # noqa: F401 - the figures' and tables' import
    GROUP_KEY,
    VARIANT_KEY,
    varying,
)

OVERLAP_ORDER = ("default", "true", "false")
GRAD_DTYPE_ORDER = ("fp32", "bf16")
STRATEGY_ORDER = ("ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp")
SYNC_ORDER = ("each", "last", "replicate_last")
RESHARD_ORDER = ("true", "false")
OFFLOAD_ORDER = ("none", "cpu", "nvme")
OP_ORDER = ("all_reduce", "all_gather", "reduce_scatter")


def order_index(value: Any, order: Sequence[Any]) -> tuple:
    return (order.index(value), "") if value in order else (len(order), str(value))


def strategy_label(row: dict) -> str:
    """``zero3+cpu`` for ZeRO-3 with CPU offload; ``ddp`` for DDP."""
    off = row.get("offload")
    return row["strategy"] if off in (None, "none") else f"{row['strategy']}+{off}"


def variant_sort_key(row: dict, link_order: Sequence[str]) -> tuple:
    return (
        order_index(row.get("strategy"), STRATEGY_ORDER),
        order_index(row.get("offload"), OFFLOAD_ORDER),
        row.get("bucket_mb") or 0,
        order_index(row.get("overlap_comm"), OVERLAP_ORDER),
        order_index(row.get("ddp_grad_dtype"), GRAD_DTYPE_ORDER),
        order_index(row.get("grad_sync"), SYNC_ORDER),
        order_index(row.get("reshard_after_forward"), RESHARD_ORDER),
        order_index(row.get("placement"), ("pack", "spread")),
        row.get("grad_accum") or 0,
        order_index(row.get("link"), link_order),
    )


def _compressed(row: dict) -> bool:
    """DDP all-reducing in a dtype other than its default fp32: named in labels (ZeRO's ``n/a``
    and DDP's fp32 beside it are not, so a sweep of DDP and ZeRO at defaults reads as before)."""
    return row.get("strategy") == "ddp" and row.get("ddp_grad_dtype") not in (None, "fp32")


def _sync_parts(row: dict, vary: set[str]) -> list[str]:
    """``sync=each`` and ``reshard=false`` where those keys vary and apply (not ``n/a``)."""
    parts = []
    for key, short in (("grad_sync", "sync"), ("reshard_after_forward", "reshard")):
        if key in vary and row.get(key) not in (None, "n/a"):
            parts.append(f"{short}={row[key]}")
    return parts


def group_label(row: dict, vary: set[str]) -> str:
    """A variant group's short name (every key but the link): strategy and grad_accum always;
    bucket, overlap, DDP's gradient dtype (when not fp32), the sync flavour, FSDP2's reshard
    setting and placement when they vary."""
    parts = [strategy_label(row), f"ga={row['grad_accum']}"]
    if "bucket_mb" in vary:
        parts.append(f"bucket={row['bucket_mb']}MB")
    if "overlap_comm" in vary:
        parts.append(f"overlap={row['overlap_comm']}")
    if "ddp_grad_dtype" in vary and _compressed(row):
        parts.append(f"grads={row['ddp_grad_dtype']}")
    parts += _sync_parts(row, vary)
    if "placement" in vary:
        parts.append(str(row["placement"]))
    return " ".join(parts)


def variant_label(row: dict, vary: set[str]) -> str:
    """A short variant name: the group's label, then the link."""
    return f"{group_label(row, vary)} {row['link']}"


def series_key(row: dict, vary: set[str]) -> tuple:
    key = [strategy_label(row)]
    if "placement" in vary:
        key.append(str(row["placement"]))
    if "bucket_mb" in vary:
        key.append(f"bucket={row['bucket_mb']}MB")
    if "overlap_comm" in vary:
        key.append(f"overlap={row['overlap_comm']}")
    if "ddp_grad_dtype" in vary and _compressed(row):
        key.append(f"grads={row['ddp_grad_dtype']}")
    key += _sync_parts(row, vary)
    return tuple(key)


def series_sort(key: tuple) -> tuple:
    strategy, _, offload = key[0].partition("+")
    return (
        order_index(strategy, STRATEGY_ORDER),
        order_index(offload or "none", OFFLOAD_ORDER),
        key[1:],
    )
