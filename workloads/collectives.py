"""One collective recorder for every strategy: each collective a rank issues, as it is issued.

``with CollectiveRecorder() as rec:`` records every collective the rank's thread issues, with
its op, dtype, message bytes, group size and the (optimizer step, micro-batch) the caller set
with ``rec.at(step, micro_batch)`` before running that micro-batch. Bytes per micro-batch, per
optimizer step, and what the non-final micro-batches of each accumulation window sent come from
these records (the pure helpers below), never from parameter counts.

Where it listens, and why there. The three stacks reach ``torch.distributed`` differently
(torch 2.13, DeepSpeed 0.19.8):

- FSDP2 (``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``) calls
  ``dist.all_gather_single`` and ``dist.reduce_scatter_single`` (looked up on the module at call
  time) and, for HSDP, ``dist.all_reduce`` on the replicate group.
- DDP without a Python comm hook all-reduces its buckets from C++ (``Reducer``), never through
  Python; with torch's own hooks (``ddp_comm_hooks/``, which the project always registers:
  ``strategies.ddp_comm_hook``) each bucket goes through ``dist.all_reduce``: once
  (``allreduce_hook``, ``bf16_compress_hook``, ``fp16_compress_hook``), or three times for
  PowerSGD (``powerSGD_hook``: the uncompressed tensors, then the P factors, then the Q
  factors), the second and third from callbacks chained on the first one's future.
- DeepSpeed (``deepspeed/comm/torch.py``) keeps references taken when its backend was built
  (``self.all_gather_function = torch.distributed.all_gather_into_tensor``, same for
  ``reduce_scatter_tensor``) and calls ``torch.distributed.distributed_c10d`` functions directly
  (``_coalescing_manager``, ``all_gather_into_tensor``), so patching ``torch.distributed``'s
  attributes misses part of it.

All of them end in the dispatcher's ``c10d`` ops (``ProcessGroup::allreduce`` and friends call
``c10d::allreduce_`` through ``c10::Dispatcher``, also from DDP's C++ reducer), so the recorder
is a ``TorchDispatchMode`` that looks at those ops (and the functional ``_c10d_functional`` ones
that ``torch.compile`` issues), as torch's own ``CommDebugMode`` does. Checked on CPU with gloo,
2 ranks: ``dist.all_reduce`` (sync and async), ``all_gather_single``, ``all_gather_into_tensor``,
``all_gather`` (list), ``reduce_scatter_single``, ``reduce_scatter_tensor``, ``broadcast``, a
functional all-gather, DDP with and without a comm hook (the C++ reducer's all-reduce is seen),
FSDP2 and HSDP in forward and backward, and DDP, ZeRO-1, -2 and -3 through the project's own
strategies, where each op's bytes per step equalled the DDP hook's count and DeepSpeed's comms
logger's. On CUDA, backward runs in autograd's device thread; ``at::ThreadLocalState`` carries
the dispatch-mode stack there (read in torch's headers; not yet run on a GPU). A dispatch mode
sees every operator: recording cost about 15 us per operator on this CPU (20 000 small adds,
3-5 us each without it), so record profiled steps, not timed ones.

Callbacks and threads. A dispatch mode is thread-local, and a future's callbacks run in the
thread that completes it: on gloo with two or more ranks, a collective issued from a callback
of a future that completes later (PowerSGD's P and Q all-reduces) runs in gloo's worker thread,
where an untimed recorder does not listen (seen: only the first of PowerSGD's three records).
A ``timed`` recorder waits for each collective before handing its Work back, so the future is
complete when the hook chains its callback on it, and torch runs that callback at once, in the
rank's thread: every collective is seen. On NCCL a future completes when the collective is
enqueued, so its callbacks run at once either way. DDP's strategy records timed.

Message bytes follow nccl-tests (``doc/PERFORMANCE.md``), as ``contract.CommRecord`` and
``orchestrator/analysis/comm_model.py`` do: the full buffer, i.e. the tensor for all_reduce and
broadcast, the gathered OUTPUT for all_gather, the unscattered INPUT for reduce_scatter. Bytes a
rank moves over its link are ``msg_bytes x busbw_factor(op, group_size)``; ``group_size`` is kept
per record because HSDP's collectives run on sub-groups (shard and replicate), not the world.
A coalesced call (several tensors in one launch) is one record with the tensors' bytes summed.

May import: contract, ds_comms, torch.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from workloads.contract import CommRecord
from workloads.ds_comms import dtype_name


@dataclass(frozen=True)
class Collective:
    """One collective as one rank issued it."""

    op: str
    """A name of ``contract.CANONICAL_OPS``."""
    dtype: str
    """The elements' dtype on the link (``fp32``, ``bf16``; ``mixed`` for a coalesced call of
    several dtypes)."""
    msg_bytes: int
    """nccl-tests' message size: the full buffer (see the module docstring)."""
    group_size: int
    """Ranks in the process group it ran on."""
    step: int
    """The optimizer step the caller had set (``CollectiveRecorder.at``)."""
    micro_batch: int | None
    """The micro-batch within the step's accumulation window (0-based); None: outside any
    micro-batch (the optimizer step, or before the first ``at``)."""
    time_s: float = 0.0
    """Issue-to-completion time, device synchronised around it (``timed=True``); else 0."""


