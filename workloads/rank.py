"""One rank of a run: the body of the Ray actor the driver starts per rank per run.

A plain class; ``orchestrator/raycluster/runs.py`` turns it into an actor with ``ray.remote``, fresh
for every run and started with the link's environment (NCCL reads its env once per process).
Rendezvous follows Ray Train: the driver asks rank 0 for its address and a free port, then fans
out ``run`` to every rank. In: a ``contract.RunConfig`` or ``LinkbenchConfig``; out: one
``contract.RankRecord``. Imports nothing from ``orchestrator``.

May import: catalog, contract, device, diag, linkbench, nccl_files, phases, train, deepspeed, ray,
torch, transformers.
"""

from __future__ import annotations

import contextlib
import datetime
import inspect
import os
import socket
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from workloads import catalog
from workloads.contract import DeviceDecision, LinkbenchConfig, NodeInfo, RankRecord, RunConfig
from workloads.nccl_files import read_nccl_log
from workloads.phases import PhaseClock

if TYPE_CHECKING:
    from workloads.diag import Armed

MASTER_POLL_S = 0.005
"""How often a rank other than 0 tries rank 0's rendezvous port before its process group
(:func:`wait_for_master`): a refused connect on a live host costs microseconds, and rank 0
listens within one poll of the moment its ``init_process_group`` starts."""

PROGRESS_EVERY_S = 2.0
"""Rank 0 reports its step for the live display at most this often (and always the last step):
a report per step would cost a fast GPU step a remote call each time, and every report wakes
the process that receives it (the driver polls at the same pace, ``raycluster.runs.TICK_S``)."""


