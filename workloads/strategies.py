"""Parallelism strategies behind one small interface, so DDP and ZeRO share one measurement loop.

A strategy owns the wrapped model and optimizer. The loop calls ``micro_step`` grad_accum times
(``boundary`` true on the last) and then ``optimizer_step``: one optimizer step = one timed step.
Communication is accounted per collective (op, message bytes, count, time) during profiled steps
outside the timed ones, because timing a collective means synchronising around it. Runs in rank
processes; imports only workloads modules.

Which class a run builds is the catalog's (``workloads/catalog.py``): each strategy's entry names
its ``workload`` (``DDPStrategy`` and ``ZeroStrategy`` here, ``workloads.fsdp.FsdpStrategy``), and
:func:`make_strategy` builds that one; a name the catalog lacks is an error, never a fallback.

May import: aio_check, catalog, collectives, compiling, compression, contract, ds_comms, ds_effective,
deepspeed, optimizer, torch.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist

from workloads import catalog, compiling
from workloads import compression as compression_rules
from workloads.collectives import Collective, CollectiveRecorder, comm_records
from workloads.contract import CommRecord, RunConfig
from workloads.optimizer import implementation, trainer_adamw, zero_optimizer

DDP_DEFAULT_BUCKET_MIB = 25  # torch/nn/parallel/distributed.py _DEFAULT_BUCKET_CAP_MB

CAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
"""The compressions that cast each bucket (``compression.CAST_BYTES``): the dtype it travels in."""


def ddp_comm_hook(compression: str, powersgd_rank: int | None = None) -> tuple[Any, Any]:
    """(state, hook) to register with ``DistributedDataParallel.register_comm_hook`` for a
    compression (``workloads/compression.py``: what each does and why PowerSGD is set so).

    All torch's own (``torch/distributed/algorithms/ddp_comm_hooks/``, torch 2.13): ``none``
    ``default_hooks.allreduce_hook``, ``bf16`` ``bf16_compress_hook``, ``fp16``
    ``fp16_compress_hook`` (each taking a process group as its state: None, the world), and
    ``powersgd`` ``powerSGD_hook.powerSGD_hook`` with :func:`powersgd_state`.
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if compression == compression_rules.POWERSGD:
        return powersgd_state(powersgd_rank), powerSGD_hook.powerSGD_hook
    hooks = {
        compression_rules.NONE: default_hooks.allreduce_hook,
        "bf16": default_hooks.bf16_compress_hook,
        "fp16": default_hooks.fp16_compress_hook,
    }
    if compression not in hooks:
        known = [*hooks, compression_rules.POWERSGD]
        raise ValueError(f"grad_compression={compression!r} is not one of {known}")
    return None, hooks[compression]


def powersgd_state(rank: int | None) -> Any:
    """torch's ``PowerSGDState`` as linksweep runs it: ``matrix_approximation_rank`` ``rank``
    (the ``powersgd_rank`` axis), ``start_powerSGD_iter`` 2 (torch's default, 1,000, would never
    compress in a short run; 2 is the least torch allows with error feedback or warm start),
    and torch's defaults for the rest: ``min_compression_rate`` 2, error feedback and warm start
    on, ``orthogonalization_epsilon`` 0, ``batch_tensors_with_same_shape`` False; a fixed
    ``random_seed`` (the same initial Q on every rank). ``process_group`` None: the world."""
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState

    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"powersgd_rank must be an int >= 1, got {rank!r}")
    return PowerSGDState(
        process_group=None,
        matrix_approximation_rank=rank,
        start_powerSGD_iter=compression_rules.POWERSGD_START_ITER,
        min_compression_rate=compression_rules.POWERSGD_MIN_COMPRESSION_RATE,
        use_error_feedback=compression_rules.POWERSGD_USE_ERROR_FEEDBACK,
        warm_start=compression_rules.POWERSGD_WARM_START,
        random_seed=compression_rules.POWERSGD_RANDOM_SEED,
    )