# ---------------------------------------------------------------------------------------------
# Which dispatcher ops are collectives, and how big their message is (pure: shapes in, bytes out).

# c10d op -> (canonical op, how to find the message: "arg:<i>" one tensor, "list:<i>" a list of
# tensors, "nested:<i>" a list of lists; the process group's position)
C10D_OPS: dict[str, tuple[str, str, int]] = {
    "allreduce_": ("all_reduce", "list:0", 1),
    "allreduce_coalesced_": ("all_reduce", "list:0", 1),
    "_allgather_base_": ("all_gather", "arg:0", 2),
    "allgather_": ("all_gather", "nested:0", 2),
    "allgather_coalesced_": ("all_gather", "nested:0", 2),
    "allgather_into_tensor_coalesced_": ("all_gather", "list:0", 2),
    "_reduce_scatter_base_": ("reduce_scatter", "arg:1", 2),
    "reduce_scatter_": ("reduce_scatter", "nested:1", 2),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter", "list:1", 2),
    "broadcast_": ("broadcast", "list:0", 1),
    "reduce_": ("reduce", "list:0", 1),
    "alltoall_base_": ("all_to_all", "arg:1", 2),
    "alltoall_": ("all_to_all", "list:1", 2),
}
"""Schemas as torch 2.13 declares them (``torch.ops.c10d.<op>.default._schema``); the message
is the output for the all_gather family and the input for reduce_scatter and all_to_all."""

# functional op -> (canonical op, "arg:0" or "list:0" input, position of group_size or None,
# position of group_name). The input of an all_gather is the local shard: x group_size.
FUNCTIONAL_OPS: dict[str, tuple[str, str, int | None, int]] = {
    "all_reduce": ("all_reduce", "arg:0", None, 2),
    "all_reduce_": ("all_reduce", "arg:0", None, 2),
    "all_reduce_coalesced": ("all_reduce", "list:0", None, 2),
    "all_gather_into_tensor": ("all_gather", "arg:0", 1, 2),
    "all_gather_into_tensor_out": ("all_gather", "arg:0", 1, 2),
    "all_gather_into_tensor_coalesced": ("all_gather", "list:0", 1, 2),
    "reduce_scatter_tensor": ("reduce_scatter", "arg:0", 2, 3),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", "list:0", 2, 3),
    "broadcast": ("broadcast", "arg:0", None, 2),
    "broadcast_": ("broadcast", "arg:0", None, 2),
    "all_to_all_single": ("all_to_all", "arg:0", None, 3),
}


def _tensors(args: tuple, where: str) -> list[Any]:
    kind, _, index = where.partition(":")
    value = args[int(index)]
    if kind == "arg":
        return [value]
    if kind == "list":
        return list(value)
    return [t for inner in value for t in inner]


def message(tensors: Iterable[Any]) -> tuple[int, str]:
    """(bytes, dtype name) of the tensors one call moves; ``mixed`` when their dtypes differ."""
    total, dtypes = 0, set()
    for t in tensors:
        total += t.numel() * t.element_size()
        dtypes.add(dtype_name(t.dtype))
    return total, (dtypes.pop() if len(dtypes) == 1 else "mixed")


# ---------------------------------------------------------------------------------------------
# The recorder (the side effect: it sits in the dispatcher while entered).


