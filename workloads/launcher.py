"""The per-node rank launcher: one Ray actor per node per sweep, holding a fork server that has
torch, transformers, deepspeed and datasets imported, so that a run's ranks start in
milliseconds instead of paying the imports (~5 s on 2 cores) every run.

Why a fork server and not the actor itself: a Ray worker has gRPC and other threads running, and
forking a threaded process is unsafe. Python's ``multiprocessing`` forkserver is a separate,
single-threaded interpreter started once (from this actor, with this actor's environment); it
imports the modules of ``PRELOAD`` without touching CUDA (``PYTORCH_NVML_BASED_CUDA_CHECK=1``, no
CUDA call), then forks one child per request. Each rank of each run is such a child: a fresh
process, whose environment is rebuilt before any linksweep code runs to exactly this actor's
environment plus the run's env (the link's variables: NCCL and gloo read env once per process,
at process-group init, which happens after that). Nothing of an earlier run can leak: the server
never runs a rank and never changes its own environment.

GPU nodes (``accelerator="cuda"``): the launcher is a zero-GPU Ray actor, and Ray 2.60 leaves
``CUDA_VISIBLE_DEVICES`` untouched for such workers (``override_on_zero=False``), so it holds the
raylet's whole GPU list, or none (every GPU). Neither reaches a rank: every child's environment
has ``CUDA_VISIBLE_DEVICES`` set by this module before any of its code runs (``""`` by default,
the ids of the rank's bundle for a GPU rank: :meth:`Launcher.run_rank`). The fork server itself
sees no GPU (:func:`server_env`): torch's NVML-based CUDA check returns 0 from the empty
``CUDA_VISIBLE_DEVICES`` before loading NVML, and never falls back to ``cudaGetDeviceCount``
(it would for MIG ids, initialising the driver: no forked child could use CUDA after that).
NVML is not initialised in the server either: its state does not survive a fork (NVIDIA's own
cuCascade re-initialises it per pid after a fork, NVIDIA/cuCascade#138), and DeepSpeed's CUDA
accelerator calls ``pynvml.nvmlInit()`` when it is made, at ``import deepspeed``; so the server
refuses ``nvmlInit`` while it preloads (:func:`guard_nvml`) and each child gives the real one
back before anything else (:func:`release_nvml_guard`). DeepSpeed picks its accelerator once,
at import, and keeps it in module state (``runtime/utils.py`` binds its memory functions,
``ops/op_builder/all_ops.py`` its op builders): the server would see no GPU and pick CPU, so on
a GPU node it gets ``DS_ACCELERATOR=cuda``.

Ray still owns placement and lifetime: the driver reserves a placement group per run as before
and asks the launcher of the node each bundle landed on; killing the launcher (the driver does
at the end of the sweep, Ray does if the node goes) ends the fork server, and each rank dies with
its parent (``PR_SET_PDEATHSIG``). ``kill_run`` ends a run's ranks (timeout, failure).

A plain class; ``orchestrator/raycluster/launchers.py`` makes it a threaded actor (one thread per rank of a
run on this node, plus ``kill_run``). Imports nothing from ``orchestrator``.

May import: catalog, contract, cpu_policy, nccl_files, rank, pynvml.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import multiprocessing
import multiprocessing.connection
import multiprocessing.spawn as mp_spawn
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable

from workloads import catalog
from workloads.contract import NodeInfo, RankRecord
from workloads.cpu_policy import idle_process, normal_self

LAZY_PRELOAD = (
    # What DeepSpeed imports lazily inside ``deepspeed.initialize``, so every ZeRO rank paid it
    # (0.8 s idle, 2.4 s under load, on 2 cores): the optimizer check imports the Muon module,
    # whose ``torch.compile`` decorators pull in torch._dynamo and torch._inductor; the
    # communication backend probes its ops (every op builder; a C compile through distutils,
    # which pulls in setuptools); the engine looks for AutoEP layers; ZeRO-3 imports its
    # offload variant. Imports only: the op probe itself runs compilers and may query GPUs, so it
    # stays in the rank. tests/integration/test_preload.py checks that these start no thread and
    # no CUDA context.
    "deepspeed.runtime.zero.muon.muon_optimizer",
    "deepspeed.ops.op_builder.all_ops",
    "deepspeed.module_inject.auto_ep_layer",
    "deepspeed.utils.pin_memory",
    "deepspeed.runtime.superoffload.superoffload_stage3",
    "setuptools",
    "distutils.ccompiler",
    "distutils.compilers.C.unix",
    "distutils.sysconfig",
    "torch.utils.cpp_extension",
    # The workload's modules a rank imports after the fork (milliseconds, but every run): the
    # module of every strategy's workload class (the catalog's entries, a plugin's included).
    "workloads.diag",
    "workloads.telemetry",
    "workloads.ds_effective",
    *dict.fromkeys(s.workload.partition(":")[0] for s in catalog.STRATEGIES.values()),
)
"""What a run would import lazily, imported once in the fork server by
``workloads.forkserver_lazy`` through :func:`import_quietly`."""
PRELOAD = ["workloads.forkserver_preload", "workloads.forkserver_lazy"]
"""Imported once in the fork server, in this order: the NVML guard (:func:`guard_nvml`), torch,
transformers, deepspeed, datasets, the workload (``forkserver_preload``), then
:data:`LAZY_PRELOAD`. multiprocessing's fork server
skips a name only when its import raises ImportError; any other error would end the server and
fail every run, DDP's too. So the lazy names go through :func:`import_quietly`, which skips a
name whatever its import raises (a DeepSpeed built for another CUDA, a broken setuptools)."""


SERVER_ENV = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1", "TOKENIZERS_PARALLELISM": "false"}
"""The fork server's environment on top of the launcher's (:func:`server_env`)."""
ACCELERATORS = ("cpu", "cuda")
"""What a node's ranks use: its launcher's fork server preloads DeepSpeed for it."""
KILL_WAIT_S = 30.0
"""How long :meth:`Launcher.kill_run` waits for SIGKILLed ranks to be gone: milliseconds on
CPU; a GPU process exits only once the driver has freed its memory."""


def server_env(accelerator: str) -> dict[str, str]:
    """The fork server's environment on top of the launcher actor's (see the module docstring):
    no GPU visible to anything it imports, NVML-based CUDA checks, DeepSpeed's accelerator the
    node's ranks use (``cpu``: DeepSpeed detects it, and finds none). Pure."""
    if accelerator not in ACCELERATORS:
        raise ValueError(f"accelerator {accelerator!r}; allowed: {list(ACCELERATORS)}")
    env = {**SERVER_ENV, "CUDA_VISIBLE_DEVICES": ""}
    if accelerator == "cuda":
        env["DS_ACCELERATOR"] = "cuda"
    return env


