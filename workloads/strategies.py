"""Parallelism strategies behind one small interface, so DDP and ZeRO share one measurement loop.

A strategy owns the wrapped model and optimizer. The loop calls ``micro_step`` grad_accum times
(``boundary`` true on the last) and then ``optimizer_step``: one optimizer step = one timed step.
Communication is accounted per collective (op, message bytes, count, time) during profiled steps
outside the timed ones, because timing a collective means synchronising around it. Runs in rank
processes; imports only workloads modules.

Which class a run builds is the catalog's (``workloads/catalog.py``): each strategy's entry names
its ``workload`` (``DDPStrategy`` and ``ZeroStrategy`` here, ``workloads.fsdp.FsdpStrategy``), and
:func:`make_strategy` builds that one; a name the catalog lacks is an error, never a fallback.

May import: aio_check, catalog, contract, device, ds_comms, ds_effective, deepspeed, torch.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import time
from collections import defaultdict
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist

from workloads import catalog
from workloads.contract import CommRecord, RunConfig
from workloads.device import sync
from workloads.ds_comms import comm_record, dtype_name

DDP_DEFAULT_BUCKET_MIB = 25  # torch/nn/parallel/distributed.py _DEFAULT_BUCKET_CAP_MB

DDP_GRAD_DTYPES = catalog.axis("ddp_grad_dtype").values
"""The dtype DDP all-reduces gradients in (the catalog's ``ddp_grad_dtype`` axis). ``fp32``: DDP's
default hook, the gradients' own dtype (fp32 even under bf16 autocast, which keeps parameters
and so gradients in fp32); ``bf16``: torch's ``bf16_compress_hook``, which casts each bucket to
bf16 before the all_reduce and back after it: half the bytes, as ZeRO's bf16 collectives."""


def ddp_comm_hook(grad_dtype: str):
    """DDP's own comm hook that all-reduces a bucket in ``grad_dtype`` (``DDP_GRAD_DTYPES``).

    Both are torch's (``torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py``, torch
    2.13): ``allreduce_hook(process_group, bucket)`` and ``bf16_compress_hook(process_group,
    bucket)``; ``process_group`` None means the world group.
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    hooks = {"fp32": default_hooks.allreduce_hook, "bf16": default_hooks.bf16_compress_hook}
    if grad_dtype not in hooks:
        raise ValueError(f"ddp_grad_dtype={grad_dtype!r} is not one of {list(DDP_GRAD_DTYPES)}")
    return hooks[grad_dtype]


def sent_dtype(grad_dtype: str, buffer_dtype: Any) -> str:
    """The dtype a bucket crosses the link in: bf16 when compressed, else the bucket's own."""
    return "bf16" if grad_dtype == "bf16" else dtype_name(buffer_dtype)


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


