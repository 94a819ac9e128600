"""DeepSpeed's comms logger, switched on only for the profiled pass, and its output format.

While the logger is enabled DeepSpeed synchronises the device after every collective, so it
stays off during timed steps (the run's DeepSpeed config has it disabled) and is enabled here,
for the profiled steps only (the last warmup step, or a pass after the timed steps). Sizes are converted to nccl-tests' convention (full buffer; DeepSpeed logs the local
shard for all_gather) so DDP and ZeRO rows in ``comms`` compare directly. Why the sizes differ,
and what DeepSpeed issues per step: ``orchestrator/analysis/comm_model.py``'s docstring.

Runs in rank processes; imports only the contract from linksweep.

May import: contract, deepspeed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from workloads.contract import CommRecord, canonical_op

# torch dtype names -> the short names stored in ``comms.dtype`` (the names the sweep file uses
# for ``precision`` and ``ddp_grad_dtype``); any other dtype is stored as torch spells it.
DTYPE_NAMES = {
    "float32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "float64": "fp64",
}


def dtype_name(dtype: Any) -> str:
    """``torch.bfloat16`` (or ``"torch.bfloat16"``) -> ``"bf16"``; unknown dtypes as torch names
    them without the ``torch.`` prefix (``"int64"``)."""
    name = str(dtype).removeprefix("torch.")
    return DTYPE_NAMES.get(name, name)


def comm_record(
    op: str, msg_bytes: int, count: int, total_time_s: float, dtype: str | None
) -> CommRecord:
    """One :class:`CommRecord` with the dtype its elements crossed the link in."""
    return CommRecord(
        op=op, msg_bytes=msg_bytes, count=count, total_time_s=total_time_s, dtype=dtype
    )


DTYPE_TAG = " | dtype="
"""What :func:`tag_dtypes` appends to a logged op's name: ``all_gather_into_tensor | dtype=bf16``."""


def start() -> None:
    import deepspeed.comm as dcomm
    from deepspeed.comm import comm as dcomm_module

    dcomm.reset_log()
    tag_dtypes(dcomm_module)
    dcomm.configure(enabled=True, prof_all=True, verbose=False, debug=False)


def stop(world_size: int) -> tuple[CommRecord, ...]:
    import deepspeed.comm as dcomm
    from deepspeed.comm import comm as dcomm_module

    summary = dcomm.log_summary(return_dict=True)  # synchronises all ranks
    dcomm.configure(enabled=False, prof_all=False)
    untag_dtypes(dcomm_module)
    dcomm.reset_log()
    out = []
    for rec in parse_comms_summary(summary or {"summary": None}):
        try:
            op = canonical_op(rec.op)
        except ValueError:  # barriers and other non-collectives
            continue
        msg_bytes = nccl_msg_bytes(op, rec.msg_bytes, world_size)
        out.append(comm_record(op, msg_bytes, rec.count, rec.total_time_s, rec.dtype))
    return tuple(out)


def tensor_dtype(tensor: Any) -> str | None:
    """The dtype name of a collective's tensor argument (a list: its tensors' one dtype, or
    ``"mixed"``); None when there is no tensor (a barrier)."""
    if tensor is None:
        return None
    if isinstance(tensor, (list, tuple)):
        names = {tensor_dtype(getattr(t, "tensor", t)) for t in tensor} - {None}
        return names.pop() if len(names) == 1 else ("mixed" if names else None)
    dtype = getattr(tensor, "dtype", None)
    return None if dtype is None else dtype_name(dtype)


def tag_dtypes(module: Any) -> None:
    """Make DeepSpeed's comms logger keep each collective's dtype in the op's logged name.

    DeepSpeed 0.19.8 logs (op, message bytes) only: ``deepspeed/comm/comm.py`` ``timed_op``
    calls ``get_msg_size_from_args(func, *args, **kwargs)`` (a global of that module, from
    ``deepspeed/comm/utils.py``) before the collective and ``comms_logger.append(raw_name,
    record_name, latency, msg_size)`` after it, for every profiled op. ZeRO sends different
    collectives in different dtypes (bf16 training: parameters gathered in bf16, gradients
    reduced in ``communication_data_type``, norms all-reduced in fp32), so one dtype per run
    cannot describe it. The size function is wrapped to note the tensor's dtype, and ``append``
    to log the op under ``name + DTYPE_TAG + dtype``; :func:`parse_comms_summary` splits it off.
    A stack pairs the two calls, so a collective nested in another keeps its own dtype. Undone
    by :func:`untag_dtypes`; the wrappers are in place during the profiled pass only.
    """
    if hasattr(module, "_linksweep_untagged"):
        return
    size_of = module.get_msg_size_from_args
    logger = module.comms_logger
    append = logger.append
    pending: list[str | None] = []
    # deepspeed/comm/utils.py's helpers, star-imported into the module, as size_of uses them
    position_of, kwarg_of = module.get_tensor_position, module.get_tensor_kwarg

    def sized(func, *args, **kwargs):
        tensor = None
        position = position_of(func)
        if -1 < position < len(args):
            tensor = args[position]
        if tensor is None and kwargs:
            tensor = kwarg_of(func, kwargs)
        pending.append(tensor_dtype(tensor))
        return size_of(func, *args, **kwargs)

    def logged(raw_name, record_name, latency, msg_size):
        dtype = pending.pop() if pending else None
        name = record_name if dtype is None else f"{record_name}{DTYPE_TAG}{dtype}"
        return append(raw_name, name, latency, msg_size)

    module.get_msg_size_from_args = sized
    logger.append = logged
    module._linksweep_untagged = (size_of, logger)


def untag_dtypes(module: Any) -> None:
    """Undo :func:`tag_dtypes` (nothing to do when it was not applied)."""
    saved = module.__dict__.pop("_linksweep_untagged", None)
    if saved is None:
        return
    size_of, logger = saved
    module.get_msg_size_from_args = size_of
    del logger.append  # the instance attribute; the class's method shows through again


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
    dtype: the elements' dtype (``fp32``, ``bf16``...) when the name carried it
        (:func:`tag_dtypes`); None otherwise. ``op`` is then the name without the tag.
    """

    op: str
    msg_bytes: int
    count: int
    total_time_s: float
    dtype: str | None = None


def parse_comms_summary(d: Mapping[str, Any]) -> list[LoggedComm]:
    """Parse ``deepspeed.comm.log_summary(return_dict=True)`` into records.

    DeepSpeed 0.19.8 returns ``{"summary": {op_name: {msg_size_bytes: {"count",
    "total_latency_ms", "avg_latency_ms", "tput_avg_gbps", "busbw_avg_gbps", "msg_size_bytes",
    "msg_size_str"}}}, "straggler_analysis": ... | None, "metadata": {"world_size", "rank",
    "timestamp"}}`` (``CommsLogger.log_all`` in ``deepspeed/utils/comms_logging.py``). Message
    sizes are int keys in the live dict and strings after a JSON round trip; both are accepted.
    Latencies are in milliseconds. An op name tagged by :func:`tag_dtypes` gives the record its
    dtype. Records come back sorted by (op, msg_bytes, dtype).
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
            name, tagged, dtype = str(op).rpartition(DTYPE_TAG)
            records.append(
                LoggedComm(
                    op=name if tagged else dtype,
                    msg_bytes=msg_bytes,
                    count=int(entry["count"]),
                    total_time_s=float(entry["total_latency_ms"]) / 1e3,
                    dtype=dtype if tagged else None,
                )
            )
    records.sort(key=lambda r: (r.op, r.msg_bytes, r.dtype or ""))
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
