"""Each strategy family's theory of a run: the bytes one optimizer step is expected to send, and
what the non-final micro-batches of an accumulation window promise to send.

The catalog names one function here per strategy (``Strategy.theory`` in ``workloads/catalog.py``:
``orchestrator.analysis.theories:ddp``, ``:zero``, ``:fsdp``); :func:`theory_of` resolves the
run's and calls it with the run's :class:`TheoryFacts`, so the code that stores a run's
expectation and its accumulation check (``orchestrator/sweep/rows.py``) never asks which
strategy it holds. A strategy added to the catalog brings its theory as a dotted path: a
function of the same shape, here or in its own module.

Each function gathers what its family's models need and no more; the models themselves live in
``comm_model`` (DDP and ZeRO per step), ``zero_promise`` (ZeRO's non-final micro-batches) and
``fsdp_theory`` (FSDP2 and HSDP, micro-batch by micro-batch). Where a model cannot say, the
figure or the promise is None and the note says why: measured bytes stay the ground truth, and
the accumulation check reads ``unchecked: <why>``.

May import: comm_model, fsdp_theory, zero_promise, workloads.catalog, workloads.compression.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.analysis import comm_model, fsdp_theory, zero_promise
from workloads import catalog, compression

NO_PROMISE = "no promise known for this strategy"
"""Why there is no accumulation promise, where a theory says nothing more specific."""


@dataclass(frozen=True)
class TheoryFacts:
    """What a theory may know of a run: its variant, the spec's shape and what rank 0 reported."""

    variant: Mapping[str, Any]
    """Every axis of the run's variant as stored (``strategy``, ``grad_accum``, ``grad_sync``,
    ``reshard_after_forward`` as ``true``/``false``, ``grad_compression``, ``powersgd_rank``,
    ...), plus ``hsdp_shard_size`` where the planner resolved one. An axis it lacks reads as
    the catalog fills an older row (``catalog.filled``: the strategy's default, or the
    placeholder)."""
    world_size: int
    """Data-parallel ranks."""
    precision: str
    """fp32 | bf16: the model's dtype."""
    model: str
    """A ``workloads.model.GPT2_SIZES`` name: the parameter shapes are read from it."""
    n_params: int | None = None
    """Parameters the run trained (rank 0's record); None: no rank reported (a failed run)."""
    ds_config: Mapping[str, Any] | None = None
    """Rank 0's effective DeepSpeed config (``runs.ds_config``); None outside ZeRO."""

    def __post_init__(self) -> None:
        variant = catalog.filled(self.variant)
        object.__setattr__(self, "variant", types.MappingProxyType(variant))

    @property
    def strategy(self) -> str:
        return self.variant["strategy"]

    @property
    def grad_accum(self) -> int:
        return int(self.variant["grad_accum"])


@dataclass(frozen=True)
class Theory:
    """What a theory expects of a run."""

    bytes_per_step: int | None
    """Message bytes (nccl-tests convention, ``comm_model``) one rank is expected to send per
    optimizer step; None where the theory has no figure (``note`` says why)."""
    note: str | None
    """How the figure was derived, or why there is none; None with one rank (nothing crosses a
    link, nothing to say)."""
    per_op: Mapping[str, int] = field(default_factory=dict)
    """``bytes_per_step`` by canonical op; empty where there is no figure."""
    non_final: dict[str, int] | None = None
    """The accumulation promise: bytes by op the non-final micro-batches of one accumulation
    window send together, per optimizer step; None: no promise (``no_promise_why``)."""
    ignore: tuple[str, ...] = ()
    """Ops the accumulation check leaves out (traffic outside the promise)."""
    no_promise_why: str = NO_PROMISE
    """Why there is no promise, where ``non_final`` is None."""


def theory_of(facts: TheoryFacts) -> Theory:
    """The theory the catalog names for the run's strategy (``Strategy.theory``), applied. A
    strategy the catalog lacks is a ValueError naming the known ones."""
    return catalog.resolve(catalog.strategy(facts.strategy).theory)(facts)


