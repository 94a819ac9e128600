"""The measurement loop: build model and data, warm up, time N optimizer steps, return records.

Runs on every rank inside an initialised torch.distributed process group. One timed step is one
optimizer step (grad_accum micro-steps + the update); on GPU the device is synchronised before
each clock read. Per-rank step times are returned as they are; reducing them to one figure
(max over ranks per step, median over steps) is the driver's job (orchestrator/analysis/stats.py).
A profiled step counts every collective (op, bytes, time); it is kept out of the timed steps
because timing a collective synchronises around it. When the run warms up for more steps than it
profiles, the profiled steps are the last warmup steps (never the first step, which carries
one-off work such as DDP's bucket rebuild and ZeRO-3's trace): they cost the run nothing extra.
Otherwise they run as a separate pass after the timed steps. Traced steps (``trace_steps``) run
after the timed ones and before any such pass, under ``torch.profiler`` with no counting hook
installed (the profiled pass synchronises around every collective, so a trace of it would show
no overlap); their own step times say what the profiler costs.

Before the traced steps each rank measures its clock's offset to rank 0's (``workloads/clocks.py``)
so the driver can lay every rank's trace on one clock.

One job: one rank's training run, from building its model to its records: the warmup, timed,
profiled and traced steps, and the faults a test plants in them.

May import: clocks, collectives, compiling, contract, data, device, model, phases, strategies,
telemetry, torch.
"""

from __future__ import annotations

import gzip
import math
import os
import resource
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from workloads import clocks, compiling
from workloads.collectives import AccumulationProbe
from workloads.contract import (
    DeviceDecision,
    RunConfig,
    StepRecord,
    TelemetryRecord,
    TraceRecord,
    TrainingRecord,
)
from workloads.data import batches, load_text, load_tokenizer, make_blocks
from workloads.device import choose_device, sync
from workloads.model import build_model, n_params
from workloads.phases import PhaseClock
from workloads.strategies import make_strategy

FAULT_ENV = "LINKSWEEP_INJECT_FAULT"
FAULT_FORMS = "RANK:STEP[:raise|hang|kill], RANK:STEP:delay:SECONDS or RANK:*:delay:SECONDS"
"""What ``LINKSWEEP_INJECT_FAULT`` accepts (an error names them)."""


@dataclass(frozen=True)
class Fault:
    """A fault planted on one rank through ``LINKSWEEP_INJECT_FAULT`` (a test hook, set through a
    link's env, so a sweep plants it on one link variant only)."""

    rank: int
    """The rank it fires on (the global rank)."""
    step: int | None
    """The optimizer step it fires at, counted over warmup, timed and traced steps (traced step k
    is step ``warmup_steps + steps + k``); None: every step (``delay`` only)."""
    kind: Literal["raise", "hang", "kill", "delay"]
    """``raise``: a RuntimeError; ``hang``: blocks forever (the driver's run timeout catches it);
    ``kill``: the process SIGKILLs itself (as the OOM killer would); ``delay``: the rank idles
    for ``delay_s`` before the step's first micro-step, so it arrives late at the step's first
    collective and its peers wait for it, as behind a slow data loader, a throttled CPU or a
    noisy neighbour."""
    delay_s: float = 0.0
    """``delay`` only: the wall time it idles per step, seconds."""


