"""Collective microbenchmark: how fast is the link, measured with the collectives training uses.

Call ``run_linkbench`` on every rank of an already-initialised ``torch.distributed`` process group
(gloo on CPU, NCCL on GPU). For each op and each message size (powers of two from ``min_bytes``
to ``max_bytes``) it runs ``warmup_iters`` untimed iterations, then ``iters`` timed ones, and
returns one ``contract.LinkbenchRecord`` per (op, size) on every rank (the same values on all
ranks): op, backend, msg_bytes, per-iteration ``times_s`` (max over ranks), impl, skipped_reason.

Sizes follow nccl-tests (doc/PERFORMANCE.md): ``msg_bytes`` is "the size in bytes of the total
array", i.e. the full all_reduce buffer, the gathered OUTPUT of all_gather (``sendcount *
sizeof(dtype) * n``) and the unscattered INPUT of reduce_scatter (``recvcount * sizeof(dtype) *
n``). The driver turns times into algbw = msg_bytes / time_s and busbw (``orchestrator/
comm_model.py``, the one place bandwidths are computed). Tensors are float32, zero-filled (a sum of zeros stays finite however many
iterations run; collective speed does not depend on the values).

Timing, in the spirit of stas00's all_reduce_bench.py: every timed iteration starts after a
barrier, the device is synchronised before each clock read (on CUDA the collective is
asynchronous, so without the sync we would time the launch), and each iteration is timed on its
own. The per-iteration times are then all_reduced with MAX across ranks, because a collective is
done when its slowest rank is done; the driver's ``link_bandwidth`` view takes the median over
iterations.

The barrier is a 1-element all_reduce on ``device`` plus a sync, not ``dist.barrier()``: with
NCCL, ``barrier()`` without a bound device id guesses the GPU from the global rank, which is
wrong when a worker picks its GPU by local rank among several visible ones.

API choice, checked on torch 2.13: ``all_gather_single`` / ``reduce_scatter_single`` (the new
names), else ``all_gather_into_tensor`` / ``reduce_scatter_tensor`` (deprecated aliases in
2.13, the only names in older torch), else the list forms ``all_gather`` / ``reduce_scatter``,
which move the same bytes. gloo in torch 2.13 supports all of them; older gloo lacks
``reduce_scatter`` entirely, and then the op is reported with ``skipped_reason`` and no timings,
never emulated (all_reduce + slice moves twice the bytes and would be a different measurement).
The API that ran is in ``impl``.

CPU cost: gloo on two local processes moves a few GB/s at best, so by default on CPU the timed
iterations per size are capped so that iters x msg_bytes stays under ``CPU_ITER_BYTES_BUDGET``
(never below ``MIN_TIMED_ITERS``): the 64 MiB sizes then take seconds, not minutes. On CUDA
every size runs ``iters`` times.

May import: contract, device, torch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from workloads.contract import LinkbenchRecord
from workloads.device import sync

OPS = ("all_reduce", "all_gather", "reduce_scatter")

BYTES_PER_ELEMENT = 4  # float32

CPU_ITER_BYTES_BUDGET = 256 * 2**20
"""On CPU, the timed iterations of one size move at most this many message bytes."""

MIN_TIMED_ITERS = 3
"""Fewest timed iterations per size: a median of fewer is just a sample."""


def message_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Powers of two from the first one >= min_bytes up to max_bytes (inclusive)."""
    if min_bytes < 1 or max_bytes < min_bytes:
        raise ValueError(f"need 1 <= min_bytes <= max_bytes, got {min_bytes}, {max_bytes}")
    size = 1 << max(0, math.ceil(math.log2(min_bytes)))
    sizes = []
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