def ddp(facts: TheoryFacts) -> Theory:
    """DDP: every gradient all-reduced once per optimizer step (``grad_sync`` ``last``: ``no_sync``
    on the non-final micro-batches, which then send nothing), or once per micro-batch
    (``each``), as its ``grad_compression`` sends it (``comm_model.ddp_reduction``: fp32, 2-byte
    casts, or PowerSGD's factors and whole tensors over the model's parameter shapes, gpt2's
    tied wte / lm_head once). Outside the promise: DDP's broadcasts (rebuilding its buckets
    after the first step broadcasts a few bytes in a micro-batch)."""
    if facts.n_params is None:
        return Theory(None, None, ignore=("broadcast",))
    v = facts.variant
    chosen = compression.compression_of(v)
    shapes = _ddp_shapes(facts.model) if chosen.name == compression.POWERSGD else None
    sync_each = v["grad_sync"] == "each"
    exp, note = comm_model.run_expectation(
        facts.strategy,
        facts.grad_accum,
        facts.precision,
        facts.world_size,
        facts.n_params,
        ddp_compression=chosen.name,
        ddp_sync_each=sync_each,
        ddp_shapes=shapes,
        powersgd_rank=chosen.powersgd_rank,
    )
    per_micro, why = comm_model.ddp_reduction(
        chosen.name, facts.n_params, shapes, chosen.powersgd_rank
    )
    if per_micro is None:
        return Theory(None, note, no_promise_why=why, ignore=("broadcast",))
    promised = {"all_reduce": (facts.grad_accum - 1) * per_micro} if sync_each else {}
    return Theory(
        exp.msg_bytes_per_step if exp else None,
        note,
        dict(exp.per_op) if exp else {},
        non_final=promised,
        ignore=("broadcast",),
    )


def _ddp_shapes(model: str) -> list[tuple[int, ...]] | None:
    """Every parameter tensor's shape as DDP holds it (a tied one once), for a gpt2 model
    (``fsdp_theory.gpt2_sharded_by_name``: the root's wte, wpe and final layer norm, each
    block's twelve); None for a model without known shapes."""
    try:
        sharded = fsdp_theory.gpt2_sharded_by_name(model)
    except ValueError:
        return None
    return [*sharded.root, *(shape for block in sharded.blocks for shape in block)]


def zero(facts: TheoryFacts) -> Theory:
    """ZeRO, by the stage of the strategy's entry (``Strategy.zero_stage``) and the run's
    effective DeepSpeed config: the step from ``comm_model.run_expectation``, the promise from
    ``zero_promise.non_final_promise`` over the model's parameter shapes."""
    if facts.n_params is None:
        return Theory(None, None)
    ds_config = dict(facts.ds_config) if facts.ds_config is not None else None
    exp, note = comm_model.run_expectation(
        facts.strategy,
        facts.grad_accum,
        facts.precision,
        facts.world_size,
        facts.n_params,
        ds_config,
    )
    promised, why = _zero_promise(facts, ds_config)
    return Theory(
        exp.msg_bytes_per_step if exp else None,
        note,
        dict(exp.per_op) if exp else {},
        non_final=promised,
        no_promise_why=why if promised is None else NO_PROMISE,
    )


def _zero_promise(facts: TheoryFacts, ds_config: dict | None) -> tuple[dict | None, str]:
    """``zero_promise.non_final_promise`` for the run: its stage, ranks, precision, effective
    config and the model's parameter shapes."""
    try:
        numels = zero_promise.gpt2_param_numels(facts.model)
    except ValueError as exc:
        return None, f"no parameter shapes for this model: {exc}"
    return zero_promise.non_final_promise(
        facts.strategy,
        facts.grad_accum,
        facts.world_size,
        facts.precision,
        ds_config,
        numels,
        facts.n_params,
    )


def fsdp(facts: TheoryFacts) -> Theory:
    """FSDP2 and HSDP (``fsdp_theory.expected_fsdp``): each micro-batch's gathers and
    reductions by the flavour (``grad_sync``), the blocks' ``reshard_after_forward`` and the
    shard group, from the model's shapes alone (no rank's report needed). None and why where the
    theory has none (one rank, an HSDP shard group of one, a model without known shapes)."""
    v = facts.variant
    try:
        exp = fsdp_theory.expected_fsdp(
            facts.strategy,
            v["grad_sync"],
            v["reshard_after_forward"] == "true",
            facts.grad_accum,
            facts.world_size,
            fsdp_theory.gpt2_sharded_by_name(facts.model),
            shard_size=v.get("hsdp_shard_size"),
            precision=facts.precision,
        )
    except ValueError as exc:
        why = f"no FSDP2 theory: {exc}"
        return Theory(None, why, no_promise_why=why)
    return Theory(
        sum(exp.per_step.values()),
        exp.note,
        dict(exp.per_step),
        non_final=dict(exp.non_final),
    )