def parse_fault(value: str | None) -> Fault | None:
    """``LINKSWEEP_INJECT_FAULT``'s value (:data:`FAULT_FORMS`) -> :class:`Fault`; None when unset
    or empty. Raises ValueError naming the value and the allowed forms."""
    if not value:
        return None
    parts = value.split(":")
    kind = parts[2] if len(parts) > 2 else "raise"
    shape_ok = (len(parts) in (2, 3) and kind in ("raise", "hang", "kill")) or (
        len(parts) == 4 and kind == "delay"
    )
    try:
        if not shape_ok:
            raise ValueError("unknown form")
        rank = int(parts[0])
        step = None if parts[1] == "*" and kind == "delay" else int(parts[1])
        delay_s = float(parts[3]) if kind == "delay" else 0.0
        if rank < 0 or (step is not None and step < 0) or not 0 <= delay_s < math.inf:
            raise ValueError("negative or infinite")
        if kind == "delay" and delay_s == 0:
            raise ValueError("a zero delay")
    except ValueError:
        raise ValueError(
            f"{FAULT_ENV}={value!r}: expected {FAULT_FORMS} (RANK and STEP whole numbers >= 0, "
            "SECONDS a number > 0; * = every step, for delay only)"
        ) from None
    return Fault(rank, step, kind, delay_s)


def _maybe_fault(fault: Fault | None, rank: int, step: int) -> None:
    """Fire ``fault`` if it is this rank's and this step's; called once per optimizer step,
    before its first micro-step (timed and traced steps)."""
    if fault is None or fault.rank != rank or fault.step not in (None, step):
        return
    if fault.kind == "delay":
        # Idle, not busy: on real hardware a slow rank's node has its own cores, so its lateness
        # costs its peers only the wait. Here the emulated nodes share two cores, and a burning
        # rank took CPU from its peer (a 0.1 s burn grew DDP rank 0's wait by 0.05-0.07 s a
        # step, docs/measurements/2026-12-07-straggler-emulated.md). In a trace: a user
        # annotation, not a cpu_op, so the overlap rules (analysis/trace_overlap.py) count no
        # compute there.
        with torch.profiler.record_function("planted_delay"):
            time.sleep(fault.delay_s)
        return
    if fault.kind == "hang":
        threading.Event().wait()  # blocks forever: the driver's run timeout must catch it
    if fault.kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError(f"injected fault on rank {rank} at step {step} ({FAULT_ENV})")


def profiled_warmup_start(warmup_steps: int, profile_steps: int) -> int | None:
    """The first of the last ``profile_steps`` warmup steps, when there are more warmup steps
    than that (so the first step is never profiled); None: profile after the timed steps."""
    if profile_steps > 0 and warmup_steps > profile_steps:
        return warmup_steps - profile_steps
    return None


def rank_device(
    local_rank: int, node_gpu_ids: Sequence[str] | None = None
) -> tuple[str, torch.device]:
    """(backend, device) for a rank (:func:`decide_device`)."""
    decision = decide_device(local_rank, node_gpu_ids)
    return decision.backend, torch.device(decision.device)


def decide_device(local_rank: int, node_gpu_ids: Sequence[str] | None = None) -> DeviceDecision:
    """This rank's device (``workloads.device.choose_device`` over what torch sees now), made
    current; raises ``DeviceError``. Thread count = the rank's CPU share (OMP_NUM_THREADS, set by
    the launcher).

    ``node_gpu_ids``: Ray's GPU ids of the run's ranks on this node (``()``: none, a CPU rank);
    the caller set ``CUDA_VISIBLE_DEVICES`` from them before CUDA was touched. None: not started
    by Ray (torchrun, ``bench/standalone.py``): every CUDA device the process sees, by local rank.
    """
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    available = torch.cuda.is_available()
    count = torch.cuda.device_count() if available else 0
    if node_gpu_ids is None:
        node_gpu_ids = [str(i) for i in range(count)]
    decision = choose_device(
        node_gpu_ids, local_rank, available, count, torch.__version__, torch.version.cuda
    )
    if decision.backend == "nccl":
        torch.cuda.set_device(torch.device(decision.device))
    return decision


