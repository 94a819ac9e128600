"""FSDP2 and HSDP behind the strategies' interface, as torchtitan applies FSDP2.

``fully_shard`` wraps each gpt2 transformer block (``model.transformer.h[i]``) with the run's
``reshard_after_forward``, then the root (``GPT2LMHeadModel``) with FSDP2's own default: in
torch 2.13 a root given no ``reshard_after_forward`` is not resharded after forward
(``_fsdp_state.py``: the root's ``post_forward_mesh_info`` is cleared at lazy init), so the
root's parameters (the token embedding, tied to the LM head, the position embedding and the
final layer norm) are gathered once per micro-batch. ``hsdp`` shards over a 2-D device mesh
(replicate x shard): ranks ``r*S .. r*S+S-1`` form shard group r, so a shard group is the ranks
of one node when the ranks are placed node by node and S is the ranks per node.

Precision ``bf16``: ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`` (torchtitan's
default): parameters are all-gathered and computed in bf16, gradients reduced in fp32; no
autocast. Offload ``cpu``: ``CPUOffloadPolicy``, with ``pin_memory`` only where CUDA is present
(pinning raises on a CPU-only build). FSDP2 has no NVMe offload, no bucket size and no overlap
switch: those settings are refused here as a last line; the planner refuses them first.

Sync frequency (``grad_sync``), for the non-final micro-batches of an accumulation window:

- ``each``: FSDP2's default. fsdp reduce-scatters every micro-batch (sharded gradients
  accumulate); hsdp reduce-scatters and all-reduces across replicas every micro-batch.
- ``last``: ``set_requires_gradient_sync(False)`` on the non-final micro-batches: no
  reduce-scatter (and, for hsdp, no all-reduce) until the last one, which reduces the
  accumulated unsharded gradients once. All-gathers still run every micro-batch.
- ``replicate_last`` (hsdp only): ``set_requires_all_reduce(False)`` on the non-final
  micro-batches: reduce-scatter every micro-batch, the all-reduce across replicas only on the
  last, of the accumulated shard (the fix of NVIDIA/cosmos-framework#162).

``last`` does NOT keep parameters gathered across micro-batches (``set_reshard_after_backward``
stays True). Why: the flavour is the one switch the table names, sync; keeping parameters
gathered is a second trade (memory for all-gathers) that would change the all-gather bytes too,
so a difference between ``each`` and ``last`` would no longer be the reduction alone. What
``last`` costs is the unsharded gradients it holds, which peak memory shows.
``orchestrator/analysis/fsdp_theory.py`` counts the all-gathers accordingly.

The planted accumulation bug (``sync_switch_bug``): NVIDIA/cosmos-framework#161 skipped
communication with a DDP-only ``no_sync`` wrapper, which for an FSDP2 module (no ``no_sync``
method) was a null context, so every micro-batch still reduced. With the bug planted, the
non-final micro-batches go through that same wrapper instead of FSDP2's switch; a run then
sends what ``last`` promises not to, and the accumulation check must say so.

Collectives are recorded by ``workloads/collectives.py``'s recorder during the profiled steps;
``collectives`` keeps the last profiled pass's records (micro-batch by micro-batch).

Which strategy is which comes from the catalog (``workloads/catalog.py``): the strategies of the
``fsdp2`` family run here, each offering the ``grad_sync`` flavours its entry lists; whether one
shards over the 2-D mesh is :func:`hybrid`.

May import: catalog, collectives, compiling, contract, optimizer, torch.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workloads import catalog, compiling
from workloads.collectives import Collective, CollectiveRecorder, comm_records
from workloads.contract import CommRecord
from workloads.optimizer import implementation, trainer_adamw

if TYPE_CHECKING:  # torch is imported where a run is built: the option tables stay light
    import torch

FSDP_STRATEGIES = catalog.names(catalog.FSDP2)
"""The strategies this module runs, from the catalog (kept importable for the driver modules
that still read it; new code asks ``catalog.family_of``)."""
GRAD_SYNC = {s: catalog.offered("grad_sync", s) for s in FSDP_STRATEGIES}
"""The ``grad_sync`` flavours each strategy offers (the module docstring says what each does),
from the catalog (``catalog.offered``), as :data:`FSDP_STRATEGIES`."""
SYNC_BUG_ENV = "LINKSWEEP_PLANT_SYNC_BUG"
"""Set to 1 in a rank's environment (through a link's env) to plant the accumulation bug."""


def hybrid(strategy: str) -> bool:
    """Does ``strategy`` shard over a 2-D mesh, replicate x shard (HSDP), rather than over every
    rank (FSDP2)? A ValueError for a name not in the catalog."""
    return catalog.strategy(strategy).hybrid


def _hybrid_names() -> list[str]:
    return [s for s in catalog.names(catalog.FSDP2) if hybrid(s)]


@dataclass(frozen=True)
class FsdpOptions:
    """What an FSDP2 run needs beyond ``RunConfig``'s shared fields."""

    strategy: str
    """A strategy of the catalog's ``fsdp2`` family."""
    reshard_after_forward: bool = True
    """For the transformer blocks: True frees their parameters after forward and gathers them
    again in backward (as ZeRO-3); False keeps them until backward ends (as ZeRO-2). The root
    keeps FSDP2's default (not resharded after forward)."""
    grad_sync: str | None = None
    """each | last | replicate_last: one the strategy's entry offers (``catalog.offered``);
    None: its default (``catalog.default``: FSDP2's own behaviour, and torchtitan's choice)."""
    hsdp_shard_size: int | None = None
    """A :func:`hybrid` strategy's ranks per shard group (resolved by the planner: ranks per
    node by default); the world size must divide by it. None for the others."""
    sync_switch_bug: bool = False
    """Plant NVIDIA/cosmos-framework#161 (module docstring); a test of the accumulation check."""

    def __post_init__(self) -> None:
        if catalog.family_of(self.strategy) != catalog.FSDP2:
            raise ValueError(
                f"strategy={self.strategy!r} is not one of {list(catalog.names(catalog.FSDP2))}"
            )
        if not isinstance(self.reshard_after_forward, bool):
            raise ValueError(
                f"reshard_after_forward={self.reshard_after_forward!r} is not true or false"
            )
        if self.grad_sync is None:
            object.__setattr__(self, "grad_sync", catalog.default("grad_sync", self.strategy))
        allowed = catalog.offered("grad_sync", self.strategy)
        if self.grad_sync not in allowed:
            raise ValueError(
                f"grad_sync={self.grad_sync!r} is not one of {list(allowed)} for {self.strategy}"
            )
        if not hybrid(self.strategy):
            if self.hsdp_shard_size is not None:
                raise ValueError(
                    f"hsdp_shard_size applies to {' and '.join(_hybrid_names())} only; "
                    f"{self.strategy} shards over every rank"
                )
        elif not isinstance(self.hsdp_shard_size, int) or self.hsdp_shard_size < 1:
            raise ValueError(
                f"hsdp_shard_size={self.hsdp_shard_size!r}: {self.strategy} needs a positive "
                "int (the planner resolves the default, the ranks of one node)"
            )