def calling(hook: Any) -> Any:
    """``hook`` (one of torch's) behind a function of another name, which DDP registers.

    Why: torch 2.13's ``DistributedDataParallel._check_comm_hook`` refuses a hook whose
    ``__name__`` is ``bf16_compress_hook`` on a torch built without CUDA and NCCL 2.10+ (a check
    of the build, not of the process group), though gloo all-reduces bf16: linksweep's CPU ranks
    (gloo, the emulated cluster) would lose bf16. The wrapper calls torch's hook unchanged; its
    ``__qualname__`` stays torch's, the name DDP's logging records."""

    # unannotated: DDP checks the annotations it finds (a string here) against GradBucket
    def linksweep_comm_hook(state, bucket):
        return hook(state, bucket)

    linksweep_comm_hook.__qualname__ = hook.__qualname__
    linksweep_comm_hook.hook = hook  # what it calls (tests, a reader)
    return linksweep_comm_hook


def run_compression(cfg: Any) -> compression_rules.Compression:
    """The run's compression: ``cfg.axes`` (``grad_compression``, ``powersgd_rank``)."""
    return compression_rules.compression_of(getattr(cfg, "axes", None) or {})


@contextlib.contextmanager
def new_groups_inherit_timeout(timeout_s: float, module: ModuleType | Any = dist) -> Iterator[None]:
    """While the block runs, ``module.new_group`` without a timeout gets ``timeout_s``.

    Why: torch 2.13's ``new_group`` (``_new_group_with_tag``) fills a missing timeout with the
    backend's default (``_get_default_timeout``: 10 min for NCCL, 30 min for gloo), not with the
    world group's. DeepSpeed 0.19.8 builds its groups with ``dist.new_group(ranks)`` and no
    timeout (``utils/groups.py``; the data-parallel group is ``_clone_world_group``), which
    reaches ``torch.distributed.new_group`` through ``deepspeed.comm.torch.TorchBackend``. So a
    ZeRO collective that hangs was aborted by the NCCL watchdog at 10 minutes, before the run's
    own ``run_timeout_s`` could read the ranks' stacks; every group now shares the world
    group's ``pg_timeout_s`` (``run_timeout_s`` + 60 s, ``orchestrator.sweep.planner.pg_timeout_s``).
    Neither torch nor DeepSpeed has a setting for a new group's default timeout. The patch is
    applied in the rank process only, around ``deepspeed.initialize``, and undone after it;
    a call that passes its own timeout keeps it.
    """
    original = module.new_group
    timeout = datetime.timedelta(seconds=timeout_s)

    def new_group(*args: Any, **kwargs: Any) -> Any:
        if len(args) < 2 and kwargs.get("timeout") is None:  # timeout is the 2nd parameter
            kwargs["timeout"] = timeout
        return original(*args, **kwargs)

    module.new_group = new_group
    try:
        yield
    finally:
        module.new_group = original


def group_timeout_s(group: Any) -> float | None:
    """The collective timeout a process group's backend holds (gloo or NCCL), in seconds."""
    for device in ("cuda", "cpu"):
        try:
            backend = group._get_backend(torch.device(device))
        except RuntimeError:  # no backend for this device type in the group
            continue
        options = getattr(backend, "options", None)
        if options is not None and getattr(options, "_timeout", None) is not None:
            return options._timeout.total_seconds()
    return None