def reset_peak_mem(device: torch.device) -> None:
    """Start the peak over again, at the first timed step, for every strategy alike. Why:
    DeepSpeed ZeRO-1/2 reset the CUDA peak in their start-up (``stage_1_and_2.py`` calls
    ``runtime/utils.empty_cache``, which resets the peak statistics) while DDP and FSDP2 kept
    theirs, so the peaks were not comparable; and a peak read at the end included the traced
    steps and a profiled pass after the timed ones. CUDA: ``reset_peak_memory_stats``. CPU
    (Linux): writing ``5`` to ``/proc/self/clear_refs`` resets the peak RSS (``VmHWM``) to the
    current RSS (proc(5)); where that file cannot be written the peak stays the process's."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_mem_bytes(device: torch.device) -> int:
    """GPU allocator peak on GPU; the process's peak RSS on CPU (``VmHWM`` in
    ``/proc/self/status``, what ``clear_refs`` resets; ``getrusage``'s lifetime peak where
    there is no such file). Read at the last timed step (:func:`reset_peak_mem`)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


class Telemetry:
    """NVML sampling of this rank's GPU over the timed steps; absent (with the reason) otherwise.

    Never fails the run: NVML trouble at any point (no permission, an id NVML does not know, a
    driver without a call) becomes ``absent: <reason>`` or a note in the status, and training
    goes on. ``nvml``: an injected NVML module (tests); default ``pynvml``.
    """

    def __init__(self, device: torch.device, nvml_index: int | str | None, nvml=None):
        self.sampler = None
        self.status = "absent: CPU run (no GPU to sample)"
        if device.type != "cuda":
            return
        from workloads.telemetry import NvmlSampler, nvml_available

        ok, why = nvml_available(nvml)
        if not ok:
            self.status = f"absent: {why}"
            return
        target = nvml_index if nvml_index is not None else device.index
        self.sampler = NvmlSampler(target if target is not None else 0, nvml=nvml)
        self.status = "nvml"

    def start(self) -> None:
        if self.sampler is None:
            return
        try:
            self.sampler.start()
        except Exception as exc:  # noqa: BLE001 - telemetry is advice; the run's steps matter
            self.status = f"absent: telemetry start failed: {type(exc).__name__}: {exc}"
            self.sampler = None

    def stop(self) -> TelemetryRecord:
        from workloads.telemetry import REASONS_UNAVAILABLE

        if self.sampler is None:
            return TelemetryRecord(status=self.status)
        try:
            res = self.sampler.stop()
        except Exception as exc:  # noqa: BLE001
            return TelemetryRecord(status=f"absent: telemetry stop failed: {exc!r}")
        if res.absent:
            return TelemetryRecord(status=f"absent: {res.absent}")
        notes = [f"stopped early: {res.error}"] if res.error else []
        if not res.reasons_available:
            notes.append(REASONS_UNAVAILABLE)
        if res.note:
            notes.append(res.note)
        status = f"nvml ({'; '.join(notes)})" if notes else "nvml"
        return TelemetryRecord(status, tuple(res.samples), dict(res.violation_ns))