class CollectiveRecorder:
    """Records the collectives this thread issues while entered (see the module docstring).

    ``timed``: synchronise the device before each collective and wait for it after, so each
    record carries its own time (as the DDP hook's profiled pass does); it removes any overlap,
    so use it for a profiled pass only. ``device``: what to synchronise (CUDA); None: nothing.
    """

    def __init__(self, timed: bool = False, device: Any = None) -> None:
        self.records: list[Collective] = []
        self.step = 0
        self.micro_batch: int | None = None
        self.timed = timed
        self.device = device
        self._mode = None
        self._stance = None

    def at(self, step: int, micro_batch: int | None) -> None:
        """Collectives issued from now on belong to (``step``, ``micro_batch``)."""
        self.step = step
        self.micro_batch = micro_batch

    def __enter__(self) -> CollectiveRecorder:
        import torch

        # Compiled code runs eager while the recorder listens. Why: under a dispatch mode
        # dynamo's guards fail (they include the dispatch keys) and a frame that misses its
        # cache under a non-infra mode is skipped, and that frame's code is then run eager
        # for good: one profiled step would leave every timed step of a compiled run eager
        # (seen on torch 2.13: no compiled-graph call after it). With the stance dynamo is not
        # asked at all, and the graphs are found again after the recorder.
        self._stance = torch.compiler.set_stance("force_eager")
        self._stance.__enter__()
        self._mode = _dispatch_mode(self)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        mode, self._mode = self._mode, None
        mode.__exit__(*exc)
        stance, self._stance = self._stance, None
        stance.__exit__(*exc)

    def _sync(self) -> None:
        if self.device is not None and getattr(self.device, "type", None) == "cuda":
            import torch

            torch.cuda.synchronize(self.device)

    def _issue(self, func: Any, args: tuple, kwargs: dict) -> Any:
        namespace, name = func.namespace, func._opname
        if namespace == "c10d" and name in C10D_OPS:
            op, where, group_at = C10D_OPS[name]
            msg_bytes, dtype = message(_tensors(args, where))
            group_size = _group_size(args[group_at])
        elif namespace == "_c10d_functional" and name in FUNCTIONAL_OPS:
            op, where, size_at, name_at = FUNCTIONAL_OPS[name]
            msg_bytes, dtype = message(_tensors(args, where))
            if size_at is not None:
                group_size = int(args[size_at])
            else:
                from torch.distributed.distributed_c10d import _resolve_process_group

                group_size = _resolve_process_group(args[name_at]).size()
            if op == "all_gather":
                msg_bytes *= group_size
        else:
            return func(*args, **kwargs)
        if not self.timed:
            out = func(*args, **kwargs)
            elapsed = 0.0
        else:
            self._sync()
            t0 = time.perf_counter()
            out = func(*args, **kwargs)
            _wait(out, namespace)
            self._sync()
            elapsed = time.perf_counter() - t0
        self.records.append(
            Collective(op, dtype, msg_bytes, group_size, self.step, self.micro_batch, elapsed)
        )
        return out


def _group_size(group: Any) -> int:
    """Ranks in a process group as the dispatcher passes it: a TorchScript object, unboxed to
    the Python ``ProcessGroup`` (anything with ``size()`` is asked directly)."""
    if hasattr(group, "size"):
        return group.size()
    from torch.distributed import ProcessGroup

    return ProcessGroup.unbox(group).size()


def _wait(out: Any, namespace: str) -> None:
    """Wait for a collective the dispatcher returned: its Work (c10d), or its tensor
    (functional ops return before the data is there)."""
    import torch

    if namespace == "_c10d_functional":
        for t in out if isinstance(out, (list, tuple)) else [out]:
            torch.ops._c10d_functional.wait_tensor(t)
        return
    for item in out if isinstance(out, (list, tuple)) else [out]:
        if hasattr(item, "wait") and not isinstance(item, torch.Tensor):
            item.wait()


def _dispatch_mode(recorder: CollectiveRecorder) -> Any:
    """A fresh ``TorchDispatchMode`` that hands each operator to ``recorder._issue``."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Listening(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return recorder._issue(func, args, kwargs or {})

    return _Listening()


# ---------------------------------------------------------------------------------------------
# Pure aggregation: records in, bytes by op out.

ByOp = dict[str, int]


def _add(into: dict[str, int], r: Collective) -> None:
    into[r.op] = into.get(r.op, 0) + r.msg_bytes


def _kept(records: Iterable[Collective], min_bytes: int) -> list[Collective]:
    return [r for r in records if r.msg_bytes >= min_bytes]


def bytes_by_micro_batch(
    records: Iterable[Collective], min_bytes: int = 0
) -> dict[tuple[int, int | None], ByOp]:
    """(step, micro_batch) -> message bytes by op. ``min_bytes`` drops smaller messages (scalar
    all-reduces such as a gradient norm)."""
    out: dict[tuple[int, int | None], ByOp] = defaultdict(dict)
    for r in _kept(records, min_bytes):
        _add(out[(r.step, r.micro_batch)], r)
    return dict(out)


def bytes_by_step(records: Iterable[Collective], min_bytes: int = 0) -> dict[int, ByOp]:
    """step -> message bytes by op, the micro-batches and the optimizer step together."""
    out: dict[int, ByOp] = defaultdict(dict)
    for r in _kept(records, min_bytes):
        _add(out[r.step], r)
    return dict(out)


def non_final_bytes_by_step(
    records: Iterable[Collective], grad_accum: int, min_bytes: int = 0
) -> dict[int, ByOp]:
    """step -> bytes by op that the step's non-final micro-batches (0 .. grad_accum-2) sent:
    what gradient accumulation promises to skip. Every recorded step has an entry (empty when
    they sent nothing); with ``grad_accum`` 1 there are no non-final micro-batches."""
    if not isinstance(grad_accum, int) or grad_accum < 1:
        raise ValueError(f"grad_accum must be a positive int, got {grad_accum!r}")
    kept = _kept(records, min_bytes)
    out: dict[int, ByOp] = {r.step: {} for r in kept}
    for r in kept:
        if r.micro_batch is not None and r.micro_batch < grad_accum - 1:
            _add(out[r.step], r)
    return out


def mean_by_op(by_step: dict[int, ByOp]) -> ByOp:
    """Bytes by op per step, averaged over the steps given (floor; an op a step lacks counts 0
    there). Empty for no steps."""
    if not by_step:
        return {}
    totals: dict[str, int] = defaultdict(int)
    for by_op in by_step.values():
        for op, b in by_op.items():
            totals[op] += b
    return {op: b // len(by_step) for op, b in sorted(totals.items())}


def last_step_sequence(records: Iterable[Collective]) -> tuple[tuple[str, int, int], ...]:
    """The last recorded step's collectives in issue order: (op, message bytes, group size)."""
    records = list(records)
    if not records:
        return ()
    last = max(r.step for r in records)
    return tuple((r.op, r.msg_bytes, r.group_size) for r in records if r.step == last)