class DDPStrategy:
    """torch DDP; gradient accumulation skips the all-reduce with no_sync() until the boundary
    (``grad_sync`` ``last``, the default), or all-reduces every micro-batch (``each``: no
    ``no_sync``, as accelerate's ``sync_each_batch``).

    ``overlap_comm`` ``default``/``true``: DDP as users run it, each bucket all-reduced as soon
    as its gradients are ready, overlapping the rest of backward. ``false``: every backward runs
    under ``no_sync()`` and the gradients are all-reduced after the boundary backward has
    finished, in buckets of the same cap (``bucket_mb`` MiB, as DDP's ``bucket_cap_mb``), in
    DDP's order (reverse parameter order), averaged like DDP's hook: the same bytes, exposed.

    ``grad_compression`` (``workloads/compression.py``): with overlap, DDP runs torch's own comm
    hook for it (:func:`ddp_comm_hook`), registered for every run, timed or not, so every pass
    runs the same code. Without overlap there is no DDP hook: ``bf16`` and ``fp16`` cast each
    bucket as torch's compress hooks do; ``powersgd`` cannot run there (it needs DDP's
    ``GradBucket`` and its state across iterations) and is refused.

    Bytes are counted by the collective recorder (``workloads/collectives.py``), timed, during
    the profiled steps: every collective as issued, with its dtype on the link (PowerSGD's three
    all-reduces per bucket each a record). ``collectives`` keeps the last profiled pass's
    records (micro-batch by micro-batch: the accumulation check reads them); its comms are the
    all-reduces (the gradients'), DDP's own few-byte broadcasts (the bucket rebuild after the
    first step, module buffers: gpt2 has none) left out as the hook-based count left them out.
    """

    def __init__(self, model, device, cfg, autocast_dtype):
        from torch.nn.parallel import DistributedDataParallel as DDP

        self.device = device
        self.compression = run_compression(cfg)
        self.grad_accum = cfg.grad_accum
        self.sync_each = getattr(cfg, "grad_sync", None) == "each"
        self.overlap = cfg.overlap_comm != "false"
        if not self.overlap and self.compression.name == compression_rules.POWERSGD:
            raise ValueError(
                "grad_compression=powersgd cannot run with overlap_comm=false: overlap_comm "
                "false all-reduces the gradients after backward outside DDP (no comm hook), and "
                "PowerSGD runs only as DDP's comm hook (it needs DDP's GradBucket and its state "
                "across iterations); use overlap_comm default or true"
            )
        # DDP's bucket_cap_mb is MiB; None is DDP's own default, 25 MiB
        self.bucket_bytes = int((cfg.bucket_mb or DDP_DEFAULT_BUCKET_MIB) * 1024 * 1024)
        self.autocast_dtype = autocast_dtype
        ids = [device.index] if device.type == "cuda" else None
        self.model = DDP(model.to(device), device_ids=ids, bucket_cap_mb=cfg.bucket_mb)
        self.optimizer = trainer_adamw(self.model.parameters(), cfg.lr)
        self.optimizer_impl = implementation(self.optimizer)
        self._step = 0
        self._micro = 0
        self.recorder: CollectiveRecorder | None = None
        self.collectives: tuple[Collective, ...] = ()
        self.hook_state: Any = None  # the registered hook's state (PowerSGD's: its iterations)
        if self.overlap:
            state, hook = ddp_comm_hook(self.compression.name, self.compression.powersgd_rank)
            self.hook_state = state
            self.model.register_comm_hook(state, calling(hook))
        self.compile_stats: compiling.CompileStats | None = None
        if compiling.enabled(cfg):  # after the hook: DDP's own object is what dynamo wraps
            self.compile_stats = compiling.CompileStats(compiling.backend_name())
            self.model = compiling.compile_ddp(self.model, self.compile_stats)

    def micro_step(self, batch: torch.Tensor, boundary: bool) -> torch.Tensor:
        if self.recorder is not None:
            self.recorder.at(self._step, self._micro)
        reduce_now = boundary or self.sync_each
        sync = reduce_now and self.overlap
        ctx = contextlib.nullcontext() if sync else self.model.no_sync()
        with ctx:
            with torch.autocast(
                self.device.type,
                dtype=self.autocast_dtype or torch.float32,
                enabled=self.autocast_dtype is not None,
            ):
                loss = self.model(input_ids=batch, labels=batch).loss
            (loss / self.grad_accum).backward()
        if reduce_now and not self.overlap:
            self._allreduce_after_backward()
        self._micro += 1
        return loss.detach()

    def _buckets(self) -> list[list[torch.Tensor]]:
        """Gradients in DDP's order (reverse registration), grouped up to the bucket cap."""
        buckets: list[list[torch.Tensor]] = [[]]
        size = 0
        for p in reversed(list(self.model.module.parameters())):
            if p.grad is None:
                continue
            nbytes = p.grad.numel() * p.grad.element_size()
            if buckets[-1] and size + nbytes > self.bucket_bytes:
                buckets.append([])
                size = 0
            buckets[-1].append(p.grad)
            size += nbytes
        return [b for b in buckets if b]

    def _allreduce_after_backward(self) -> None:
        """Every bucket averaged as torch's hooks do it: divided by the ranks, then summed by one
        all_reduce (in bf16 / fp16 where the compression casts, as ``bf16_compress_hook`` /
        ``fp16_compress_hook``: the division first avoids fp16 overflow)."""
        from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

        world = dist.get_world_size()
        cast = CAST_DTYPES.get(self.compression.name)
        flats, works = [], []
        for bucket in self._buckets():
            flat = _flatten_dense_tensors(bucket)
            if cast is not None:  # the bucket travels in the compression's dtype
                flat = flat.to(cast)
            flat.div_(world)
            works.append(dist.all_reduce(flat, async_op=True))
            flats.append((flat, bucket))
        for work, (flat, bucket) in zip(works, flats, strict=True):
            work.wait()
            for grad, synced in zip(bucket, _unflatten_dense_tensors(flat, bucket), strict=True):
                grad.copy_(synced)  # copy_ casts a bf16 / fp16 bucket back to the grad's dtype

    def optimizer_step(self) -> None:
        if self.recorder is not None:
            self.recorder.at(self._step, None)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._step += 1
        self._micro = 0

    def profile_start(self) -> None:
        """Record (timed) every collective until :meth:`profile_stop`. Timed matters beyond
        the times: it waits for each collective before handing its Work back, so a comm hook's
        follow-up collectives (PowerSGD's P and Q all-reduces, issued from its futures'
        callbacks) run in this rank's thread, where the recorder listens, also on gloo."""
        self.recorder = CollectiveRecorder(timed=True, device=self.device)
        self.recorder.__enter__()

    def profile_stop(self) -> tuple[CommRecord, ...]:
        recorder, self.recorder = self.recorder, None
        if recorder is None:
            return ()
        recorder.__exit__(None, None, None)
        self.collectives = tuple(recorder.records)
        return comm_records(r for r in self.collectives if r.op == "all_reduce")

    def effective_config(self) -> dict | None:
        return None  # DDP's settings are the variant's own (bucket_mb, overlap_comm, compression)

    def swap_files(self) -> int:
        return 0

    def teardown(self) -> None:
        if self.recorder is not None:
            self.profile_stop()