def run_training(
    cfg: RunConfig,
    rank: int,
    world_size: int,
    device: torch.device,
    on_step: Callable[[int, int, bool], None] | None = None,
    nvml_index: int | str | None = None,
) -> TrainingRecord:
    """Train ``cfg.warmup_steps + cfg.steps`` optimizer steps; return this rank's records.
    ``nvml_index``: the GPU telemetry samples (``workloads.device.nvml_target``: an NVML index,
    or a UUID / MIG id string); None: the CUDA device's index."""
    fault = parse_fault(os.environ.get(FAULT_ENV))
    clock = PhaseClock()
    with clock.phase("model_data_build"):
        text, tokenizer_name, data, model, params = _model_and_data(cfg, rank, world_size)
    autocast_dtype = torch.bfloat16 if cfg.precision == "bf16" else None
    with clock.phase("strategy_init"):
        strategy = _probed_strategy(model, device, cfg, autocast_dtype)
    compiled = _compile_phase(strategy, data, device, cfg, clock)

    total = cfg.warmup_steps + cfg.steps
    profile_steps = cfg.profile_steps if world_size > 1 else 0
    profile_from = profiled_warmup_start(cfg.warmup_steps, profile_steps)
    comms, profiled_s = (), 0.0
    steps: list[StepRecord] = []
    first_step_wall = None
    telemetry = Telemetry(device, nvml_index)
    loop_start = time.perf_counter()
    timed_start = loop_start if cfg.warmup_steps == 0 else None
    for step in range(total):
        warmup = step < cfg.warmup_steps
        if step == profile_from:
            sync(device)
            profile_t0 = time.perf_counter()
            compiled.mark("profiled")
            strategy.profile_start()
        if step == cfg.warmup_steps:
            if profile_from is not None:
                sync(device)
                comms = strategy.profile_stop()  # totals over profile_steps; the driver divides
                compiled.done("profiled", profile_steps)
                profiled_s = time.perf_counter() - profile_t0
                clock.add("profiled_pass", profiled_s)
            compiled.mark("timed")
            reset_peak_mem(device)  # the peak is the timed steps' (read after the last one)
            timed_start = time.perf_counter()
            clock.add("warmup", timed_start - loop_start - profiled_s)
            telemetry.start()  # sample the timed window only
        batch_list = [next(data).to(device) for _ in range(cfg.grad_accum)]  # outside the clock
        sync(device)
        first_step_wall = first_step_wall or time.time()  # when the first step began
        steps.append(_timed_step(strategy, batch_list, device, cfg, fault, rank, step, warmup))
        if on_step is not None:
            on_step(step + 1, total, warmup)

    if timed_start is not None:
        clock.add("timed_steps", time.perf_counter() - timed_start)
        compiled.done("timed", cfg.steps)
    mem = peak_mem_bytes(device)  # before the traced steps and any profiled pass
    telemetry_out = telemetry.stop()
    after, plant = (profile_steps if profile_from is None else 0), (fault, rank)  # _after_timed
    trace, comms = _after_timed(strategy, data, device, cfg, clock, compiled, after, comms, plant)
    own = _strategy_facts(strategy, rank, compiled)  # before teardown removes the swap folder
    with clock.phase("rank_teardown"):
        strategy.teardown()
    return TrainingRecord(
        steps=tuple(steps),
        n_params=params,
        data_source=text.description,
        tokenizer=tokenizer_name,
        first_step_wall_s=first_step_wall,
        peak_mem_bytes=mem,
        comms=tuple(comms),
        profile_steps=profile_steps if comms else 0,
        telemetry=telemetry_out,
        **_device_facts(device),
        phases=clock.records(),
        trace=trace,
        **own,
    )


def _strategy_facts(strategy, rank: int, compiled: _CompileWatch) -> dict:
    """What the strategy reports about its run, for the record: DeepSpeed's parsed config
    (rank 0), the NVMe swap files (counted while the folder is there), the accumulation
    check's bytes and the last profiled step's collectives, the optimizer, the compiled
    graphs."""
    return {
        "ds_config": strategy.effective_config() if rank == 0 else None,
        "nvme_swap_files": strategy.swap_files(),
        "non_final_bytes": strategy.non_final_bytes,
        "step_collectives": strategy.step_collectives,
        "optimizer_impl": getattr(strategy, "optimizer_impl", None),
        **compiled.facts(),
    }


def _compile_phase(strategy, data, device: torch.device, cfg: RunConfig, clock) -> _CompileWatch:
    """A compiled run's untimed step of its own, the ``compile`` phase: compilation is lazy,
    so the graphs are built here, before warmup (nothing for an eager run)."""
    compiled = _CompileWatch(getattr(strategy, "compile_stats", None))
    if compiled.stats is not None:
        with clock.phase("compile"):
            compiled.compile_step(lambda: _untimed_steps(strategy, data, device, cfg.grad_accum, 1))
    return compiled


