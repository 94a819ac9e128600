"""DDP's gradient compression: what each value of ``grad_compression`` does, PowerSGD's settings,
and the warmup rule that makes a PowerSGD run's measured steps compressed ones.

Every compression is one of torch's own DDP comm hooks
(``torch/distributed/algorithms/ddp_comm_hooks/``, torch 2.13), registered by
``workloads.strategies.DDPStrategy``:

- ``none``: ``default_hooks.allreduce_hook``, DDP's own fp32 all-reduce of each bucket (the
  gradients' dtype: linksweep keeps parameters, so gradients, in fp32 under bf16 autocast);
- ``bf16`` / ``fp16``: ``default_hooks.bf16_compress_hook`` / ``fp16_compress_hook``, each bucket
  cast to 2-byte floats (divided by the ranks first) before one all-reduce, cast back after;
- ``powersgd``: ``powerSGD_hook.powerSGD_hook`` with a ``PowerSGDState`` built as below. Per
  bucket it all-reduces three tensors, in the gradients' dtype (fp32): the tensors it does not
  compress, as one flat tensor; then the P factors of those it does; then their Q factors.

PowerSGD as torch defines it, with what matters for a benchmark made explicit:

- A gradient tensor is viewed as a matrix ``(shape[0], prod(shape[1:]))`` (n x m) and
  compressed to P (n x r) and Q (m x r), r = ``min(n, m, powersgd_rank)``, only where
  ``(n + m) * r * min_compression_rate < n * m`` (torch's ``_should_compress``); otherwise it is
  all-reduced whole. A 1-D tensor (a bias, a layer norm) is n x 1: never compressed.
  :func:`powersgd_split` applies the same rule to a model's shapes (the theory's bytes).
- ``min_compression_rate`` 2 (torch's default), error feedback and warm start on (torch's
  defaults; the docs advise keeping both), ``orthogonalization_epsilon`` 0 and
  ``batch_tensors_with_same_shape`` False (torch's defaults), a fixed ``random_seed`` (every
  rank draws the same initial Q; torch's default seed is also 0).
- ``start_powerSGD_iter``: torch's default is 1,000 iterations of plain all-reduce, so a short
  benchmark run would never compress. With error feedback or warm start torch requires it to be
  > 1 (DDP rebuilds its buckets after the first iteration, which would invalidate the error and
  the P/Q memory kept per bucket index; ``PowerSGDState`` raises otherwise), so linksweep uses
  2, the smallest value torch allows: :data:`POWERSGD_START_ITER`.

When compression starts. ``state.iter`` counts the backward passes that reach DDP's hook: it
grows by one when the hook sees a backward's last bucket (``maybe_increase_iter``,
``bucket.is_last()``). A backward under ``no_sync`` reaches no hook, so with ``grad_sync``
``last`` that is one per optimizer step, with ``each`` one per micro-batch (``grad_accum`` per
step). The hook compresses once ``state.iter >= start_powerSGD_iter``: synced backward number
``k`` (0-based, over the whole run) compresses iff ``k >= POWERSGD_START_ITER``. Optimizer step
``t``'s first synced backward is number ``t * syncs_per_step``, so step ``t`` compresses
throughout iff ``t * syncs_per_step >= POWERSGD_START_ITER``. The steps a run measures start at
the first profiled step where the profiled steps are the last warmup steps (``warmup_steps >
profile_steps > 0``, ``workloads.train.profiled_warmup_start``), else at the first timed step
(step ``warmup_steps``; the profiled pass then runs after the timed steps): see
:func:`powersgd_compresses` and :func:`powersgd_min_warmup_steps`.

May import: nothing (the standard library only).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

NONE = "none"
POWERSGD = "powersgd"

CAST_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2}
"""The compressions that cast each whole bucket (torch's ``bf16_compress_hook`` and
``fp16_compress_hook``): bytes per gradient element on the link."""

GRAD_BYTES = 4
"""Bytes per element of DDP's gradients (fp32: parameters stay fp32 under bf16 autocast):
what ``none`` sends, and the dtype of PowerSGD's uncompressed tensors and its P and Q factors."""