def options_from_config(cfg: Any) -> FsdpOptions:
    """The options from a ``RunConfig``; a field the contract does not carry yet takes its
    default, and ``LINKSWEEP_PLANT_SYNC_BUG=1`` in the environment plants the bug."""
    return FsdpOptions(
        strategy=cfg.strategy,
        reshard_after_forward=getattr(cfg, "reshard_after_forward", True),
        grad_sync=getattr(cfg, "grad_sync", None),  # None: the strategy's default
        hsdp_shard_size=getattr(cfg, "hsdp_shard_size", None),
        sync_switch_bug=os.environ.get(SYNC_BUG_ENV, "") == "1",
    )


def mesh_shape(strategy: str, world_size: int, shard_size: int | None) -> tuple[int, ...]:
    """(world,) for FSDP2; (replicate, shard) for a :func:`hybrid` strategy. Raises ValueError
    when the world size does not divide by the shard size, saying what would."""
    if not hybrid(strategy):
        return (world_size,)
    if shard_size is None or shard_size < 1 or world_size % shard_size:
        raise ValueError(
            f"hsdp_shard_size={shard_size!r} does not divide world_size={world_size}: "
            f"{strategy} needs a world size that is a multiple of the shard size"
        )
    return (world_size // shard_size, shard_size)


@contextlib.contextmanager
def mesh_groups_inherit_timeout(timeout_s: float) -> Iterator[None]:
    """While the block runs, the groups ``init_device_mesh`` creates get ``timeout_s``.

    Why: ``torch/distributed/device_mesh.py`` builds a mesh dimension's groups with
    ``new_group`` or (NCCL with a bound device) ``split_group``, both imported into its own
    namespace, passing ``timeout=None`` unless options carry one; both then fall back to the
    backend's default (10 min NCCL, 30 min gloo), not the world group's. The same reason as
    ``strategies.new_groups_inherit_timeout``, which patches ``torch.distributed.new_group``
    only and so cannot reach these names.
    """
    from torch.distributed import device_mesh

    timeout = datetime.timedelta(seconds=timeout_s)
    originals = {name: getattr(device_mesh, name) for name in ("new_group", "split_group")}

    def inheriting(original):
        def make(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("timeout") is None:
                kwargs["timeout"] = timeout
            return original(*args, **kwargs)

        return make

    for name, original in originals.items():
        setattr(device_mesh, name, inheriting(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(device_mesh, name, original)


def ddp_only_no_sync(model: Any) -> contextlib.AbstractContextManager:
    """The wrapper NVIDIA/cosmos-framework#161 used: ``model.no_sync()`` where the model has
    one (DDP), else a null context. An FSDP2 module has none, so nothing is skipped."""
    no_sync = getattr(model, "no_sync", None)
    return no_sync() if no_sync is not None else contextlib.nullcontext()


def refuse_unsupported(cfg: Any) -> None:
    """Settings FSDP2 has no knob for; the planner refuses them before anything runs."""
    if getattr(cfg, "offload", "none") == "nvme":
        raise ValueError("offload=nvme: FSDP2 has no NVMe offload (only CPUOffloadPolicy)")
    if getattr(cfg, "bucket_mb", None) is not None:
        raise ValueError("bucket_mb: FSDP2 has no bucket size (it reduces per fully_shard unit)")
    if getattr(cfg, "overlap_comm", "default") != "default":
        raise ValueError("overlap_comm: FSDP2 has no overlap switch (it always overlaps)")


def apply_fully_shard(model: Any, mesh: Any, options: FsdpOptions, precision: str, offload: str):
    """``fully_shard`` on each transformer block, then on the root; returns the root."""
    import torch
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        MixedPrecisionPolicy,
        OffloadPolicy,
        fully_shard,
    )

    mp = MixedPrecisionPolicy()
    if precision == "bf16":
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    off = OffloadPolicy()
    if offload == "cpu":
        off = CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
    common = {"mesh": mesh, "mp_policy": mp, "offload_policy": off}
    for block in model.transformer.h:
        fully_shard(block, reshard_after_forward=options.reshard_after_forward, **common)
    return fully_shard(model, **common)  # the root: FSDP2's own reshard_after_forward


class FsdpStrategy:
    """FSDP2 or HSDP (a strategy of the ``fsdp2`` family): the same interface as ``DDPStrategy`` and
    ``ZeroStrategy`` (``micro_step`` grad_accum times, ``boundary`` on the last, then
    ``optimizer_step``; ``profile_start`` / ``profile_stop`` around the profiled steps)."""

    def __init__(self, model, device, cfg, autocast_dtype, options: FsdpOptions | None = None):
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh

        refuse_unsupported(cfg)
        self.options = options or options_from_config(cfg)
        self.name = self.options.strategy
        self.device = device
        self.grad_accum = cfg.grad_accum
        shape = mesh_shape(self.name, dist.get_world_size(), self.options.hsdp_shard_size)
        names = ("shard",) if len(shape) == 1 else ("replicate", "shard")
        with mesh_groups_inherit_timeout(cfg.pg_timeout_s):
            self.mesh = init_device_mesh(device.type, shape, mesh_dim_names=names)
        if cfg.offload != "cpu":
            model = model.to(device)
        self.compile_stats: compiling.CompileStats | None = None
        if compiling.enabled(cfg):  # each block, before fully_shard wraps it (torchtitan)
            self.compile_stats = compiling.CompileStats(compiling.backend_name())
            compiling.compile_blocks(model, self.compile_stats)
        self.model = apply_fully_shard(model, self.mesh, self.options, cfg.precision, cfg.offload)
        self.optimizer = trainer_adamw(self.model.parameters(), cfg.lr)
        self.optimizer_impl = implementation(self.optimizer)
        self._step = 0
        self._micro = 0
        self.recorder: CollectiveRecorder | None = None
        self.collectives: tuple[Collective, ...] = ()

    def _sync_switch(self, boundary: bool) -> contextlib.AbstractContextManager:
        """Apply the flavour's switch for this micro-batch (a null context: FSDP2's switches
        are settings, not contexts); with the bug planted, the DDP-only wrapper instead."""
        flavour = self.options.grad_sync
        if flavour == "each":
            return contextlib.nullcontext()
        if self.options.sync_switch_bug:
            return contextlib.nullcontext() if boundary else ddp_only_no_sync(self.model)
        if flavour == "last":
            self.model.set_requires_gradient_sync(boundary)
        else:  # replicate_last
            self.model.set_requires_all_reduce(boundary)
        return contextlib.nullcontext()

    def micro_step(self, batch: torch.Tensor, boundary: bool) -> torch.Tensor:
        if self.recorder is not None:
            self.recorder.at(self._step, self._micro)
        with self._sync_switch(boundary):
            loss = self.model(input_ids=batch, labels=batch).loss
            (loss / self.grad_accum).backward()
        self._micro += 1
        return loss.detach()

    def optimizer_step(self) -> None:
        if self.recorder is not None:
            self.recorder.at(self._step, None)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._step += 1
        self._micro = 0

    def profile_start(self) -> None:
        self.recorder = CollectiveRecorder(timed=True, device=self.device)
        self.recorder.__enter__()

    def profile_stop(self) -> tuple[CommRecord, ...]:
        recorder, self.recorder = self.recorder, None
        if recorder is None:
            return ()
        recorder.__exit__(None, None, None)
        self.collectives = tuple(recorder.records)
        return comm_records(self.collectives)

    def effective_config(self) -> dict | None:
        return None  # runs.ds_config is DeepSpeed's; FSDP2's settings are the variant's own

    def settings(self) -> dict[str, Any]:
        """What this run applied, for a row: mesh shape and the options."""
        return {
            "mesh_shape": list(self.mesh.shape),
            "reshard_after_forward": self.options.reshard_after_forward,
            "grad_sync": self.options.grad_sync,
            "sync_switch_bug": self.options.sync_switch_bug,
        }

    def swap_files(self) -> int:
        return 0

    def teardown(self) -> None:
        if self.recorder is not None:
            self.profile_stop()