def timed_iters(msg_bytes: int, iters: int, iter_bytes_budget: int | None) -> int:
    """Timed iterations for one size: ``iters``, capped by the byte budget if there is one."""
    if iter_bytes_budget is None:
        return iters
    return max(min(iters, MIN_TIMED_ITERS), min(iters, iter_bytes_budget // msg_bytes))


def _barrier(device: torch.device, token: torch.Tensor) -> None:
    dist.all_reduce(token)
    sync(device)


def _all_gather_impls(n: int) -> list[tuple[str, Callable[[torch.Tensor, torch.Tensor], Any]]]:
    impls = []
    for name in ("all_gather_single", "all_gather_into_tensor"):
        fn = getattr(dist, name, None)
        if fn is not None:
            impls.append((name, lambda out, inp, fn=fn: fn(out, inp)))

    def list_form(out: torch.Tensor, inp: torch.Tensor) -> None:
        dist.all_gather(list(out.chunk(n)), inp)

    impls.append(("all_gather", list_form))
    return impls


def _reduce_scatter_impls(n: int) -> list[tuple[str, Callable[[torch.Tensor, torch.Tensor], Any]]]:
    impls = []
    for name in ("reduce_scatter_single", "reduce_scatter_tensor"):
        fn = getattr(dist, name, None)
        if fn is not None:
            impls.append((name, lambda out, inp, fn=fn: fn(out, inp)))
    if hasattr(dist, "reduce_scatter"):

        def list_form(out: torch.Tensor, inp: torch.Tensor) -> None:
            dist.reduce_scatter(out, list(inp.chunk(n)))

        impls.append(("reduce_scatter", list_form))
    return impls


def _pick_impl(
    op: str, device: torch.device, n: int
) -> tuple[str | None, Callable[..., Any] | None, str | None]:
    """First API for ``op`` that this backend runs, tried on a tiny tensor.

    Every rank has the same backend, so every rank fails or succeeds on the same candidate and
    they stay in step. Returns (name, fn, None) or (None, None, reason).
    """
    candidates = _all_gather_impls(n) if op == "all_gather" else _reduce_scatter_impls(n)
    errors = []
    for name, fn in candidates:
        full = torch.zeros(n, dtype=torch.float32, device=device)
        part = torch.zeros(1, dtype=torch.float32, device=device)
        try:
            if op == "all_gather":
                fn(full, part)
            else:
                fn(part, full)
            sync(device)
        except (RuntimeError, NotImplementedError, ValueError) as e:
            errors.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            continue
        return name, fn, None
    reason = f"backend {dist.get_backend()} has no working {op}"
    if errors:
        reason += " (" + "; ".join(errors) + ")"
    return None, None, reason


def _buffers(
    op: str, msg_bytes: int, n: int, device: torch.device
) -> tuple[int, torch.Tensor, torch.Tensor | None]:
    """(actual msg_bytes, first arg, second arg) for one size, nccl-tests sizing.

    all_gather and reduce_scatter need the full buffer to split evenly into n float32 shards;
    the size is rounded down to that, and the record carries the size that really ran.
    """
    numel = msg_bytes // BYTES_PER_ELEMENT
    if op == "all_reduce":
        buf = torch.zeros(numel, dtype=torch.float32, device=device)
        return numel * BYTES_PER_ELEMENT, buf, None
    shard = numel // n
    full = torch.zeros(shard * n, dtype=torch.float32, device=device)
    part = torch.zeros(shard, dtype=torch.float32, device=device)
    if op == "all_gather":
        return shard * n * BYTES_PER_ELEMENT, full, part  # output, input
    return shard * n * BYTES_PER_ELEMENT, part, full  # reduce_scatter: output, input


def run_linkbench(
    device: torch.device,
    max_bytes: int,
    min_bytes: int = 1024,
    warmup_iters: int = 2,
    iters: int = 5,
    ops: Sequence[str] = OPS,
    iter_bytes_budget: int | None | str = "auto",
) -> list[LinkbenchRecord]:
    """Time ``ops`` for power-of-two message sizes on the current process group.

    device: where the buffers live (``cuda:k`` for NCCL, ``cpu`` for gloo).
    max_bytes / min_bytes: message size range in bytes (nccl-tests sizing, see module doc).
    warmup_iters: untimed iterations per size (first-touch allocation, connection setup).
    iters: timed iterations per size (fewer on CPU for big sizes, see iter_bytes_budget).
    ops: subset of ``all_reduce``, ``all_gather``, ``reduce_scatter``.
    iter_bytes_budget: cap on iters x msg_bytes per size; "auto" = CPU_ITER_BYTES_BUDGET on CPU,
        no cap on CUDA; None = no cap.

    Must be called by every rank with the same arguments. Returns the same records on all ranks:
    per-iteration times (max over ranks); bandwidths are the driver's arithmetic
    (``orchestrator/analysis/comm_model.py``).
    """
    if not dist.is_initialized():
        raise RuntimeError("run_linkbench needs an initialised torch.distributed process group")
    unknown = [op for op in ops if op not in OPS]
    if unknown:
        raise ValueError(f"ops {unknown} not supported; allowed: {list(OPS)}")
    if iters < 1 or warmup_iters < 0:
        raise ValueError(f"need iters >= 1 and warmup_iters >= 0, got {iters}, {warmup_iters}")
    if iter_bytes_budget == "auto":
        iter_bytes_budget = CPU_ITER_BYTES_BUDGET if device.type == "cpu" else None
    n = dist.get_world_size()
    sizes = message_sizes(min_bytes, max_bytes)
    token = torch.zeros(1, dtype=torch.float32, device=device)
    backend = str(dist.get_backend())
    records: list[LinkbenchRecord] = []
    for op in ops:
        impl_name, fn, reason = _op_impl(op, device, n)
        if fn is None:
            records.append(LinkbenchRecord(op, backend, None, skipped_reason=reason))
            continue
        for size in sizes:
            msg_bytes, a, b = _buffers(op, size, n, device)
            if msg_bytes == 0:
                records.append(
                    LinkbenchRecord(
                        op,
                        backend,
                        size,
                        impl=impl_name,
                        skipped_reason=f"{size} B is less than one float32 per rank",
                    )
                )
                continue
            n_iters = timed_iters(msg_bytes, iters, iter_bytes_budget)
            times = _time_size(fn, a, b, device, token, warmup_iters, n_iters)
            records.append(LinkbenchRecord(op, backend, msg_bytes, times, impl=impl_name))
            del a, b
    return records


def _all_reduce(buf: torch.Tensor, _unused: Any) -> None:
    dist.all_reduce(buf)


def _op_impl(
    op: str, device: torch.device, n: int
) -> tuple[str | None, Callable[..., Any] | None, str | None]:
    """(API name, fn(first, second), None), or (None, None, why) for an op this backend lacks."""
    if op == "all_reduce":
        return "all_reduce", _all_reduce, None
    return _pick_impl(op, device, n)


def _time_size(
    fn: Callable[..., Any],
    a: torch.Tensor,
    b: torch.Tensor | None,
    device: torch.device,
    token: torch.Tensor,
    warmup_iters: int,
    n_iters: int,
) -> tuple[float, ...]:
    """Per-iteration times of one size, each the slowest rank's: warmup untimed, then every
    timed iteration after a barrier, the device synchronised before the clock is read."""
    for _ in range(warmup_iters):
        fn(a, b)
    sync(device)
    local = []
    for _ in range(n_iters):
        _barrier(device, token)
        t0 = time.perf_counter()
        fn(a, b)
        sync(device)
        local.append(time.perf_counter() - t0)
    # A collective ends when its slowest rank ends: MAX over ranks, per iteration.
    times = torch.tensor(local, dtype=torch.float64, device=device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    return tuple(times.cpu().tolist())