def _after_timed(strategy, data, device, cfg, clock, compiled, profile_steps: int, comms, plant):
    """(trace, comms): the traced steps, then a profiled pass of ``profile_steps`` steps when
    the warmup held none (after the traced steps: never inside them); else ``comms`` as is.
    ``plant``: (the planted fault, this rank): it fires in the traced steps as in timed ones."""
    trace = _traced_steps(strategy, data, device, cfg, clock, plant) if cfg.trace_steps else None
    if profile_steps:
        with clock.phase("profiled_pass"):
            compiled.mark("profiled")
            comms = _profiled_pass(strategy, data, device, cfg.grad_accum, profile_steps)
            compiled.done("profiled", profile_steps)
    return trace, comms


class _CompileWatch:
    """What a compiled run's graphs did (``workloads/compiling.py``): the compile step's
    inductor cache state, then per window (the profiled steps, the timed steps) the graphs
    compiled in it (recompiles) and the compiled-graph calls per step. Inert for an eager run."""

    def __init__(self, stats: compiling.CompileStats | None) -> None:
        self.stats = stats
        self.cache: str | None = None
        self._marks: dict[str, tuple[int, int]] = {}
        self.windows: dict[str, tuple[int, float]] = {}

    def compile_step(self, run: Callable[[], None]) -> None:
        before = compiling.inductor_cache_counts()
        run()
        self.cache = compiling.cache_state(
            self.stats.backend, before, compiling.inductor_cache_counts()
        )

    def mark(self, window: str) -> None:
        if self.stats is not None:
            self._marks[window] = self.stats.snapshot()

    def done(self, window: str, steps: int) -> None:
        if self.stats is None or window not in self._marks:
            return
        graphs, calls = self._marks.pop(window)
        self.windows[window] = (
            self.stats.graphs - graphs,
            (self.stats.calls - calls) / steps if steps else 0.0,
        )

    def facts(self) -> dict:
        if self.stats is None:
            return {}
        timed = self.windows.get("timed")
        profiled = self.windows.get("profiled")
        return {
            "compile_backend": self.stats.backend,
            "compile_cache": self.cache,
            "recompiles_timed": timed[0] if timed else None,
            "recompiles_profiled": profiled[0] if profiled else None,
            "graph_calls_timed_step": timed[1] if timed else None,
            "graph_calls_profiled_step": profiled[1] if profiled else None,
        }


def _device_facts(device: torch.device) -> dict:
    """The record's ``device_name`` and ``tf32`` (CUDA only)."""
    cuda = device.type == "cuda"
    return {
        "device_name": torch.cuda.get_device_name(device) if cuda else None,
        "tf32": cuda and bool(torch.backends.cuda.matmul.allow_tf32),
    }


def _probed_strategy(model, device: torch.device, cfg: RunConfig, autocast_dtype):
    """The run's strategy, its profiled steps also recorded for the accumulation check."""
    return AccumulationProbe(make_strategy(model, device, cfg, autocast_dtype), cfg.grad_accum)


def _model_and_data(cfg: RunConfig, rank: int, world_size: int) -> tuple:
    """(text, tokenizer name, this rank's batch iterator, model, its parameter count)."""
    text = load_text(cfg.dataset)
    tokenizer, tokenizer_name = load_tokenizer()
    blocks = make_blocks(text.lines, tokenizer, cfg.seq_len)
    data = batches(blocks, cfg.micro_batch_size, rank, world_size, cfg.seed)
    model = build_model(cfg.model, cfg.seed)
    return text, tokenizer_name, data, model, n_params(model)


def _timed_step(
    strategy,
    batch_list: list[torch.Tensor],
    device: torch.device,
    cfg: RunConfig,
    fault: Fault | None,
    rank: int,
    step: int,
    warmup: bool,
) -> StepRecord:
    """One optimizer step (``grad_accum`` micro-steps and the update) on batches already on the
    device, timed from a synchronised device to a synchronised device."""
    ga = cfg.grad_accum
    t0 = time.perf_counter()
    losses = []
    _maybe_fault(fault, rank, step)
    for micro in range(ga):
        losses.append(strategy.micro_step(batch_list[micro], boundary=micro == ga - 1))
    strategy.optimizer_step()
    sync(device)
    step_time_s = time.perf_counter() - t0
    loss = torch.stack(losses).float().mean().item()
    samples = cfg.micro_batch_size * ga
    return StepRecord(
        step=step,
        warmup=warmup,
        step_time_s=step_time_s,
        samples=samples,
        tokens=samples * cfg.seq_len,
        loss=loss,
    )