class ZeroStrategy:
    """DeepSpeed ZeRO stage 1/2/3 with the engine's own accumulation.

    ``engine.step()`` is called after every micro-step; DeepSpeed steps the optimizer only at the
    accumulation boundary (``gradient_accumulation_steps`` in its config), as its docs require.
    """

    def __init__(self, model, device, cfg, autocast_dtype):
        import deepspeed

        self.device = device
        self.world_size = dist.get_world_size()
        # DeepSpeed's swap folders are named by the global rank (0 outside a process group)
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.nvme_dir = cfg.nvme_dir
        if self.nvme_dir:
            os.makedirs(self.nvme_dir, exist_ok=True)
        compiling.refuse_deepcompile(cfg.ds_config, torch.cuda.is_available())
        optimizer = zero_optimizer(model.parameters(), cfg.lr, cfg.ds_config)
        try:
            with new_groups_inherit_timeout(cfg.pg_timeout_s):
                self.engine, _, _, _ = deepspeed.initialize(
                    model=model, optimizer=optimizer, config=cfg.ds_config
                )
            # what DeepSpeed steps (its basic optimizer, which ZeRO wraps)
            self.optimizer_impl = implementation(self.engine.basic_optimizer)
            self.compile_stats: compiling.CompileStats | None = None
            if compiling.enabled(cfg):  # DeepSpeed's own: self.module.compile(backend=...)
                self.compile_stats = compiling.CompileStats(compiling.backend_name())
                self.engine.compile(backend=self.compile_stats.wrap())
        except Exception as exc:
            if self.nvme_dir:
                from workloads.aio_check import aio_facts, async_io_missing

                missing = async_io_missing(aio_facts())
                if missing is not None:  # name what this node lacks, not DeepSpeed's symptom
                    raise RuntimeError(
                        f"NVMe offload needs DeepSpeed's async_io op, built here on first use: "
                        f"{missing} (DeepSpeed said: {type(exc).__name__}: {exc})"
                    ) from exc
            raise

    def effective_config(self) -> dict | None:
        """The config DeepSpeed parsed, after its defaults (``workloads/ds_effective.py``)."""
        from workloads.ds_effective import effective_config

        return effective_config(self.engine._config)

    def micro_step(self, batch: torch.Tensor, boundary: bool) -> torch.Tensor:
        batch = batch.to(self.engine.device)
        loss = self.engine(input_ids=batch, labels=batch).loss
        self.engine.backward(loss)
        self.engine.step()
        return loss.detach()

    def optimizer_step(self) -> None:
        pass  # engine.step() in micro_step already stepped at the accumulation boundary

    def profile_start(self) -> None:
        from workloads import ds_comms

        ds_comms.start()

    def profile_stop(self) -> tuple[CommRecord, ...]:
        from workloads import ds_comms

        return ds_comms.stop(self.world_size)

    def own_swap_dirs(self) -> list[str]:
        """This rank's folders under the run's NVMe folder: DeepSpeed 0.19.8 swaps each rank to
        a ``rank{k}`` folder of its own (``swap_tensor/optimizer_utils.py``:
        ``zero_stage_3/optimizer/rank{k}``; ``partitioned_param_swapper.py``:
        ``zero_stage_3/{dtype}params/rank{k}``, k the global rank). Ranks of one node share the
        run's folder, so a rank touches only its own: the first one done must not remove a
        peer's swap files while it still trains, and each count is one rank's."""
        if not self.nvme_dir:
            return []
        mine = f"rank{self.rank}"
        return sorted(
            os.path.join(root, d) for root, dirs, _ in os.walk(self.nvme_dir) for d in dirs
            if d == mine
        )  # fmt: skip

    def swap_files(self) -> int:
        """Files DeepSpeed wrote to this rank's swap folders (proof the offload went there)."""
        return sum(len(files) for d in self.own_swap_dirs() for _, _, files in os.walk(d))

    def teardown(self) -> None:
        """The engine destroyed, then this rank's swap folders removed (the driver removes the
        run's folder once every rank is gone)."""
        if hasattr(self.engine, "destroy"):
            self.engine.destroy()
        for d in self.own_swap_dirs():
            shutil.rmtree(d, ignore_errors=True)


def make_strategy(model, device, cfg: RunConfig, autocast_dtype):
    """The strategy object ``cfg.strategy``'s catalog entry names (its ``workload``, a
    ``module:Class`` taking ``(model, device, cfg, autocast_dtype)``). A name the catalog lacks
    is a ValueError naming the allowed values (``catalog.strategy``): never some other
    strategy."""
    workload = catalog.resolve(catalog.strategy(cfg.strategy).workload)
    return workload(model, device, cfg, autocast_dtype)
