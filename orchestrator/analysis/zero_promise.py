"""ZeRO's accumulation promise: the bytes by op that one rank's non-final micro-batches of an
accumulation window send, per optimizer step, under DeepSpeed 0.19.8 and the config a run parsed
(``runs.ds_config``). ``comm_model.accumulation_verdict`` compares it with what the collective
recorder measured (``workloads.collectives.AccumulationProbe``), exactly, op by op.

What DeepSpeed does on a non-final micro-batch (``engine.backward`` then ``engine.step``, as
``workloads.strategies.ZeroStrategy`` calls them), read in the installed source
(``deepspeed/runtime/...``) and measured on 2 gloo ranks, gpt2-tiny, grad_accum 2 and 3:

- Every stage: ``engine.py`` ``DeepSpeedEngine.step`` steps the optimizer only when
  ``is_gradient_accumulation_boundary()``; on a non-final micro-batch it issues nothing.
  ``DeepSpeedEngine._backward_epilogue`` -> ``allreduce_gradients``: "ZeRO stage >= 2
  communicates during non gradient accumulation boundaries as well"
  (``zero_optimization_partition_gradients()`` -> ``overlapping_partition_gradients_reduce_
  epilogue``); stage 1 communicates only at the boundary (``reduce_gradients``).
- ZeRO-1 (``zero/stage_1_and_2.py``): the gradient hooks (``create_gradient_handling_hooks`` ->
  ``process_gradients``) bucket a gradient only when ``partition_gradients or overlap_comm``, and
  ``reduce_ready_partitions_and_remove_grads`` then only at the boundary (``partition_gradients``
  is False). Promise: nothing, with or without overlap_comm, reduce_scatter or CPU offload. A bf16
  ZeRO-1 run without offload gets ``BF16_Optimizer`` instead (``engine.py``
  ``_do_optimizer_sanity_check``), whose ``backward_epilogue`` accumulates locally: nothing either.
- ZeRO-2 (``stage_1_and_2.py``): ``partition_gradients`` is True, so every micro-batch's hooks
  fill the ipg bucket (``reduce_independent_p_g_buckets_and_remove_grads``, flushed by
  ``reduce_ipg_grads`` when full and by ``independent_gradient_partition_epilogue`` after
  backward) and ``average_tensor`` reduces each bucket: with ``reduce_scatter`` false one
  ``all_reduce`` of the bucket (``gradient_reduction_w_predivide``); with it true every slice goes
  to ``allreduce_and_scatter`` -> ``allreduce_bucket`` -> ``all_reduce`` when
  ``use_multi_rank_bucket_allreduce`` (DeepSpeed's default), else ``allreduce_no_retain`` ->
  ``dist.reduce`` to the slice's owner. Either way the buckets hold every gradient once, unpadded:
  per non-final micro-batch ``n_params x`` the reduce dtype's bytes (``comm_model.
  zero_bytes_per_param``: communication_data_type, else the model's dtype), as ``all_reduce`` (or
  ``reduce``). CPU offload forces ``contiguous_gradients`` and changes where the reduced slice is
  copied (``copy_grads_in_partition``: local copies into the CPU buffers), not what is
  reduced. That is ``comm_model.expected_comm``'s ZeRO-2 all_reduce less its boundary share.
- ZeRO-3 (``zero/stage3.py``, ``partition_parameters.py``, ``partitioned_param_coordinator.py``):
  every micro-batch reduce-scatters every gradient (hooks -> ``reduce_independent_p_g_buckets_
  and_remove_grads`` -> ``__reduce_and_partition_ipg_grads`` -> ``__avg_scatter_grads`` ->
  ``comm/coalesced_collectives.py`` ``reduce_scatter_coalesced``, whose flat input pads each
  gradient to ``ceil(numel / n) x n``), in the reduce dtype, and gathers the parameters that are
  not persistent (``parameter_offload.py`` ``mark_persistent_parameters``: ``numel <=
  stage3_param_persistence_threshold``, in ``named_parameters`` order while the model threshold
  allows) with ``all_gather_coalesced``, each padded to ``ceil(numel / n) x n`` (``_aligned_size``)
  in the parameter's own dtype (``get_allgather_dtype``). How often per micro-batch: once when the
  reuse distance or the prefetch bucket covers the model (``comm_model.zero3_reuse_gathers``; the
  coordinator's ``__params_to_release`` keeps a parameter that reappears within the distance, so
  backward reuses forward's gather). Below that DeepSpeed's prefetch trace decides (measured 1.73
  on a 16 M-parameter model, 1 on gpt2-tiny with a 262,144-element bucket and no reuse): no
  promise. Persistent parameters are gathered after the optimizer step, on the boundary
  micro-batch, never on a non-final one.

Measured (2 gloo ranks, gpt2-tiny, 3,382,080 parameters, fp32, per non-final micro-batch):
zero1 nothing; zero2 all_reduce 13,528,320 B (offload none or cpu, overlap_comm on or off,
reduce_scatter on or off), ``reduce`` 13,528,320 B with use_multi_rank_bucket_allreduce false;
zero3 all_gather 12,865,792 B (the token embedding: every other parameter is under the default
100,000-element threshold) and reduce_scatter 13,528,320 B (offload none or cpu, overlap on or
off), all_gather 13,528,320 B with the ``serialized`` preset (threshold 0). bf16 halves each;
bf16 with communication_data_type fp32 gathers in bf16 and reduces in fp32.

Outside the promise (None and why, so the check says ``unchecked``): ZeRO-3 where the gathers per
micro-batch are not certain, a finite stage3_model_persistence_threshold, fetch by all-reduce,
module granularity, quantized or hierarchical (hpZ, MiCS) partitioning, ZenFlow, NVMe offload
(not measured), and a model whose parameter shapes do not add up to the parameters trained.

A strategy is ZeRO by its catalog entry's family and acts as its ``zero_stage`` (``workloads/
catalog.py``); the stage decides, never the strategy's name.

May import: comm_model, fsdp_theory, workloads.catalog.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from orchestrator.analysis.comm_model import (
    expected_comm,
    zero3_reuse_gathers,
    zero_bytes_per_param,
)
from orchestrator.analysis.fsdp_theory import gpt2_sharded_by_name
from workloads import catalog

PARAM_BYTES = {"fp32": 4, "bf16": 2}
"""precision -> bytes per element of the parameters ZeRO-3 gathers (the model's dtype)."""


def gpt2_param_numels(model: str) -> tuple[int, ...]:
    """Elements of each parameter of a gpt2 model, in ``named_parameters`` order (a tied one
    once): token embedding, position embedding, each block's twelve, the final layer norm
    (``fsdp_theory.gpt2_sharded``'s shapes; its root holds wte, wpe, ln_f weight and bias)."""
    sharded = gpt2_sharded_by_name(model)
    wte, wpe, *ln_f = sharded.root
    shapes = [wte, wpe, *(s for block in sharded.blocks for s in block), *ln_f]
    return tuple(math.prod(s) for s in shapes)


def padded(numel: int, world_size: int) -> int:
    """``numel`` rounded up to a multiple of the ranks: ZeRO-3's partitions (``_aligned_size``)
    and ``reduce_scatter_coalesced``'s per-tensor padding."""
    return math.ceil(numel / world_size) * world_size


def persistent(numels: Sequence[int], threshold: int) -> list[bool]:
    """Which parameters ZeRO-3 keeps whole on every rank (``mark_persistent_parameters`` with an
    unbounded model threshold): those of at most ``threshold`` elements."""
    return [n <= threshold for n in numels]


def _grown(strategy: str, grad_accum: int, psi: int, world_size: int, gathers: float = 1.0):
    """Bytes by op that ``expected_comm`` adds for the grad_accum-1 micro-batches beyond one: the
    per-micro-batch work of the non-final micro-batches (the step's own work does not grow)."""
    many = expected_comm(strategy, grad_accum, psi, world_size, gathers).per_op
    one = expected_comm(strategy, 1, psi, world_size, gathers).per_op
    return {op: b - one.get(op, 0) for op, b in many.items() if b != one.get(op, 0)}


UNBOUNDED = 2**63 - 1
"""DeepSpeed's default stage3_model_persistence_threshold (``sys.maxsize``): no model budget."""


def _zero3_unsupported(zero: dict) -> str | None:
    """Why a ZeRO-3 config is outside the promise, or None."""
    model_threshold = zero.get("stage3_model_persistence_threshold")
    checks = [
        (model_threshold is not None and int(model_threshold) < UNBOUNDED,
         "a finite stage3_model_persistence_threshold (which parameters persist then depends "
         "on DeepSpeed's per-partition budget)"),
        (bool(zero.get("stage3_use_all_reduce_for_fetch_params")),
         "stage3_use_all_reduce_for_fetch_params (parameters fetched by all_reduce)"),
        (int(zero.get("stage3_module_granularity_threshold") or 0) > 0,
         "stage3_module_granularity_threshold > 0 (leaf modules fetched whole)"),
        (not zero.get("reduce_scatter", True),
         "reduce_scatter false (contiguous buckets are all-reduced instead)"),
        (bool(zero.get("zero_quantized_weights") or zero.get("zero_quantized_gradients")),
         "quantized weights or gradients (ZeRO++)"),
        (int(zero.get("zero_hpz_partition_size") or 1) > 1, "hierarchical partitioning (hpZ)"),
        (int(zero.get("mics_shard_size") or -1) > 0, "MiCS sharding"),
        (((zero.get("offload_param") or {}).get("device") or "none") == "nvme",
         "NVMe parameter offload (not measured)"),
    ]  # fmt: skip
    for hit, what in checks:
        if hit:
            return f"ZeRO-3 with {what}: no exact promise"
    return None


def _stage(strategy: str) -> int:
    """The ZeRO stage of ``strategy`` (1, 2 or 3); a ValueError naming the ZeRO strategies for
    any other name."""
    entry = catalog.STRATEGIES.get(strategy)
    if entry is None or entry.family != catalog.ZERO or entry.zero_stage not in (1, 2, 3):
        raise ValueError(f"strategy={strategy!r} is not one of {list(catalog.names(catalog.ZERO))}")
    return entry.zero_stage


def non_final_promise(
    strategy: str,
    grad_accum: int,
    world_size: int,
    precision: str,
    ds_config: dict | None,
    param_numels: Sequence[int],
    n_params: int,
) -> tuple[dict[str, int] | None, str]:
    """(bytes by op the non-final micro-batches send per optimizer step, note), or (None, why)
    where this module makes no promise (see the module docstring).

    strategy: a catalog name of the zero family (its ``zero_stage``: 1, 2 or 3). grad_accum:
    micro-batches per step. world_size: the data-
    parallel ranks. precision: fp32 | bf16 (the model's dtype). ds_config: the effective
    DeepSpeed config (``runs.ds_config``). param_numels: elements of each parameter in
    ``named_parameters`` order (:func:`gpt2_param_numels`). n_params: the parameters the run
    trained, to check ``param_numels`` against.
    """
    stage = _stage(strategy)
    if world_size < 2:
        return None, "one rank: nothing crosses a link"
    if not ds_config:
        return None, "no effective DeepSpeed config was reported for this run"
    zero = ds_config.get("zero_optimization") or {}
    if zero.get("zenflow"):
        return None, "ZenFlow reduces on its own schedule: no promise"
    if sum(param_numels) != n_params:
        return None, f"the model's shapes hold {sum(param_numels)} elements, the run {n_params}"
    reduce_bytes = zero_bytes_per_param(precision, ds_config)
    if reduce_bytes is None:
        cdt = ds_config.get("communication_data_type")
        return None, f"communication_data_type={cdt!r}: unknown element size"
    if stage == 1:
        return _grown(strategy, grad_accum, n_params * reduce_bytes, world_size), (
            "ZeRO-1 reduces at the accumulation boundary only: nothing before it"
        )
    if stage == 2:
        grown = _grown(strategy, grad_accum, n_params * reduce_bytes, world_size)
        if zero.get("reduce_scatter", True) and not zero.get(
            "use_multi_rank_bucket_allreduce", True
        ):
            return {"reduce": grown.get("all_reduce", 0)}, (
                "ZeRO-2 reduces every gradient on every micro-batch, each slice to its owner "
                "(use_multi_rank_bucket_allreduce false)"
            )
        return grown, "ZeRO-2 all-reduces every gradient on every micro-batch"
    why = _zero3_unsupported(zero)
    if why is not None:
        return None, why
    gathers, gathers_why = zero3_reuse_gathers(zero, n_params)
    if gathers != 1.0:
        return None, f"ZeRO-3 gathers per micro-batch not certain ({gathers_why}): no promise"
    threshold = int(zero.get("stage3_param_persistence_threshold") or 0)
    kept = persistent(param_numels, threshold)
    gathered = sum(padded(n, world_size) for n, k in zip(param_numels, kept, strict=True) if not k)
    reduced = sum(padded(n, world_size) for n in param_numels)
    gather = _grown(strategy, grad_accum, gathered * PARAM_BYTES[precision], world_size)
    scatter = _grown(strategy, grad_accum, reduced * reduce_bytes, world_size)
    promise = {
        "all_gather": gather.get("all_gather", 0),
        "reduce_scatter": scatter.get("reduce_scatter", 0),
    }
    return {op: b for op, b in promise.items() if b}, (
        f"ZeRO-3 gathers the {kept.count(False)} parameters over "
        f"stage3_param_persistence_threshold={threshold} once per micro-batch ({gathers_why}) "
        "and reduce-scatters every gradient"
    )