def comm_records(records: Iterable[Collective]) -> tuple[CommRecord, ...]:
    """The records as the ``comms`` table holds them: one ``CommRecord`` per (op, msg_bytes,
    dtype, group size) with its count and summed time, sorted."""
    grouped: dict[tuple[str, int, str, int], list[float]] = defaultdict(lambda: [0, 0.0])
    for r in records:
        entry = grouped[(r.op, r.msg_bytes, r.dtype, r.group_size)]
        entry[0] += 1
        entry[1] += r.time_s
    return tuple(
        CommRecord(op, b, int(count), t, dtype, group_size)
        for (op, b, dtype, group_size), (count, t) in sorted(grouped.items())
    )


class AccumulationProbe:
    """A strategy whose profiled steps are also recorded micro-batch by micro-batch, for the
    accumulation check: what the non-final micro-batches of each window sent, by op.

    It wraps any strategy (``micro_step``, ``optimizer_step``, ``profile_start`` /
    ``profile_stop``; everything else passes through). A strategy that records its own
    collectives (``FsdpStrategy``, ``DDPStrategy``: their ``collectives``, kept after
    ``profile_stop``) keeps its recorder, so only one is ever active; for ZeRO the probe opens
    one, untimed, beside DeepSpeed's comms logger. ``non_final_bytes``: bytes by op per
    optimizer step (mean over the profiled steps), None before a profiled pass.
    ``step_collectives``: the last profiled step's collectives in issue order, (op, message
    bytes, group size): what names a traced step's intervals
    (``orchestrator/analysis/trace_collectives.py``).
    """

    def __init__(self, strategy: Any, grad_accum: int) -> None:
        self._inner = strategy
        self._grad_accum = grad_accum
        self._recorder: CollectiveRecorder | None = None
        self._step = 0
        self._micro = 0
        self.non_final_bytes: ByOp | None = None
        self.step_collectives: tuple[tuple[str, int, int], ...] = ()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def profile_start(self) -> None:
        self._inner.profile_start()
        if not hasattr(self._inner, "collectives"):
            self._recorder = CollectiveRecorder().__enter__()

    def micro_step(self, batch: Any, boundary: bool) -> Any:
        if self._recorder is not None:
            self._recorder.at(self._step, self._micro)
        out = self._inner.micro_step(batch, boundary)
        self._micro += 1
        return out

    def optimizer_step(self) -> None:
        if self._recorder is not None:
            self._recorder.at(self._step, None)
        self._inner.optimizer_step()
        self._step += 1
        self._micro = 0

    def profile_stop(self) -> tuple[CommRecord, ...]:
        comms = self._inner.profile_stop()
        recorder, self._recorder = self._recorder, None
        if recorder is not None:
            recorder.__exit__(None, None, None)
        records = recorder.records if recorder is not None else self._inner.collectives
        self.non_final_bytes = mean_by_op(non_final_bytes_by_step(records, self._grad_accum))
        self.step_collectives = last_step_sequence(records)
        return comms

    def teardown(self) -> None:
        recorder, self._recorder = self._recorder, None
        if recorder is not None:
            recorder.__exit__(None, None, None)
        self._inner.teardown()