def _untimed_steps(strategy, data, device: torch.device, ga: int, steps: int) -> None:
    """``steps`` optimizer steps, untimed and unrecorded (the compile step), device synced."""
    for _ in range(steps):
        for micro in range(ga):
            strategy.micro_step(next(data).to(device), boundary=micro == ga - 1)
        strategy.optimizer_step()
    sync(device)


def _profiled_pass(strategy, data, device: torch.device, ga: int, profile_steps: int) -> tuple:
    """``profile_steps`` untimed optimizer steps with the strategy's collectives counted: totals
    over them (the driver divides)."""
    strategy.profile_start()
    for _ in range(profile_steps):
        for micro in range(ga):
            strategy.micro_step(next(data).to(device), boundary=micro == ga - 1)
        strategy.optimizer_step()
    sync(device)
    return strategy.profile_stop()


def _traced_steps(
    strategy, data, device: torch.device, cfg: RunConfig, clock, plant=(None, 0)
) -> TraceRecord:
    """``cfg.trace_steps`` optimizer steps under ``torch.profiler`` (CPU, and CUDA where the
    rank has a GPU), each timed as a timed step and marked as a ``ProfilerStep#k`` span (the name
    ``prof.step()`` gives under a schedule); the trace exported as Chrome JSON and
    gzip-compressed. First, over the run's process group, this rank's clock offset to rank 0's
    (:func:`clock_offset`). ``plant``: (the run's planted fault, this rank), fired in each traced
    step as in a timed one, numbered after the timed steps. The whole is the run's
    ``traced_steps`` phase."""
    with clock.phase("traced_steps"):
        return _trace(strategy, data, device, cfg, clock_offset(device), plant)


def clock_offset(device: torch.device) -> clocks.ClockOffset | None:
    """This rank's clock offset to rank 0's (``workloads/clocks.py``), measured over the default
    process group; None where there is none or it has one rank. Collective: every rank calls it
    at the same point (before the traced steps, which every rank runs)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    return clocks.measure_offset(
        dist.get_rank(), dist.get_world_size(), clocks.group_broadcast(device)
    )


def _trace(
    strategy,
    data,
    device: torch.device,
    cfg: RunConfig,
    offset: clocks.ClockOffset | None = None,
    plant: tuple[Fault | None, int] = (None, 0),
) -> TraceRecord:
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    ga, times = cfg.grad_accum, []
    with profile(activities=activities) as prof:
        for k in range(cfg.trace_steps):
            batch_list = [next(data).to(device) for _ in range(ga)]
            sync(device)
            t0 = time.perf_counter()
            with record_function(f"ProfilerStep#{k}"):  # prof.step() marks none without a schedule
                _maybe_fault(plant[0], plant[1], cfg.warmup_steps + cfg.steps + k)
                for micro in range(ga):
                    strategy.micro_step(batch_list[micro], boundary=micro == ga - 1)
                strategy.optimizer_step()
                sync(device)
            times.append(time.perf_counter() - t0)
    return TraceRecord(
        tuple(times),
        _exported(prof),
        clock_offset_ns=offset.offset_ns if offset else None,
        clock_uncertainty_ns=offset.uncertainty_ns if offset else None,
    )


def _exported(prof) -> bytes:
    """The profiler's Chrome trace, gzip-compressed."""
    with tempfile.TemporaryDirectory(prefix="linksweep-trace-") as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path, "rb") as f:
            return gzip.compress(f.read())