class CommCounter:
    """Aggregates collectives by (op, msg_bytes, dtype): count and total time. ``msg_bytes`` are
    the bytes sent, in ``dtype`` (a bf16-compressed bucket counts 2 bytes per element)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, int, str], list[float]] = defaultdict(lambda: [0, 0.0])

    def add(self, op: str, msg_bytes: int, time_s: float, dtype: str = "fp32") -> None:
        entry = self.counts[(op, msg_bytes, dtype)]
        entry[0] += 1
        entry[1] += time_s

    def records(self) -> tuple[CommRecord, ...]:
        return tuple(
            comm_record(op, b, int(c), t, dtype)
            for (op, b, dtype), (c, t) in sorted(self.counts.items())
        )


class DDPStrategy:
    """torch DDP; gradient accumulation skips the all-reduce with no_sync() until the boundary
    (``grad_sync`` ``last``, the default), or all-reduces every micro-batch (``each``: no
    ``no_sync``, as accelerate's ``sync_each_batch``).

    ``overlap_comm`` ``default``/``true``: DDP as users run it, each bucket all-reduced as soon
    as its gradients are ready, overlapping the rest of backward. ``false``: every backward runs
    under ``no_sync()`` and the gradients are all-reduced after the boundary backward has
    finished, in buckets of the same cap (``bucket_mb`` MiB, as DDP's ``bucket_cap_mb``), in
    DDP's order (reverse parameter order), averaged like DDP's hook: the same bytes, exposed.

    ``ddp_grad_dtype`` ``bf16``: each bucket is all-reduced in bf16 (:func:`ddp_comm_hook`), with
    or without overlap. DDP takes one comm hook; the counting hook below is it, and it calls
    torch's hook for the dtype, so the profiled pass counts the bytes that hook really sends.
    """

    def __init__(self, model, device, cfg, autocast_dtype):
        from torch.nn.parallel import DistributedDataParallel as DDP

        self.device = device
        # RunConfig carries the variant's ddp_grad_dtype; a contract without it sends fp32
        self.grad_dtype = cfg.ddp_grad_dtype
        self.grad_accum = cfg.grad_accum
        self.sync_each = getattr(cfg, "grad_sync", None) == "each"
        self.overlap = cfg.overlap_comm != "false"
        # DDP's bucket_cap_mb is MiB; None is DDP's own default, 25 MiB
        self.bucket_bytes = int((cfg.bucket_mb or DDP_DEFAULT_BUCKET_MIB) * 1024 * 1024)
        self.autocast_dtype = autocast_dtype
        ids = [device.index] if device.type == "cuda" else None
        self.model = DDP(model.to(device), device_ids=ids, bucket_cap_mb=cfg.bucket_mb)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr)
        self.profiling = False
        self.counter = CommCounter()
        self._allreduce_hook = ddp_comm_hook(self.grad_dtype)
        # The hook is what DDP does for the dtype (average each bucket with one all_reduce, in
        # fp32 or bf16); it is registered for every run, timed or not, so both passes run the
        # same code path. Only in the profiled pass does it block on each bucket to time it.
        self.model.register_comm_hook(None, self._hook)

    def _hook(self, state, bucket):
        buf = bucket.buffer()
        dtype = sent_dtype(self.grad_dtype, buf.dtype)
        msg_bytes = buf.numel() * (2 if dtype == "bf16" else buf.element_size())
        if not self.profiling:
            return self._allreduce_hook(None, bucket)
        sync(self.device)
        t0 = time.perf_counter()
        fut = self._allreduce_hook(None, bucket)
        fut.wait()
        sync(self.device)
        self.counter.add("all_reduce", msg_bytes, time.perf_counter() - t0, dtype)
        return fut

    def micro_step(self, batch: torch.Tensor, boundary: bool) -> torch.Tensor:
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
        from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

        world = dist.get_world_size()
        flats, works = [], []
        for bucket in self._buckets():
            flat = _flatten_dense_tensors(bucket)
            if self.grad_dtype == "bf16":  # as bf16_compress_hook: the bucket travels in bf16
                flat = flat.to(torch.bfloat16)
            if self.profiling:
                sync(self.device)
                t0 = time.perf_counter()
                dist.all_reduce(flat)
                sync(self.device)
                self.counter.add(
                    "all_reduce",
                    flat.numel() * flat.element_size(),
                    time.perf_counter() - t0,
                    dtype_name(flat.dtype),
                )
                works.append(None)
            else:
                works.append(dist.all_reduce(flat, async_op=True))
            flats.append((flat, bucket))
        for work, (flat, bucket) in zip(works, flats, strict=True):
            if work is not None:
                work.wait()
            flat.div_(world)
            for grad, synced in zip(bucket, _unflatten_dense_tensors(flat, bucket), strict=True):
                grad.copy_(synced)  # copy_ casts a bf16 bucket back to the gradient's dtype

    def optimizer_step(self) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def profile_start(self) -> None:
        self.counter = CommCounter()
        self.profiling = True

    def effective_config(self) -> dict | None:
        return None  # DDP's settings are the variant's own (bucket_mb, overlap_comm, grad dtype)

    def profile_stop(self) -> tuple[CommRecord, ...]:
        self.profiling = False
        return self.counter.records()

    def swap_files(self) -> int:
        return 0

    def teardown(self) -> None:
        pass


class ZeroStrategy:
    """DeepSpeed ZeRO stage 1/2/3 with the engine's own accumulation.

    ``engine.step()`` is called after every micro-step; DeepSpeed steps the optimizer only at the
    accumulation boundary (``gradient_accumulation_steps`` in its config), as its docs require.
    """

    def __init__(self, model, device, cfg, autocast_dtype):
        import deepspeed

        self.device = device
        self.world_size = dist.get_world_size()
        self.nvme_dir = cfg.nvme_dir
        if self.nvme_dir:
            os.makedirs(self.nvme_dir, exist_ok=True)
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
        try:
            with new_groups_inherit_timeout(cfg.pg_timeout_s):
                self.engine, _, _, _ = deepspeed.initialize(
                    model=model, optimizer=optimizer, config=cfg.ds_config
                )
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

    def swap_files(self) -> int:
        """Files DeepSpeed wrote under this run's NVMe folder (proof the offload went there)."""
        if not self.nvme_dir:
            return 0
        return sum(len(files) for _, _, files in os.walk(self.nvme_dir))

    def teardown(self) -> None:
        if hasattr(self.engine, "destroy"):
            self.engine.destroy()
        if self.nvme_dir:
            shutil.rmtree(self.nvme_dir, ignore_errors=True)


def make_strategy(model, device, cfg: RunConfig, autocast_dtype):
    """The strategy object ``cfg.strategy``'s catalog entry names (its ``workload``, a
    ``module:Class`` taking ``(model, device, cfg, autocast_dtype)``). A name the catalog lacks
    is a ValueError naming the allowed values (``catalog.strategy``): never some other
    strategy."""
    workload = catalog.resolve(catalog.strategy(cfg.strategy).workload)
    return workload(model, device, cfg, autocast_dtype)