def child_visible_devices(gpus) -> str:
    """A forked rank's ``CUDA_VISIBLE_DEVICES``: its node's GPU ids of the run, each once, in
    order; ``""`` (every GPU hidden) without. ``workloads.device.visible_devices`` says the same
    (tests/unit/test_launcher_gpu.py checks it), without importing torch into this actor."""
    return ",".join(dict.fromkeys(str(g) for g in gpus or ()))


_real_nvml: dict[str, Callable] = {}  # pynvml's init functions while guard_nvml holds them


def guard_nvml() -> None:
    """In the fork server, while it preloads: ``pynvml.nvmlInit`` and ``nvmlInitWithFlags``
    raise ``NVMLError`` instead of initialising NVML (DeepSpeed's CUDA accelerator catches it
    and goes on without NVML). Nothing when pynvml is not installed."""
    try:
        import pynvml
    except ImportError:
        return
    if _real_nvml:
        return

    class NvmlRefused(pynvml.NVMLError):
        def __str__(self) -> str:  # NVMLError's would load the library to name the code
            return "NVML is not initialised in the fork server (workloads/launcher.py)"

    def refuse(*_args, **_kwargs):
        raise NvmlRefused(pynvml.NVML_ERROR_UNINITIALIZED)

    for name in ("nvmlInit", "nvmlInitWithFlags"):
        _real_nvml[name] = getattr(pynvml, name)
        setattr(pynvml, name, refuse)


def release_nvml_guard() -> None:
    """Give pynvml its init functions back (in each forked child, before its work)."""
    if _real_nvml:
        import pynvml

        for name, fn in _real_nvml.items():
            setattr(pynvml, name, fn)
        _real_nvml.clear()


def import_quietly(names) -> dict[str, str]:
    """Import each of ``names``; one whose import raises anything is skipped. Returns the
    skipped names with what they raised (the rank then imports them itself, and fails there,
    as its own run, if it needs them)."""
    skipped = {}
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a preload must never end the fork server
            skipped[name] = f"{type(exc).__name__}: {exc}"
    return skipped


