"""Communication model: bandwidth accounting and the expected collective volume per step.

One job: what a DDP or ZeRO step sends (by strategy, stage, config and DDP's gradient
compression), in nccl-tests' message bytes and in wire bytes, and the bandwidths they give.

Vocabulary: a *step* is one optimizer step = ``grad_accum`` *micro-steps* (forward + backward of
one micro-batch). ``Psi`` (``param_bytes``) = number of parameters x bytes per element of the
dtype the gradients and parameters travel in (4 for fp32; 2 for bf16: DeepSpeed 0.19.8 reduces
and gathers bf16 models in bf16, checked with its comms logger).

Two quantities, two conventions
-------------------------------
``msg_bytes`` of a collective follows nccl-tests (doc/PERFORMANCE.md): the size of the FULL
buffer, i.e. the tensor for all_reduce / broadcast / reduce, the gathered OUTPUT for all_gather,
the unscattered INPUT for reduce_scatter. With that convention ``algbw = msg_bytes / time`` and
``busbw = algbw x busbw_factor(op, n)`` are nccl-tests' numbers, and

    wire bytes per rank = msg_bytes x busbw_factor(op, n)

is what each rank sends (and receives) over its link with a ring/bandwidth-optimal algorithm:
2(n-1)/n x S for all_reduce, (n-1)/n x S for all_gather and reduce_scatter. DDP's "2 Psi per
step" in FIELD_NOTES is that wire figure for large n; its message bytes are Psi.

``expected_msg_bytes_per_step`` and ``expected_wire_bytes_per_step`` give the two figures, so a
caller comparing against a comm hook / comms logger compares message bytes, and a caller
estimating link time compares wire bytes with the link's bandwidth.

DeepSpeed's comms logger uses a DIFFERENT size for all_gather: ``deepspeed/comm/comm.py``
``timed_op`` logs ``get_msg_size_from_args`` (``deepspeed/comm/utils.py``), the bytes of the
argument named ``tensor`` (or ``tensors`` / ``input_list`` / ``input_tensor_list``). For
``all_gather_into_tensor(output_tensor, tensor)`` and ``all_gather(tensor_list, tensor)`` that is
the local INPUT shard (1/n of the gathered output); for ``reduce_scatter_tensor(output_tensor,
tensor)`` it is the full input, for ``reduce_scatter(output, input_list)`` the sum of the input
list (the full input too), for ``all_reduce`` the tensor. ``nccl_msg_bytes`` converts a logged
size to the nccl-tests convention (x n for the all_gather family). (DeepSpeed's own
``calc_bw_log`` multiplies the size by n for both families, so its reduce_scatter algbw/busbw are
n times too high; and it reports all_reduce "tput" as 2S/t, in Gbit/s. We recompute from sizes
and latencies instead of using its bandwidth fields.)

What DeepSpeed 0.19.8 actually issues per step (with the ``serialized`` preset: overlap_comm False,
contiguous_gradients True, reduce_scatter True, allgather_partitions True, DeepSpeed's default
use_multi_rank_bucket_allreduce True; read in the installed source and confirmed with the comms
logger on 2 gloo ranks, tiny gpt2, fp32 and bf16, offload none and cpu):

- ZeRO-1 (``deepspeed/runtime/zero/stage_1_and_2.py``): gradient hooks do not reduce on non-
  boundary micro-steps (``process_gradients`` only reduces when ``partition_gradients`` or
  ``overlap_comm``); ``engine.allreduce_gradients`` (``deepspeed/runtime/engine.py``) calls
  ``optimizer.reduce_gradients`` only at the accumulation boundary. That fills contiguous buckets
  (``reduce_independent_p_g_buckets_and_remove_grads``) and ``average_tensor`` reduces each
  bucket: with ``use_multi_rank_bucket_allreduce`` (default True) every bucket goes through
  ``allreduce_and_scatter`` -> ``allreduce_bucket`` -> ``dist.all_reduce`` of the whole bucket,
  NOT a reduce_scatter (despite ``reduce_scatter: true``; DeepSpeed #5758, #6463). After the
  optimizer step, ``step`` -> ``all_gather_dp_groups`` -> ``all_gather_into_tensor_dp_groups``
  issues one ``all_gather_into_tensor`` per parameter group of the updated partitions.
  Per step: all_reduce Psi + all_gather Psi, flat in grad_accum. Wire: 3(n-1)/n Psi, not the
  ZeRO paper's 2(n-1)/n Psi (reduce_scatter + all_gather).
- ZeRO-2: ``partition_gradients`` is True, so the per-parameter hook
  (``create_gradient_handling_hooks`` -> ``process_gradients``) buckets and all_reduces
  gradients in EVERY micro-step's backward (DeepSpeed #2252), and the engine calls
  ``overlapping_partition_gradients_reduce_epilogue`` after every backward to flush the last
  bucket. Per step: all_reduce grad_accum x Psi + all_gather Psi (after the step).
- ZeRO-3 (``deepspeed/runtime/zero/stage3.py``, ``partition_parameters.py``,
  ``partitioned_param_coordinator.py``): parameters are gathered by
  ``all_gather_coalesced`` -> ``_dist_allgather_fn`` -> ``dist.allgather_fn`` ->
  ``all_gather_into_tensor`` when a module needs them (forward pre-hook, and again in backward if
  they were released), and gradients are reduced in every micro-step by
  ``__reduce_and_partition_ipg_grads`` -> ``__avg_scatter_grads`` -> ``reduce_scatter_coalesced``
  (``deepspeed/runtime/comm/coalesced_collectives.py``) -> ``reduce_scatter_tensor`` of the
  padded flat bucket. After the step each rank updates its own shard and only the persistent
  parameters (``stage3_param_persistence_threshold``) are gathered whole again (``stage3.py``
  ``_post_step``); with the threshold at 0 nothing is.
  Per step: grad_accum x (gathers x Psi all_gather + Psi reduce_scatter), where ``gathers`` is
  how many times each parameter is gathered per micro-step: 2 in the textbook schedule (forward
  and backward; our config sets ``stage3_max_reuse_distance: 0`` and
  ``stage3_param_persistence_threshold: 0`` for that). Measured: 1.73 on a 16 M-parameter model
  with a 1 M-element prefetch bucket, 1 on gpt2-tiny (3.4 M) with a 262,144-element bucket and
  no reuse (parameters the prefetcher fetched ahead are kept: ``__params_to_release``); exactly
  1 when the prefetch bucket or the reuse distance covers the whole model (DeepSpeed's
  prefetcher then marks every parameter as needed again and releases nothing until the step
  ends) and also 1 with DeepSpeed's default reuse distance (1e9) for any model under 1e9
  parameters. What the non-final micro-batches send exactly: ``zero_promise.py``. Tied weights (gpt2's wte/lm_head) are gathered at each
  use. So ``gathers`` is a parameter; the comms-logger profiled pass is the ground truth.

Not modelled: scalar all_reduces (gradient norm: 4-8 bytes once per step; fp16 overflow flag),
the ``log_summary`` barriers, one-off collectives at initialize and in the first steps
(parameter broadcast, ZeRO-3 trace checks), and alignment padding of partitions (a few bytes
per rank). ``summarize_records`` drops messages smaller than ``ignore_below_bytes`` for that
reason. With ``world_size == 1`` no bytes cross a link: the expectation is empty.

Which of these a strategy is comes from its catalog entry (``workloads/catalog.py``): the ``ddp``
family, or the ``zero`` family with its ``zero_stage``; FSDP2's theory is ``fsdp_theory.py``.

May import: workloads.catalog, workloads.compression, workloads.contract.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from workloads import catalog
from workloads import compression as rules
from workloads.contract import CANONICAL_OPS, canonical_op

__all__ = [
    "CANONICAL_OPS",
    "CommExpectation",
    "algbw_gbps",
    "busbw_factor",
    "busbw_gbps",
    "canonical_op",
    "expected_comm",
    "expected_msg_bytes_per_step",
    "expected_wire_bytes_per_step",
]

ZERO_STAGES = (1, 2, 3)
"""The ZeRO stages this module models (``Strategy.zero_stage``); with the ``ddp`` family, the
strategies it covers (FSDP2's theory is ``fsdp_theory``)."""

_FACTOR = {
    # nccl-tests doc/PERFORMANCE.md
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


def _check_n(n: int) -> None:
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"number of ranks must be a positive int, got {n!r}")


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests bus-bandwidth factor: all_reduce 2(n-1)/n; reduce_scatter, all_gather,
    all_to_all (n-1)/n; broadcast, reduce 1 (doc/PERFORMANCE.md)."""
    _check_n(n)
    return _FACTOR[canonical_op(op)](n)


def algbw_gbps(msg_bytes: float, time_s: float) -> float:
    """Algorithm bandwidth in GB/s (1 GB = 1e9 bytes): msg_bytes / time_s."""
    if time_s <= 0:
        raise ValueError(f"time_s must be > 0, got {time_s!r}")
    if msg_bytes < 0:
        raise ValueError(f"msg_bytes must be >= 0, got {msg_bytes!r}")
    return msg_bytes / time_s / 1e9


def busbw_gbps(op: str, n: int, msg_bytes: float, time_s: float) -> float:
    """Bus bandwidth in GB/s: algbw x busbw_factor(op, n)."""
    return algbw_gbps(msg_bytes, time_s) * busbw_factor(op, n)


@dataclass(frozen=True)
class CommExpectation:
    """Expected collective volume of one rank in one optimizer step.

    msg_bytes_per_step: sum of nccl-tests message bytes over the step's collectives.
    wire_bytes_per_step: sum of msg_bytes x busbw_factor: bytes each rank moves over its link.
    per_op: canonical op -> message bytes per step.
    note: how the figure was derived (DeepSpeed code path, assumptions).
    """

    msg_bytes_per_step: int
    wire_bytes_per_step: int
    per_op: dict[str, int] = field(default_factory=dict)
    note: str = ""


def _models(entry: catalog.Strategy) -> bool:
    return entry.family == catalog.DDP or (
        entry.family == catalog.ZERO and entry.zero_stage in ZERO_STAGES
    )


def modelled(strategy: str) -> catalog.Strategy:
    """``strategy``'s catalog entry, when this module models it (a DDP strategy, or a ZeRO one
    of a known stage); else a ValueError naming the strategies it models."""
    entry = catalog.STRATEGIES.get(strategy)
    if entry is None or not _models(entry):
        known = [s.name for s in catalog.STRATEGIES.values() if _models(s)]
        raise ValueError(f"strategy={strategy!r} is not one of {known}")
    return entry


def _validate(strategy: str, grad_accum: int, param_bytes: int, world_size: int) -> None:
    modelled(strategy)
    if not isinstance(grad_accum, int) or grad_accum < 1:
        raise ValueError(f"grad_accum must be a positive int, got {grad_accum!r}")
    if not isinstance(param_bytes, int) or param_bytes < 0:
        raise ValueError(f"param_bytes must be a non-negative int, got {param_bytes!r}")
    _check_n(world_size)


def expected_comm(
    strategy: str,
    grad_accum: int,
    param_bytes: int,
    world_size: int,
    zero3_gathers_per_micro_step: float = 2.0,
) -> CommExpectation:
    """Expected per-rank collective volume of one optimizer step (see module docstring).

    strategy: a catalog name of the ddp or zero family (:func:`modelled`); a ZeRO strategy
        issues what its ``zero_stage`` does.
    grad_accum: micro-steps per optimizer step.
    param_bytes: Psi = n_params x bytes per element of the communicated dtype.
    world_size: data-parallel ranks n.
    zero3_gathers_per_micro_step: how many times ZeRO-3 gathers each parameter per micro-step
        (2 = forward and backward, the textbook schedule; 1 when DeepSpeed keeps parameters
        gathered from forward to backward).
    """
    _validate(strategy, grad_accum, param_bytes, world_size)
    if zero3_gathers_per_micro_step < 0:
        raise ValueError(
            f"zero3_gathers_per_micro_step must be >= 0, got {zero3_gathers_per_micro_step!r}"
        )
    psi = param_bytes
    if world_size == 1:
        return CommExpectation(0, 0, {}, "world_size 1: no inter-rank traffic")
    entry = modelled(strategy)
    stage = entry.zero_stage
    if entry.family == catalog.DDP:
        per_op = {"all_reduce": psi}
        note = (
            "DDP: one all_reduce of all gradients per optimizer step (no_sync on the first "
            "grad_accum-1 micro-steps), in buckets; flat in grad_accum"
        )
    elif stage == 1:
        per_op = {"all_reduce": psi, "all_gather": psi}
        note = (
            "ZeRO-1 (stage_1_and_2.py): gradients all_reduced in buckets at the accumulation "
            "boundary only (reduce_gradients -> average_tensor -> allreduce_bucket), updated "
            "partitions all_gathered after the step (all_gather_dp_groups); flat in grad_accum"
        )
    elif stage == 2:
        per_op = {"all_reduce": grad_accum * psi, "all_gather": psi}
        note = (
            "ZeRO-2 (stage_1_and_2.py): gradients all_reduced in buckets in every micro-step's "
            "backward (grad hooks -> reduce_independent_p_g_buckets_and_remove_grads -> "
            "average_tensor), updated partitions all_gathered after the step; grows with grad_accum"
        )
    else:
        gathered = grad_accum * zero3_gathers_per_micro_step * psi
        per_op = {"all_gather": int(round(gathered)), "reduce_scatter": grad_accum * psi}
        note = (
            f"ZeRO-3 (stage3.py, partition_parameters.py): each micro-step gathers every "
            f"parameter {zero3_gathers_per_micro_step:g}x (all_gather_into_tensor) and "
            "reduce_scatters all gradients (reduce_scatter_coalesced); no all_gather after the "
            "step; grows with grad_accum"
        )
    wire = sum(b * busbw_factor(op, world_size) for op, b in per_op.items())
    return CommExpectation(
        msg_bytes_per_step=int(sum(per_op.values())),
        wire_bytes_per_step=int(round(wire)),
        per_op=per_op,
        note=note,
    )


def expected_msg_bytes_per_step(
    strategy: str, grad_accum: int, param_bytes: int, world_size: int, **kwargs: Any
) -> int:
    """Message bytes (nccl-tests convention) per rank per optimizer step."""
    return expected_comm(strategy, grad_accum, param_bytes, world_size, **kwargs).msg_bytes_per_step


def expected_wire_bytes_per_step(
    strategy: str, grad_accum: int, param_bytes: int, world_size: int, **kwargs: Any
) -> int:
    """Bytes each rank moves over its link per optimizer step (msg bytes x busbw factor)."""
    return expected_comm(
        strategy, grad_accum, param_bytes, world_size, **kwargs
    ).wire_bytes_per_step


COMM_DTYPE_BYTES = {
    "fp32": 4,
    "float32": 4,
    "torch.float32": 4,
    "bf16": 2,
    "bfloat16": 2,
    "torch.bfloat16": 2,
    "fp16": 2,
    "float16": 2,
    "torch.float16": 2,
}


def ddp_reduction(
    compression: str,
    n_params: int,
    shapes: Iterable[Sequence[int]] | None = None,
    powersgd_rank: int | None = None,
) -> tuple[int | None, str]:
    """(message bytes, words): what one reduction of every DDP gradient (one backward that
    syncs) all-reduces under ``grad_compression`` (``workloads/compression.py``).

    ``none``: every gradient in fp32 (4 bytes: autocast keeps parameters, so gradients, in
    fp32); ``bf16`` / ``fp16``: every gradient in 2 bytes (torch's compress hooks);
    ``powersgd``: per parameter tensor (``shapes``, each once, as DDP holds them), the P and Q
    factors where torch's ``_should_compress`` allows, the whole tensor elsewhere, all in fp32
    (``compression.powersgd_split``). (None, why) where PowerSGD has no shapes, or shapes that
    do not add up to the run's ``n_params``.
    """
    if compression == rules.POWERSGD:
        return _powersgd_reduction(n_params, shapes, powersgd_rank)
    if compression in rules.CAST_BYTES:
        words = f"grad_compression {compression} ({compression}_compress_hook)"
        return n_params * rules.CAST_BYTES[compression], f"{words}; all_reduce in {compression}"
    if compression == rules.NONE:
        words = "grad_compression none (allreduce_hook); all_reduce in fp32"
        return n_params * rules.GRAD_BYTES, words
    raise ValueError(f"grad_compression={compression!r} is not one of {list(rules.KNOWN)}")


def _powersgd_reduction(
    n_params: int, shapes: Iterable[Sequence[int]] | None, rank: int | None
) -> tuple[int | None, str]:
    """:func:`ddp_reduction` for PowerSGD."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"powersgd_rank must be an int >= 1, got {rank!r}")
    head = f"grad_compression powersgd rank {rank} (powerSGD_hook)"
    if shapes is None:
        return None, f"{head}: no parameter shapes for this model, so no figure"
    shapes = [tuple(s) for s in shapes]
    held = sum(math.prod(s) for s in shapes)
    if held != n_params:
        return None, (
            f"{head}: the model's parameter shapes hold {held} elements, the run trained "
            f"{n_params}: no figure"
        )
    split = rules.powersgd_split(shapes, rank)
    words = (
        f"{head}: per bucket three all_reduces (the tensors sent whole, then the P factors, "
        f"then the Q factors); {split.compressed_tensors} matrices sent as rank-{rank} P and Q "
        f"({split.p + split.q} elements, min_compression_rate "
        f"{rules.POWERSGD_MIN_COMPRESSION_RATE}), {split.whole_tensors} tensors whole "
        f"({split.whole} elements), of {n_params}; all_reduce in fp32"
    )
    return split.elements * rules.GRAD_BYTES, words


def zero_bytes_per_param(precision: str, ds_config: dict) -> int | None:
    """Bytes per element DeepSpeed reduces gradients in: its communication_data_type if set, else
    the model's dtype (bf16 models reduce and gather in bf16). None when we cannot tell. (ZeRO
    gathers parameters in their own dtype, the model's, whatever communication_data_type says:
    ``partition_parameters.py`` ``get_allgather_dtype``.)"""
    cdt = ds_config.get("communication_data_type")
    if cdt is None:
        return 2 if precision == "bf16" else 4
    return COMM_DTYPE_BYTES.get(str(cdt).lower())


def _zero3_gathers(zero: dict, n_params: int) -> tuple[float | None, str]:
    """How often ZeRO-3 gathers each parameter per micro-step, from the effective config."""
    threshold = int(zero.get("stage3_param_persistence_threshold") or 0)
    if threshold > 0:
        return None, (
            f"ZeRO-3 keeps every parameter under stage3_param_persistence_threshold={threshold} "
            "elements whole on every rank (never gathered); which parameters that covers "
            "depends on their shapes, which this model does not track: measured bytes only"
        )
    return zero3_reuse_gathers(zero, n_params)


def zero3_reuse_gathers(zero: dict, n_params: int) -> tuple[float | None, str]:
    """How often ZeRO-3 gathers each parameter it does not keep whole, per micro-step, from the
    reuse distance and the prefetch bucket: 1 when either covers the model (``n_params``
    elements), 2 with no reuse (the textbook schedule), None in between."""
    reuse = int(zero.get("stage3_max_reuse_distance") or 0)
    prefetch = int(zero.get("stage3_prefetch_bucket_size") or 0)
    if reuse >= n_params or prefetch >= n_params:
        return 1.0, (
            f"stage3_max_reuse_distance={reuse} or stage3_prefetch_bucket_size={prefetch} "
            f"covers the model ({n_params} parameters): gathered once per micro-step"
        )
    if reuse == 0:
        return 2.0, "stage3_max_reuse_distance=0: gathered in forward and again in backward"
    return None, (
        f"stage3_max_reuse_distance={reuse} is between 0 and the model size: whether backward "
        "re-gathers a parameter depends on DeepSpeed's trace: measured bytes only"
    )


def run_expectation(
    strategy: str,
    grad_accum: int,
    precision: str,
    world_size: int,
    n_params: int,
    ds_config: dict | None = None,
    ddp_compression: str = "none",
    ddp_sync_each: bool = False,
    ddp_shapes: Iterable[Sequence[int]] | None = None,
    powersgd_rank: int | None = None,
) -> tuple[CommExpectation | None, str | None]:
    """(analytic bytes per optimizer step, note) for one run of a DDP or ZeRO strategy
    (:func:`modelled`), following the run's effective DeepSpeed config (``runs.ds_config``,
    what DeepSpeed parsed after its defaults).

    (None, None) with one rank (nothing crosses a link). (None, why) where the model cannot say
    (ZeRO-3 with a persistence threshold, an intermediate reuse distance, an unknown
    communication dtype, or no effective config): measured bytes stay the ground truth.

    DDP reduces fp32 gradients (autocast keeps parameters, so gradients, in fp32), whether it
    overlaps or not, compressed as ``ddp_compression`` says (:func:`ddp_reduction`: bf16 and
    fp16 send 2 bytes per parameter, PowerSGD its factors and the tensors it leaves whole, from
    ``ddp_shapes`` and ``powersgd_rank``). With ``ddp_sync_each`` (``grad_sync: each``: no
    ``no_sync``) every micro-batch all-reduces.
    ZeRO-1 reduces at the accumulation boundary only, with or without ``overlap_comm`` (with it,
    the gradient hooks reduce during the boundary backward: ``stage_1_and_2.py``
    ``reduce_ready_partitions_and_remove_grads``; measured flat in grad_accum on 2 gloo ranks).
    ZeRO-3 gathers once or twice per micro-step (:func:`_zero3_gathers`).
    """
    if world_size < 2:
        return None, None
    if modelled(strategy).family == catalog.DDP:
        per_reduction, words = ddp_reduction(ddp_compression, n_params, ddp_shapes, powersgd_rank)
        if per_reduction is None:
            return None, words
        return _ddp_expectation(
            strategy, grad_accum, world_size, per_reduction, words, ddp_sync_each
        )
    return _zero_expectation(strategy, grad_accum, precision, world_size, n_params, ds_config)


def _ddp_expectation(
    strategy: str,
    grad_accum: int,
    world_size: int,
    per_reduction: int,
    words: str,
    sync_each: bool,
) -> tuple[CommExpectation, str]:
    """:func:`run_expectation` for a DDP strategy: ``per_reduction`` bytes (:func:`ddp_reduction`)
    once per step, or once per micro-batch with ``sync_each``."""
    reductions = grad_accum if sync_each else 1
    exp = expected_comm(strategy, grad_accum, per_reduction * reductions, world_size)
    each = "; grad_sync each: every micro-batch all-reduces" if sync_each else ""
    return exp, f"{exp.note}; {words}{each}"


def _zero_expectation(
    strategy: str,
    grad_accum: int,
    precision: str,
    world_size: int,
    n_params: int,
    ds_config: dict | None,
) -> tuple[CommExpectation | None, str]:
    """:func:`run_expectation` for a ZeRO strategy, by its stage (``Strategy.zero_stage``) and
    the run's effective DeepSpeed config."""
    if not ds_config:
        return None, "no effective DeepSpeed config was reported for this run"
    zero = ds_config.get("zero_optimization") or {}
    bytes_per_param = zero_bytes_per_param(precision, ds_config)
    if bytes_per_param is None:
        cdt = ds_config.get("communication_data_type")
        return None, f"communication_data_type={cdt!r}: unknown element size"
    psi = n_params * bytes_per_param
    stage = modelled(strategy).zero_stage
    if stage == 1 and zero.get("overlap_comm"):
        exp = expected_comm(strategy, grad_accum, psi, world_size)
        note = (
            "ZeRO-1 with overlap_comm: the gradient hooks reduce during the boundary "
            "micro-step's backward only (stage_1_and_2.py reduce_ready_partitions_and_remove_"
            "grads), so the bytes are those without overlap: all_reduce Psi + all_gather Psi "
            "after the step; flat in grad_accum"
        )
        return exp, note
    if stage != 3:
        exp = expected_comm(strategy, grad_accum, psi, world_size)
        return exp, exp.note
    gathers, why = _zero3_gathers(zero, n_params)
    if gathers is None:
        return None, why
    exp = expected_comm(strategy, grad_accum, psi, world_size, zero3_gathers_per_micro_step=gathers)
    return exp, f"{exp.note} ({why})"


def bandwidths_gbps(
    op: str, world_size: int, msg_bytes: float, time_s: float
) -> tuple[float | None, float | None]:
    """(algbw, busbw) in GB/s, or (None, None) when nothing was timed (time_s <= 0)."""
    if time_s <= 0:
        return None, None
    algbw = algbw_gbps(msg_bytes, time_s)
    return algbw, algbw * busbw_factor(op, world_size)


AlgbwBySize = dict[tuple[str, int], float]
"""(op, msg_bytes) -> a link's measured algbw in GB/s (the ``link_bandwidth`` view's median)."""


def predict_comm_s(
    comms_per_step: Iterable[tuple[str, int, float]], link_algbw: AlgbwBySize
) -> float | None:
    """Seconds one step's collectives take at a link's measured bandwidth.

    ``comms_per_step``: (op, msg_bytes, count per step). Each is timed at ``link_algbw``, the
    microbenchmark's algbw for that op at the nearest measured size (log scale; beyond the largest size, the
    largest size's bandwidth). time = msg_bytes / algbw, i.e. wire bytes / busbw in nccl-tests'
    terms. None when an op was not measured on the link.
    """
    total = 0.0
    for op, msg_bytes, count in comms_per_step:
        sizes = sorted(size for o, size in link_algbw if o == op)
        if not sizes:
            return None
        target = max(1, msg_bytes)
        size = min(sizes, key=lambda s: abs(math.log2(s) - math.log2(target)))
        total += count * msg_bytes / (link_algbw[(op, size)] * 1e9)
    return total


def accumulation_verdict(
    measured: dict[str, int] | None,
    promised: dict[str, int] | None,
    grad_accum: int,
    ignore: tuple[str, ...] = (),
    unpromised_why: str = "no promise known for this strategy",
) -> str | None:
    """Did gradient accumulation skip what the strategy and its flavour promise? Compares the
    bytes by op that an accumulation window's non-final micro-batches sent (``measured``, per
    optimizer step) with the promise, exactly, op by op (``ignore``: ops outside the promise).

    None: nothing measured (no profiled pass). ``n/a: ...`` at grad_accum 1 (no non-final
    micro-batch); ``unchecked: <unpromised_why>`` where no promise is known; else ``ok`` or
    ``fail: <op> sent X B, promised Y B; ...``.
    """
    if measured is None:
        return None
    if grad_accum < 2:
        return "n/a: grad_accum 1 has no non-final micro-batch"
    if promised is None:
        return f"unchecked: {unpromised_why}"
    got = {op: b for op, b in measured.items() if b and op not in ignore}
    want = {op: b for op, b in promised.items() if b}
    if got == want:
        return "ok"
    diffs = [
        f"{op} sent {got.get(op, 0)} B, promised {want.get(op, 0)} B"
        for op in sorted(set(got) | set(want))
        if got.get(op, 0) != want.get(op, 0)
    ]
    return "fail: " + "; ".join(diffs)