KNOWN = (NONE, *CAST_BYTES, POWERSGD)
"""The compressions the ranks implement (``workloads.strategies.ddp_comm_hook``); the catalog's
``grad_compression`` values must be among them."""

PROFILE_STEPS = 1
"""The profiled optimizer steps a run counts collectives over: ``orchestrator.sweep.planner``'s
``PROFILE_STEPS`` (a test keeps the two equal; the warmup rule depends on it)."""

POWERSGD_START_ITER = 2
"""``PowerSGDState.start_powerSGD_iter``: the synced backward (0-based) from which the hook
compresses; the smallest torch allows with error feedback or warm start (see the docstring)."""
POWERSGD_MIN_COMPRESSION_RATE = 2
"""``PowerSGDState.min_compression_rate``: torch's default."""
POWERSGD_RANDOM_SEED = 0
"""``PowerSGDState.random_seed``: fixed, the same on every rank (torch's default)."""
POWERSGD_USE_ERROR_FEEDBACK = True
POWERSGD_WARM_START = True
"""Error feedback and warm start: torch's defaults, which its docs advise keeping on."""


class Compression(NamedTuple):
    """A DDP variant's gradient compression."""

    name: str
    """none | bf16 | fp16 | powersgd (:data:`KNOWN`)."""
    powersgd_rank: int | None
    """PowerSGD's ``matrix_approximation_rank``; None for the other compressions."""


def compression_of(axes: Mapping[str, Any]) -> Compression:
    """A DDP variant's compression from its axes (``RunConfig.axes``, ``TheoryFacts.variant``):
    ``grad_compression`` (missing: ``none``, DDP's own) and, for PowerSGD, ``powersgd_rank``
    (default 1). An unknown value is a ValueError. (A row from before the axis reads through
    the catalog, whose ``renamed_from`` maps the older ``ddp_grad_dtype``.)"""
    name = axes.get("grad_compression") or NONE
    if name not in KNOWN:
        raise ValueError(f"grad_compression={name!r} is not one of {list(KNOWN)}")
    if name != POWERSGD:
        return Compression(name, None)
    rank = axes.get("powersgd_rank", 1)
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"powersgd_rank must be an int >= 1 with PowerSGD, got {rank!r}")
    return Compression(name, rank)


# ---------------------------------------------------------------------------------------------
# PowerSGD's split of a model's gradients (torch's rule, on shapes alone).


def powersgd_tensor(
    shape: Sequence[int], rank: int, min_compression_rate: float
) -> tuple[int, int]:
    """(P, Q) elements PowerSGD sends for one gradient tensor of ``shape``, or (0, 0) where it
    sends the tensor whole (``powerSGD_hook``: viewed as ``(shape[0], prod(shape[1:]))``,
    ``r = min(n, m, rank)``, compressed iff ``_should_compress``)."""
    if not shape:
        raise ValueError("a 0-d tensor has no matrix view (torch's hook views shape[0] x rest)")
    n, m = shape[0], math.prod(shape[1:])
    r = min(n, m, rank)
    if (n + m) * r * min_compression_rate < n * m:
        return n * r, m * r
    return 0, 0


class PowerSgdSplit(NamedTuple):
    """What PowerSGD all-reduces for a set of gradient tensors, in elements."""

    whole: int
    """Elements of the tensors sent uncompressed (the first all-reduce of each bucket)."""
    p: int
    """Elements of the P factors (the second)."""
    q: int
    """Elements of the Q factors (the third)."""
    compressed_tensors: int
    whole_tensors: int

    @property
    def elements(self) -> int:
        return self.whole + self.p + self.q


def powersgd_split(
    shapes: Iterable[Sequence[int]],
    rank: int,
    min_compression_rate: float = POWERSGD_MIN_COMPRESSION_RATE,
) -> PowerSgdSplit:
    """:func:`powersgd_tensor` over every gradient tensor DDP reduces (each parameter once: a
    tied one, as gpt2's wte / lm_head, once). Buckets do not change the sum: the rule is per
    tensor."""
    whole = p = q = compressed = kept = 0
    for shape in shapes:
        tp, tq = powersgd_tensor(shape, rank, min_compression_rate)
        if tp:
            p, q, compressed = p + tp, q + tq, compressed + 1
        else:
            whole, kept = whole + math.prod(shape), kept + 1
    return PowerSgdSplit(whole, p, q, compressed, kept)