def free_port() -> int:
    """A TCP port free on this node now (rank 0's rendezvous port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def wait_for_master(addr: str, port: int, timeout_s: float) -> bool:
    """Wait until ``addr:port`` accepts a TCP connection (rank 0's TCPStore listening), at most
    ``timeout_s``; True once it did, False otherwise.

    Why: a rank whose ``init_process_group`` reaches the store before rank 0 listens has its
    connect refused, and torch retries it only after a back-off, so both ranks' ``pg_init``
    took ~0.5 s instead of ~0.02 s in whichever run that race went the wrong way
    (docs/measurements/2026-11-27-startup-overhead.md). Polling every ``MASTER_POLL_S`` instead
    lets torch's first connect succeed. The probe connection closes without a byte sent: the
    TCPStore server (libuv and classic, torch 2.13) drops it as a client that left, and counts
    no worker for it. Only a refused or timed-out connect is waited on; any other failure (a
    name that does not resolve, no route) returns False at once, and ``init_process_group``
    then fails or waits as it would have."""
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            with socket.create_connection((addr, port), timeout=min(1.0, left)):
                return True
        except (ConnectionRefusedError, TimeoutError):
            time.sleep(min(MASTER_POLL_S, max(0.0, deadline - time.monotonic())))
        except OSError:
            return False
    return False


def assigned_gpu_ids() -> tuple[str, ...]:
    """The GPU ids Ray assigned to this task or actor (run as a task in a placement-group bundle,
    it names the bundle's GPUs: ``raycluster.runs.bundle_gpu_ids``)."""
    import ray  # this process is a Ray worker: ray is its runtime

    return tuple(str(g) for g in ray.get_gpu_ids())


def node_info(gpu_ids: tuple[str, ...] = ()) -> NodeInfo:
    """Where this process runs: node id, hostname, IP, pid, and the GPU ids Ray assigned it."""
    import ray  # this process is a Ray worker: ray is its runtime

    ctx = ray.get_runtime_context()
    return NodeInfo(
        node_id=ctx.get_node_id(),
        hostname=socket.gethostname(),
        ip=ray.util.get_node_ip_address(),
        gpu_ids=gpu_ids,
        pid=os.getpid(),
    )


class Rank:
    def __init__(self) -> None:
        self.created_wall_s = time.time()

    def node_info(self) -> NodeInfo:
        """Where this rank landed, with the GPU ids Ray assigned to it."""
        return node_info(assigned_gpu_ids())

    def free_port(self) -> int:
        return free_port()

    def run(
        self,
        cfg: RunConfig | LinkbenchConfig,
        rank: int,
        world_size: int,
        local_rank: int,
        master_addr: str,
        master_port: int,
        node_gpu_ids: list[str] | None,
        progress=None,
    ) -> RankRecord:
        """Initialise the process group, train, and return this rank's records.

        ``progress``: where rank 0 reports its step (a ``ProgressBoard`` actor, or the fork
        launcher's pipe); None: no reports.

        ``node_gpu_ids``: every GPU id Ray assigned to this run's ranks on this node (a forked
        rank's: those of its run's bundles there, ``raycluster.runs.bundle_gpu_ids``). Same-node
        ranks all see these GPUs and pick theirs by local rank, as Ray Train does, so NCCL can
        find peer GPUs for P2P/NVLink (one visible GPU per process breaks P2P paths). None or
        empty (a CPU bundle): every GPU is hidden (``workloads.device``).

        A rank with GPUs times ``cuda_init``: the device decision (torch's first CUDA calls
        initialise the driver) and the device's primary context (:func:`_cuda_context`); a CPU
        rank has no such phase.
        """
        from workloads.device import rank_env, visible_devices

        node_gpu_ids = list(node_gpu_ids or ())
        # before anything touches CUDA: device_count and the CUDA context follow this value
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_devices(node_gpu_ids)
        clock = PhaseClock()
        with clock.phase("imports"):
            import torch
            import torch.distributed  # noqa: F401 (timed here; _process_group uses it)

            from workloads.train import decide_device

            if isinstance(cfg, RunConfig):  # what training will import, timed as one phase
                import transformers  # noqa: F401

                if catalog.family_of(cfg.strategy) == catalog.ZERO:  # DeepSpeed runs that family
                    import deepspeed  # noqa: F401
            from workloads.diag import Armed

        # a DeviceError (GPUs assigned, no CUDA in this torch...) fails the run here, before any
        # process group exists, and its text is the run's stored error
        with clock.phase("cuda_init") if node_gpu_ids else contextlib.nullcontext():
            decision = decide_device(local_rank, node_gpu_ids)
            if decision.backend == "nccl":
                _cuda_context(torch, torch.device(decision.device))
        # LOCAL_RANK names the decided device: DeepSpeed and torch pick their device from it
        os.environ.update(
            rank_env(decision, rank, world_size, local_rank, master_addr, master_port)
        )
        backend, device = decision.backend, torch.device(decision.device)
        armed = Armed(cfg.run_id, rank)  # a hang is diagnosed from this rank's stack
        master = (master_addr, master_port)
        with _process_group(decision, master, rank, world_size, cfg.pg_timeout_s, armed, clock):
            training, linkbench = self._work(cfg, rank, world_size, device, decision, progress)
        return RankRecord(
            rank=rank,
            local_rank=local_rank,
            backend=backend,
            device=str(device),
            created_wall_s=self.created_wall_s,
            nccl_log=read_nccl_log() if backend == "nccl" else None,
            training=training,
            linkbench=tuple(linkbench),
            phases=clock.records(),
            device_decision=decision,
        )

    def _work(self, cfg, rank, world_size, device, decision, progress) -> tuple:
        """(training record, linkbench records): the run's workload in the process group."""
        on_step = None
        if progress is not None and rank == 0:
            # a ProgressBoard actor (fresh Ray actors) or the fork launcher's pipe: both have
            # update(run_id, step, total, warmup), the actor's called through .remote
            report = getattr(progress.update, "remote", progress.update)
            last = [float("-inf")]

            def on_step(step: int, total: int, warmup: bool) -> None:
                now = time.monotonic()  # at most two reports a second, and the last step's
                if now - last[0] >= PROGRESS_EVERY_S or step == total:
                    last[0] = now
                    report(cfg.run_id, step, total, warmup)

        if isinstance(cfg, LinkbenchConfig):
            from workloads.linkbench import run_linkbench

            cpu = device.type == "cpu"
            linkbench = run_linkbench(
                device,
                max_bytes=cfg.max_bytes,
                warmup_iters=1 if cpu else 2,
                iters=3 if cpu else 10,
            )
            return None, linkbench
        from workloads.device import nvml_target
        from workloads.train import run_training

        nvml = nvml_target(decision.nvml_id)
        return run_training(cfg, rank, world_size, device, on_step, nvml), ()


def _cuda_context(torch, device) -> None:
    """Create this rank's CUDA context on ``device`` now (``cuda_init``), not inside whichever
    phase first touches the GPU: ``set_device`` does not create it for the device already
    current (c10 ``SetDevice`` skips ``cudaSetDevice`` then); a device synchronise does, and
    waits for it (a CPU-GPU sync point)."""
    torch.cuda.init()
    torch.cuda.synchronize(device)


@contextlib.contextmanager
def _process_group(
    decision: DeviceDecision,
    master: tuple[str, int],
    rank: int,
    world_size: int,
    timeout_s: float,
    armed: Armed,
    clock: PhaseClock,
) -> Iterator[None]:
    """The run's process group, up for the body of the ``with`` and down after it, failed or
    not, with ``armed`` (the hang diagnosis) disarmed last. A failure carries the device
    decision in its notes: it is in the stored error, and rows.py reads it back.

    ``master``: rank 0's (address, port); rendezvous is ``tcp://`` there, rank 0 hosting the
    store. A rank other than 0 first waits (:func:`wait_for_master`, inside ``pg_init``) for
    that port to listen; the wait is bounded by ``timeout_s``, and the group's own timeout
    then applies as before (the driver's run deadline, shorter, comes first)."""
    import torch.distributed as dist

    from workloads.device import pg_init_kwargs

    accepts_device_id = "device_id" in inspect.signature(dist.init_process_group).parameters
    try:
        with clock.phase("pg_init"):
            if rank != 0:
                wait_for_master(*master, timeout_s)
            dist.init_process_group(
                decision.backend,
                init_method=f"tcp://{master[0]}:{master[1]}",
                rank=rank,
                world_size=world_size,
                timeout=datetime.timedelta(seconds=timeout_s),
                **pg_init_kwargs(decision, world_size, accepts_device_id),
            )
        yield
    except Exception as exc:
        exc.add_note(decision.note(rank))
        raise
    finally:
        with clock.phase("rank_teardown"):
            if dist.is_initialized():
                dist.destroy_process_group()
        armed.disarm()
