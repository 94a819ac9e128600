"""FSDP2 and HSDP theory: the collective bytes one rank sends per micro-batch and per step.

What ``workloads/fsdp.py`` builds (torch 2.13): every gpt2 transformer block is its own
``fully_shard`` unit with the run's ``reshard_after_forward``; the root unit holds every other
parameter: the token embedding (tied to the LM head: one parameter, counted once), the position
embedding and the final layer norm, and is not resharded after forward (FSDP2's default for the
root). Per unit and micro-batch, FSDP2 (``_fsdp_collectives.py``) issues:

- one all-gather of the unit's parameters when forward needs them, and again in backward when
  the unit was resharded after forward (blocks with ``reshard_after_forward`` true; never the
  root). Parameters are resharded after backward (``last`` does not keep them, see the
  workloads module), so every micro-batch gathers again. Message: the gathered output,
  ``sum(padded numel) x param bytes`` (bf16 under ``precision: bf16``, else fp32).
- one reduce-scatter of the unit's gradients after its backward, when the flavour reduces on
  that micro-batch. Message: the unscattered input, ``sum(padded numel) x reduce bytes`` (fp32
  in both precisions: ``MixedPrecisionPolicy(reduce_dtype=fp32)``).
- hsdp: one all-reduce of the reduce-scatter's output (the rank's shard) across the replicate
  group, when the flavour all-reduces on that micro-batch: ``sum(padded numel) / S x reduce
  bytes``.

Padding: FSDP2 shards each parameter on dim 0 into S chunks (``torch.chunk``), padding dim 0 to
``ceil(dim0 / S) x S`` (``_get_dim0_padded_size``), S the shard group's size (the world for
fsdp). gpt2's vocabulary, 50257, is odd, so the token embedding gains a row on 2 ranks and three
on 4. Which micro-batches reduce (``g`` = grad_accum; non-final = the first g-1):

    flavour          reduce-scatter      all-reduce (hsdp)
    each             every micro-batch   every micro-batch
    last             the last only       the last only
    replicate_last   every micro-batch   the last only        (hsdp only)

Message bytes follow nccl-tests as everywhere (``comm_model``'s docstring); wire bytes are
``msg x busbw_factor(op, group size)`` with the group each op runs on: fsdp everything on the
world; hsdp all-gather and reduce-scatter on the shard group (S), the all-reduce on the replicate
group (world / S), which is the group that crosses nodes. One-off work is not counted (FSDP2 has
no collective at initialisation or in the optimizer step; the measured records show none).

Which strategies: the catalog's ``fsdp2`` family (``workloads/catalog.py``), each with the
``grad_sync`` flavours its entry offers; a :func:`workloads.fsdp.hybrid` one is HSDP.

May import: comm_model, workloads.catalog, workloads.fsdp, workloads.model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from orchestrator.analysis.comm_model import busbw_factor
from workloads import catalog
from workloads.fsdp import hybrid
from workloads.model import GPT2_SIZES, N_POSITIONS, VOCAB_SIZE

Shape = tuple[int, ...]


@dataclass(frozen=True)
class ShardedModel:
    """The parameters of each ``fully_shard`` unit, as shapes (dim 0 is the sharded one)."""

    root: tuple[Shape, ...]
    """The root unit's parameters: every parameter no block holds, a tied one once."""
    blocks: tuple[tuple[Shape, ...], ...]
    """One tuple of shapes per transformer block, in order."""


def gpt2_sharded(
    n_layer: int, n_embd: int, vocab: int = VOCAB_SIZE, n_positions: int = N_POSITIONS
) -> ShardedModel:
    """gpt2's parameter shapes per unit as ``GPT2LMHeadModel`` registers them (transformers'
    ``Conv1D`` stores a weight as (in, out), so dim 0 is the input width)."""
    d = n_embd
    block = (
        (d,),  # ln_1.weight
        (d,),  # ln_1.bias
        (d, 3 * d),  # attn.c_attn.weight
        (3 * d,),  # attn.c_attn.bias
        (d, d),  # attn.c_proj.weight
        (d,),  # attn.c_proj.bias
        (d,),  # ln_2.weight
        (d,),  # ln_2.bias
        (d, 4 * d),  # mlp.c_fc.weight
        (4 * d,),  # mlp.c_fc.bias
        (4 * d, d),  # mlp.c_proj.weight
        (d,),  # mlp.c_proj.bias
    )
    root = ((vocab, d), (n_positions, d), (d,), (d,))  # wte (= lm_head), wpe, ln_f w, b
    return ShardedModel(root=root, blocks=(block,) * n_layer)


def gpt2_sharded_by_name(model: str) -> ShardedModel:
    """:func:`gpt2_sharded` for a model name of ``workloads.model.GPT2_SIZES``."""
    if model not in GPT2_SIZES:
        raise ValueError(f"model={model!r} is not one of {sorted(GPT2_SIZES)}")
    n_layer, _, n_embd = GPT2_SIZES[model]
    return gpt2_sharded(n_layer, n_embd)