def _no_main(get_preparation_data: Callable) -> Callable:
    """multiprocessing re-runs the parent's ``__main__`` in every child (here: Ray's worker
    script, or a test runner); a rank needs none of it. Children get sys.path and nothing else."""
    if getattr(get_preparation_data, "linksweep_no_main", False):
        return get_preparation_data

    def wrapped(name: str) -> dict:
        data = get_preparation_data(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        return data

    wrapped.linksweep_no_main = True  # type: ignore[attr-defined]
    return wrapped


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent (the fork server) exits."""
    with contextlib.suppress(OSError):  # not glibc Linux: kill_run still ends the ranks
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class _PipeProgress:
    """Rank 0's progress reports in a forked child: over the result pipe, to the launcher."""

    def __init__(self, conn) -> None:
        self.conn = conn

    def update(self, run_id: str, step: int, total: int, warmup: bool) -> None:
        self.conn.send(("progress", {"run_id": run_id, "step": step, "total": total,
                                     "warmup": warmup}))  # fmt: skip


_progress: _PipeProgress | None = None  # in a forked child: its pipe to the launcher


def _child(conn, env: dict[str, str], fn: Callable, args: tuple) -> None:
    """The forked process: exactly ``env``, nice 0, then ``fn(*args)``; result over ``conn``
    (and, before it, any progress reports ``fn`` sends through ``_progress``)."""
    global _progress
    # Everything inherited from the fork server (PRELOAD's ~500,000 objects) is module state
    # that lives as long as the process: out of the collector's sight, a full collection scans
    # only what the run makes (DeepSpeed's ZeRO-3 calls gc.collect() in its set-up: 0.32 s ->
    # 0.001 s), and it writes to no page shared with the server (the reason Python's gc docs
    # give for calling freeze in a forked child).
    gc.freeze()
    _progress = _PipeProgress(conn)
    _die_with_parent()
    os.environ.clear()
    os.environ.update(env)  # CUDA_VISIBLE_DEVICES among it: before anything can touch CUDA
    release_nvml_guard()
    with contextlib.suppress(OSError):  # Ray starts workers at nice 15: run at torchrun's
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    code = 1
    try:
        if not normal_self():  # a fork server restarted by the launcher under SCHED_IDLE
            raise RuntimeError(
                "this process is under SCHED_IDLE and may not leave it (no privilege): it would "
                "measure an idle-priority rank"
            )
        conn.send(("ok", fn(*args)))
        code = 0
    except BaseException:  # noqa: BLE001 - every failure goes back as text
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()
        sys.stdout.flush()
        sys.stderr.flush()
        # Now, as a fresh process ends under Ray: no wait for threads a library left running.
        os._exit(code)


def _run_rank(cfg, rank, world_size, local_rank, master_addr, master_port, gpus) -> RankRecord:
    """A rank in a forked child: the same ``Rank.run`` as under a Ray actor; rank 0 reports its
    progress over the pipe (the child has no Ray connection), :meth:`Launcher.progress` serves it."""
    from workloads.rank import Rank

    return Rank().run(cfg, rank, world_size, local_rank, master_addr, master_port, gpus, _progress)


class ForkFailure(RuntimeError):
    """A forked process died or raised; the message says how (signal, exit code, traceback)."""


class Launcher:
    """The per-node launcher actor (see the module docstring)."""

    def __init__(self, accelerator: str = "cpu") -> None:
        """``accelerator``: ``cuda`` where the node's ranks get GPUs (``server_env``)."""
        self.accelerator = accelerator
        # a child gets no GPU unless its call names one (run_rank): never the raylet's list
        self.base_env = dict(os.environ) | {"CUDA_VISIBLE_DEVICES": ""}
        self.base_env.pop("RAY_worker_niceness", None)
        self.ctx = multiprocessing.get_context("forkserver")
        mp_spawn.get_preparation_data = _no_main(mp_spawn.get_preparation_data)
        # what the server starts with (it copies os.environ)
        os.environ.update(server_env(accelerator))
        self.ctx.set_forkserver_preload(PRELOAD)
        self.lock = threading.Lock()
        self.running: dict[str, list] = {}  # run_id -> its live processes
        self.reports: dict[str, dict] = {}  # run_id -> the latest progress report of its rank 0

    def warm(self) -> float:
        """Start the fork server and import PRELOAD in it (once); returns seconds it took.
        Then this actor goes under ``SCHED_IDLE`` (``workloads/cpu_policy.py``): while ranks
        run it only waits for their results, and its Ray worker wakes every 10 ms."""
        t0 = time.perf_counter()
        self.call({}, os.getpid, ())
        idle_process(os.getpid())
        return time.perf_counter() - t0

    def node_info(self) -> NodeInfo:
        from workloads.rank import node_info

        return node_info()

    def free_port(self) -> int:
        from workloads.rank import free_port

        return free_port()

    def call(self, env: dict[str, str], fn: Callable, args: tuple, run_id: str = "") -> object:
        """Fork a child with this actor's environment plus ``env``, run ``fn(*args)`` there and
        return its result. Raises ForkFailure when the child raises or dies."""
        reader, writer = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(target=_child, args=(writer, {**self.base_env, **env}, fn, args))
        proc.start()
        writer.close()
        with self.lock:
            self.running.setdefault(run_id, []).append(proc)
        reported = False
        try:
            while True:  # progress reports (rank 0 only), then the result
                multiprocessing.connection.wait([reader, proc.sentinel])
                try:
                    status, value = reader.recv()  # a partly written message: EOFError
                except (EOFError, OSError):
                    proc.join(timeout=5)
                    raise ForkFailure(_death(proc)) from None
                if status != "progress":
                    break
                self.reports[run_id] = value
                reported = True
            proc.join(timeout=30)
        finally:
            if reported:
                self.reports.pop(run_id, None)
            reader.close()
            with self.lock:
                procs = self.running.get(run_id, [])
                if proc in procs:
                    procs.remove(proc)
        if status != "ok":
            raise ForkFailure(f"rank process {proc.pid} raised:\n{value}")
        return value

    def run_rank(self, env: dict[str, str], cfg, rank: int, world_size: int, local_rank: int,
                 master_addr: str, master_port: int, gpus: list[str] | None) -> RankRecord:  # fmt: skip
        """A rank in a forked child. ``gpus``: the GPU ids Ray fixed for the bundles of the
        run's ranks on this node (``raycluster.runs``), the child's ``CUDA_VISIBLE_DEVICES``
        from its first instruction; None: a CPU rank, every GPU hidden."""
        env = {**env, "CUDA_VISIBLE_DEVICES": child_visible_devices(gpus)}
        args = (cfg, rank, world_size, local_rank, master_addr, master_port, gpus)
        return self.call(env, _run_rank, args, run_id=cfg.run_id)

    def progress(self, run_id: str) -> dict:
        """The latest progress report of the run's rank 0 on this node ({} when none)."""
        return self.reports.get(run_id, {})

    def pids(self, run_id: str) -> list[int]:
        with self.lock:
            return [p.pid for p in self.running.get(run_id, [])]

    def kill_run(self, run_id: str) -> list[int]:
        """SIGKILL the run's live processes and wait (``KILL_WAIT_S`` at most) until they are
        gone; returns the pids still there after the wait (none, normally). The driver removes
        the run's placement group, and Ray counts its GPUs free, only after this. Waits on each
        process's sentinel, not ``join``: the thread that forked it (``call``) joins it, and the
        fork server's exit status is read once."""
        with self.lock:
            procs = list(self.running.pop(run_id, []))
        for p in procs:
            if p.is_alive():
                p.kill()
        deadline = time.monotonic() + KILL_WAIT_S
        for p in procs:
            multiprocessing.connection.wait([p.sentinel], max(0.0, deadline - time.monotonic()))
        return [p.pid for p in procs if not multiprocessing.connection.wait([p.sentinel], 0)]

    def kill_all(self) -> list[int]:
        """End the processes of every run (:meth:`kill_run`), at a sweep's end, before this
        launcher is kept for the driver's next sweep; returns the pids still there."""
        with self.lock:
            run_ids = list(self.running)
        return [pid for run_id in run_ids for pid in self.kill_run(run_id)]

    def collect_files(self, run_id: str):
        """After the run: its processes on this node ended (:meth:`kill_run`, so no file is still
        being written), then its NCCL logs read and its files removed
        (``workloads.nccl_files.collect_run_files``), here, in this actor. A Ray task would do
        the same in a worker started for it: 0.5 s a run on the embedded cluster, 2 s on the
        emulated one (the nodes' idle workers are gone between runs)."""
        from workloads.nccl_files import collect_run_files

        self.kill_run(run_id)
        return collect_run_files(run_id)


def _death(proc) -> str:
    code = proc.exitcode
    if code is not None and code < 0:
        how = f"was killed by signal {signal.Signals(-code).name}"
    elif code is not None:
        how = f"exited with code {code}"
    else:
        how = "stopped answering"
    return f"rank process {proc.pid} {how} before returning its record (fork-server launcher)"
