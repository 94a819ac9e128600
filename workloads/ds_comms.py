"""DeepSpeed's comms logger, switched on only for the profiled pass, and its output format.

While the logger is enabled DeepSpeed synchronises the device after every collective, so it
stays off during timed steps (the run's DeepSpeed config has it disabled) and is enabled here,
for the profiled steps only (the last warmup step, or a pass after the timed steps). Sizes are converted to nccl-tests' convention (full buffer; DeepSpeed logs the local
shard for all_gather) so DDP and ZeRO rows in ``comms`` compare directly. Why the sizes differ,
and what DeepSpeed issues per step: ``orchestrator/comm_model.py``'s docstring.

Runs in rank processes; imports only the contract from linksweep.

May import: contract, deepspeed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from workloads.contract import CommRecord, canonical_op


def start() -> None:
    import deepspeed.comm as dcomm

    dcomm.reset_log()
    dcomm.configure(enabled=True, prof_all=True, verbose=False, debug=False)


def stop(world_size: int) -> tuple[CommRecord, ...]:
    import deepspeed.comm as dcomm

    summary = dcomm.log_summary(return_dict=True)  # synchronises all ranks
    dcomm.configure(enabled=False, prof_all=False)
    dcomm.reset_log()
    out = []
    for rec in parse_comms_summary(summary or {"summary": None}):
        try:
            op = canonical_op(rec.op)
        except ValueError:  # barriers and other non-collectives
            continue
        out.append(
            CommRecord(
                op=op,
                msg_bytes=nccl_msg_bytes(op, rec.msg_bytes, world_size),
                count=rec.count,
                total_time_s=rec.total_time_s,
            )
        )
    return tuple(out)


def nccl_msg_bytes(op: str, logged_bytes: int, world_size: int) -> int:
    """Convert a DeepSpeed comms-logger message size to the nccl-tests convention.

    DeepSpeed logs the local input shard for the all_gather family (``tensor`` argument), so the
    gathered buffer is ``logged x world_size``; every other op already logs the full buffer.
    """
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"number of ranks must be a positive int, got {world_size!r}")
    if canonical_op(op) == "all_gather":
        return int(logged_bytes) * world_size
    return int(logged_bytes)


@dataclass(frozen=True)
class LoggedComm:
    """One (op, message size) line of DeepSpeed's comms summary.

    op: the logged name as DeepSpeed wrote it (``all_reduce``, ``all_gather_into_tensor``,
        ``reduce_scatter_tensor``, ``broadcast``, ``log_summary_barrier``, ...; with the
        logger's ``debug`` option it carries ``| [Caller Func: f]``).
    msg_bytes: the size DeepSpeed logged (for all_gather: the local shard; see nccl_msg_bytes).
    count: how many such calls.
    total_time_s: summed latency of those calls (DeepSpeed synchronises around each op).
    """

    op: str
    msg_bytes: int
    count: int
    total_time_s: float


def parse_comms_summary(d: Mapping[str, Any]) -> list[LoggedComm]:
    """Parse ``deepspeed.comm.log_summary(return_dict=True)`` into records.

    DeepSpeed 0.19.8 returns ``{"summary": {op_name: {msg_size_bytes: {"count",
    "total_latency_ms", "avg_latency_ms", "tput_avg_gbps", "busbw_avg_gbps", "msg_size_bytes",
    "msg_size_str"}}}, "straggler_analysis": ... | None, "metadata": {"world_size", "rank",
    "timestamp"}}`` (``CommsLogger.log_all`` in ``deepspeed/utils/comms_logging.py``). Message
    sizes are int keys in the live dict and strings after a JSON round trip; both are accepted.
    Latencies are in milliseconds. Records come back sorted by (op, msg_bytes).
    """
    if "summary" not in d:
        raise ValueError(f"not a DeepSpeed comms summary: keys {sorted(d)}; expected 'summary'")
    summary = d["summary"]
    if summary is None:
        return []
    records = []
    for op, by_size in summary.items():
        for size_key, entry in by_size.items():
            msg_bytes = int(entry.get("msg_size_bytes", size_key))
            if msg_bytes != int(size_key):
                raise ValueError(
                    f"comms summary entry {op!r}/{size_key!r} has msg_size_bytes={msg_bytes}"
                )
            records.append(
                LoggedComm(
                    op=str(op),
                    msg_bytes=msg_bytes,
                    count=int(entry["count"]),
                    total_time_s=float(entry["total_latency_ms"]) / 1e3,
                )
            )
    records.sort(key=lambda r: (r.op, r.msg_bytes))
    return records


def summarize_records(
    records: Iterable[LoggedComm],
    world_size: int,
    optimizer_steps: int = 1,
    ignore_below_bytes: int = 64,
) -> dict[str, int]:
    """Measured message bytes per optimizer step by canonical op, nccl-tests convention.

    Comparable with ``CommExpectation.per_op``. Drops barriers and unknown ops (anything
    ``canonical_op`` rejects, e.g. ``log_summary_barrier``) and messages below
    ``ignore_below_bytes`` (scalar gradient-norm all_reduces). ``optimizer_steps`` is how many
    steps the profiled pass covered; totals are divided by it (floor).
    """
    if optimizer_steps < 1:
        raise ValueError(f"optimizer_steps must be >= 1, got {optimizer_steps!r}")
    totals: dict[str, int] = {}
    for r in records:
        if r.msg_bytes < ignore_below_bytes:
            continue
        try:
            op = canonical_op(r.op)
        except ValueError:
            continue
        totals[op] = totals.get(op, 0) + r.count * nccl_msg_bytes(op, r.msg_bytes, world_size)
    return {op: math.floor(b / optimizer_steps) for op, b in sorted(totals.items())}