def padded_numel(shapes: Sequence[Shape], shard_size: int) -> int:
    """Elements of a unit's flat all-gather output / reduce-scatter input: each parameter's
    dim 0 padded to a multiple of the shard size."""
    total = 0
    for shape in shapes:
        rest = math.prod(shape[1:])
        total += math.ceil(shape[0] / shard_size) * shard_size * rest
    return total


PRECISION_BYTES = {"fp32": (4, 4), "bf16": (2, 4)}
"""precision -> (bytes per gathered parameter element, bytes per reduced gradient element):
``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`` under bf16."""


@dataclass(frozen=True)
class FsdpExpectation:
    """Message bytes one rank sends, by op, for one optimizer step of ``grad_accum``
    micro-batches."""

    per_micro_batch: tuple[dict[str, int], ...]
    """Index m: what micro-batch m sends."""
    per_step: dict[str, int]
    non_final: dict[str, int]
    """What the non-final micro-batches (0 .. g-2) send together: the accumulation promise."""
    group_size: dict[str, int] = field(default_factory=dict)
    """op -> ranks in the group it runs on."""
    wire_bytes_per_step: int = 0
    """sum of msg x busbw_factor(op, group size): bytes the rank moves over its link."""
    note: str = ""


def _sum(dicts: Sequence[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dicts:
        for op, b in d.items():
            out[op] = out.get(op, 0) + b
    return dict(sorted(out.items()))


def _validate(strategy, grad_sync, grad_accum, world_size, shard_size) -> int:
    """The shard group's size S, after checking the arguments (ValueError naming the field)."""
    if catalog.family_of(strategy) != catalog.FSDP2:
        raise ValueError(
            f"strategy={strategy!r} is not one of {list(catalog.names(catalog.FSDP2))}"
        )
    offered = catalog.offered("grad_sync", strategy)
    if grad_sync not in offered:
        raise ValueError(f"grad_sync={grad_sync!r} is not one of {list(offered)} for {strategy}")
    if not isinstance(grad_accum, int) or grad_accum < 1:
        raise ValueError(f"grad_accum must be a positive int, got {grad_accum!r}")
    if not isinstance(world_size, int) or world_size < 2:
        raise ValueError(
            f"world_size must be an int >= 2 (one rank sends nothing), got {world_size!r}"
        )
    if not hybrid(strategy):
        if shard_size not in (None, world_size):
            raise ValueError(f"hsdp_shard_size={shard_size!r}: {strategy} shards over every rank")
        return world_size
    if not isinstance(shard_size, int) or shard_size < 2 or world_size % shard_size:
        raise ValueError(
            f"hsdp_shard_size={shard_size!r}: {strategy} needs a shard size >= 2 that divides "
            f"world_size={world_size}"
        )
    return shard_size


def expected_fsdp(
    strategy: str,
    grad_sync: str,
    reshard_after_forward: bool,
    grad_accum: int,
    world_size: int,
    model: ShardedModel,
    shard_size: int | None = None,
    precision: str = "fp32",
) -> FsdpExpectation:
    """Expected bytes per micro-batch and per step for one rank (see the module docstring).

    strategy: a catalog name of the fsdp2 family. grad_sync: a flavour its entry offers
    (``catalog.offered("grad_sync", strategy)``).
    reshard_after_forward: the blocks' setting (the root is never resharded after forward).
    shard_size: hsdp's shard group size S (None or the world size for fsdp).
    precision: fp32 | bf16 (:data:`PRECISION_BYTES`).
    """
    s = _validate(strategy, grad_sync, grad_accum, world_size, shard_size)
    if precision not in PRECISION_BYTES:
        raise ValueError(f"precision={precision!r} is not one of {sorted(PRECISION_BYTES)}")
    param_bytes, reduce_bytes = PRECISION_BYTES[precision]
    root = padded_numel(model.root, s)
    blocks = [padded_numel(b, s) for b in model.blocks]
    gathers_per_block = 2 if reshard_after_forward else 1
    gathered = (root + gathers_per_block * sum(blocks)) * param_bytes
    reduced = (root + sum(blocks)) * reduce_bytes
    hsdp = hybrid(strategy)
    micro: list[dict[str, int]] = []
    for m in range(grad_accum):
        final = m == grad_accum - 1
        sends = {"all_gather": gathered}
        if final or grad_sync in ("each", "replicate_last"):
            sends["reduce_scatter"] = reduced
        if hsdp and (final or grad_sync == "each"):
            sends["all_reduce"] = reduced // s
        micro.append(sends)
    per_step = _sum(micro)
    group_size = {"all_gather": s, "reduce_scatter": s}
    if hsdp:
        group_size["all_reduce"] = world_size // s
    wire = sum(b * busbw_factor(op, group_size[op]) for op, b in per_step.items())
    note = (
        f"{strategy} {grad_sync}, blocks reshard_after_forward={reshard_after_forward}: "
        f"each micro-batch gathers the root once and each of {len(blocks)} blocks "
        f"{gathers_per_block}x; shard group {s} ranks"
        + (f", replicate group {world_size // s}" if hsdp else "")
    )
    return FsdpExpectation(
        per_micro_batch=tuple(micro),
        per_step=per_step,
        non_final=_sum(micro[:-1]),
        group_size=group_size,
        wire_bytes_per_step=int(round(wire)),
        note=note,
    )