# ---------------------------------------------------------------------------------------------
# When the hook compresses: the warmup rule (pure; the spec imports it).


def syncs_per_step(grad_accum: int, grad_sync: Any) -> int:
    """Backward passes per optimizer step that reach DDP's comm hook: ``grad_accum`` with
    ``grad_sync`` ``each``, else 1 (``last``: the non-final micro-batches run under
    ``no_sync``), as ``DDPStrategy`` reads it."""
    if not isinstance(grad_accum, int) or grad_accum < 1:
        raise ValueError(f"grad_accum must be a positive int, got {grad_accum!r}")
    return grad_accum if grad_sync == "each" else 1


def first_measured_step(warmup_steps: int, profile_steps: int) -> int:
    """The first optimizer step whose collectives or time a run keeps: the first profiled step
    where the profiled steps are the last warmup steps (``warmup_steps > profile_steps > 0``:
    ``workloads.train.profiled_warmup_start``), else the first timed step (the profiled pass,
    if any, runs after the timed steps)."""
    if profile_steps > 0 and warmup_steps > profile_steps:
        return warmup_steps - profile_steps
    return warmup_steps


def powersgd_compresses(
    warmup_steps: int, profile_steps: int, grad_accum: int, grad_sync: Any
) -> bool:
    """Does every step the run measures (its profiled step(s) and every timed step) already
    compress? True iff the first measured step's first synced backward is number
    ``>= POWERSGD_START_ITER``."""
    first = first_measured_step(warmup_steps, profile_steps)
    return first * syncs_per_step(grad_accum, grad_sync) >= POWERSGD_START_ITER


def powersgd_min_warmup_steps(
    grad_accum: int, grad_sync: Any, profile_steps: int = PROFILE_STEPS
) -> tuple[int, str]:
    """(N, why): the smallest ``warmup_steps`` from which every larger value too makes a
    PowerSGD run's measured steps compressed (:func:`powersgd_compresses`), so a refusal can say
    ``warmup_steps >= N``; ``why`` says it in words. ``profile_steps``: the planner's
    ``PROFILE_STEPS`` (0 where nothing is profiled).

    With c = ceil(POWERSGD_START_ITER / syncs_per_step) warmup steps the first timed step
    compresses; once warmup exceeds ``profile_steps`` the profiled steps are the last warmup
    steps and need c steps before them: ``profile_steps + c``. With c <= 1 the two ranges meet.
    With ``profile_steps`` 1: 3 for ``grad_sync`` last (or grad_accum 1), 1 for ``each`` with
    grad_accum >= 2. (With ``profile_steps`` >= 2 and one sync per step, warmup 2 also works,
    the profiled pass then following the timed steps, but 3 .. profile_steps + 1 do not.)
    """
    if not isinstance(profile_steps, int) or profile_steps < 0:
        raise ValueError(f"profile_steps must be an int >= 0, got {profile_steps!r}")
    syncs = syncs_per_step(grad_accum, grad_sync)
    c = math.ceil(POWERSGD_START_ITER / syncs)
    need = c if profile_steps == 0 or c <= 1 else profile_steps + c
    per_step = (
        f"{syncs} synced backward passes per optimizer step (grad_sync each, grad_accum "
        f"{grad_accum})"
        if syncs > 1
        else "one synced backward pass per optimizer step"
    )
    where = (
        f"the profiled step (the last of the warmup steps when they are more than "
        f"{profile_steps}) and every timed step"
        if profile_steps
        else "every timed step"
    )
    why = (
        f"PowerSGD compresses from synced backward pass {POWERSGD_START_ITER} on "
        f"(start_powerSGD_iter {POWERSGD_START_ITER}, the least torch allows with error "
        f"feedback and warm start), and with {per_step} {where} must already compress"
    )
    return need, why
