"""How much of a rank's communication its compute hid, measured from a profiler trace. Pure.

Reads one rank's torch profiler (Kineto / Chrome JSON) trace and gives, per GPU device or per
CPU process, and per profiled step where the trace marks steps: the time communication was busy,
the time compute was busy, the time both were (overlapped), and the communication not covered by
compute (exposed). Every figure is the length of a union of half-open intervals [ts, ts+dur) in
the trace's microseconds, never a sum of durations: two collectives on two streams at once are
busy once, as Holistic Trace Analysis (HTA) and NVIDIA's Nsight recipes count them.

One job: the overlap rules below (which events are communication, which compute, where a step's
window lies) and the interval arithmetic they need, read and changed together.

**GPU rule** (a trace with ``cat == "kernel"`` events), per device, the Kineto ``pid`` of the
kernels: only complete kernel events (``ph == "X"``, ``cat == "kernel"``, ``dur > 0``) count.
Communication is a kernel whose name matches ``^nccl`` in any case (NCCL names every kernel it
launches so). Compute is every other kernel whose name contains none of ``Memcpy``, ``Memset``,
``Sync`` (case-sensitive): copies, fills and synchronisation kernels move or wait, they do not
compute, and counting them inflates the overlap (HTA's PR #162 fixed that); case-sensitive,
because ``recat_copy_async_kernel`` computes. Never counted: ``gpu_memcpy``/``gpu_memset``
events (copies, for the same reason), ``gpu_user_annotation`` spans (they mark a range of the
stream, e.g. ``nccl:all_reduce`` around the kernels, not the kernels' busy time: counting them
would count idle time), and every CPU-side event.

**CPU rule** (no kernels: gloo on CPU, as torch 2.13's profiler records it), per process (``pid``):
communication is the union of events named ``gloo:*`` on any thread, because gloo runs each
collective on its own worker threads and the profiler records it there with its duration.
Compute is the union of the main thread's ops (``cpu_op`` events; not ``user_annotation`` spans:
``ProfilerStep#N`` marks a step and would make the whole step compute, and frameworks' own
annotations wrap their collectives and the waits for them: in a traced FSDP2 step on gloo
(gpt2-tiny, 2 ranks, grad_accum 8, 500mbit) ``FSDP::all_gather`` and
``FSDP::post_backward_reduce`` covered 3.0 s of a 5.3 s step while gloo ran 3.65 s, and counting
them made its exposed communication read ~0; the ops inside them still count) minus every
interval of the main thread spent in a collective call or a wait: events named ``c10d::*``,
``_c10d_functional::*`` (DTensor's and torch.compile's collectives), ``gloo:*`` or
``record_param_comms``, or with ``wait`` in their name (any case). A nested call is
subtracted too: DDP's backward hook calls ``c10d::allreduce_`` inside an autograd op, and that
time is handing work to gloo, not computing. Only the main thread computes here because the
training loop and, on CPU, autograd's backward run on the thread that calls them. The union of the
top-level ops (those no other main-thread event contains) is the union of all of them; top-level
matters for the count only. A wait the profiler does not record as its own event stays inside
its parent op and counts as compute: the trace cannot tell it apart. The main thread is the thread
holding the ``ProfilerStep#N`` spans; without them, the thread (of those with ops other than
``gloo:*``) with the most busy time.

**Steps**: where the trace has ``ProfilerStep#N`` spans, each step gets the same figures with
every interval clipped to the step's window. On CPU the window is the step's span on the main
thread. On GPU the step has no span on the GPU's clock that can be trusted, so its window is
built from the launches: each counted kernel belongs to the step whose CPU span holds its launch
(the ``cuda_runtime``/``cuda_driver`` event with the kernel's ``args.correlation``, on any thread:
autograd's backward launches from its own), and step N's GPU window runs from the first start of
its kernels to the first start of step N+1's (the last step's to the last end of its kernels):
kernels run after their launch, often in the next step's CPU time. The windows cut the device's
timeline into consecutive pieces, so the steps' figures add up and overlap between one step's
communication and the next step's compute is counted where it happens on the GPU; a kernel in
flight at a boundary is split between the two. A kernel without a launch event (a trace may lack
some) is still clipped into the windows; a step with no kernels of this device gets no figures.

``gpu_user_annotation`` ``ProfilerStep#N`` spans are never windows. Kineto draws a GPU span for
a user annotation from the GPU activities whose launch had that annotation as its *innermost*
user annotation on the *launching thread* (torch's ``ThreadLocalSubqueue::begin_op`` pushes a
user-scope correlation id per thread; Kineto's ``GenericActivityProfiler::handleGpuActivity``
extends one span per stream with each such activity), so a step's GPU span holds only what the
main thread launched outside every nested annotation: under DDP the forward runs inside
``DistributedDataParallel.forward``, the optimizer inside ``Optimizer.step#AdamW.step``, and
backward (with DDP's NCCL all-reduces) on autograd's thread, so the span covers the loss's
few kernels and no communication. The corpus's trace 04 shows it: the GPU spans Kineto wrote are
exactly the ones that rule gives, 1,761 of its kernels (all of backward) have none, and its
``ProfilerStep#N`` have none at all (``tests/unit/test_trace_overlap.py``).

**Not given here: time waited for peers.** One rank's trace shows how long a collective took,
and that includes waiting for the slowest rank to arrive as well as moving the bytes; telling
them apart needs every rank's trace on one clock (the last arrival marks where the transfer
could start): :mod:`orchestrator.analysis.trace_wait` splits this module's exposed time so.

Numbers: ``load_trace`` parses decimals as ``Decimal`` so the arithmetic is exact on the file's
values: a float cannot hold 4458676422880.181 exactly, and over a real trace's 2,700 kernels the
rounding moved compute by 0.004 us (115655.843 instead of 115655.847). A trace dict parsed with
floats works the same, with float rounding. Figures come out as float.

May import: nothing.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Literal, NamedTuple

COMM_KERNEL = re.compile(r"^nccl", re.IGNORECASE)
"""NCCL names every kernel it launches ``ncclKernel_*`` / ``ncclDevKernel_*``."""
NOT_COMPUTE_KERNEL = ("Memcpy", "Memset", "Sync")
"""Substrings (case-sensitive) of kernels that copy, fill or wait: neither compute nor comm."""
STEP = re.compile(r"^ProfilerStep#(\d+)$")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
CPU_OP_CATEGORIES = ("cpu_op",)
"""Main-thread events that are ops; ``python_function`` frames (with_stack) would cover the
whole step, ``Trace`` spans the whole profile."""
CPU_COMM = re.compile(r"^gloo:")
CPU_NOT_COMPUTE = re.compile(
    r"^c10d::|^_c10d_functional::|^gloo:|^record_param_comms$|wait", re.IGNORECASE
)
"""Collective calls (``c10d::*``; ``_c10d_functional::*`` from DTensor and torch.compile),
gloo's own events, the collective's bookkeeping op, and waits: not compute."""


class Interval(NamedTuple):
    start: float | Decimal | int
    end: float | Decimal | int


class _Event(NamedTuple):
    start: float | Decimal | int
    end: float | Decimal | int
    lane: object  # the stream (GPU) or thread (CPU): the event's Kineto tid
    name: str


@dataclass(frozen=True)
class Figures:
    """One device's or process's overlap over one window, in microseconds."""

    window_us: tuple[float, float] | None
    """[start, end) of the whole trace's counted events, or of the step."""
    comm_us: float
    """Length of the union of communication intervals."""
    compute_us: float
    """Length of the union of compute intervals."""
    overlapped_us: float
    """Length of (communication union) intersected with (compute union)."""
    exposed_us: float
    """comm_us - overlapped_us: communication no compute ran beside."""
    exposed_share: float | None
    """exposed_us / comm_us; None without communication."""
    n_comm: int
    """Communication events (kernels) with time inside the window."""
    n_compute: int
    """Compute events (kernels, or the main thread's top-level ops) with time inside the window."""
    comm_lanes: tuple
    """The streams (GPU) or threads (CPU) the communication ran on."""
    compute_lanes: tuple


@dataclass(frozen=True)
class StepFigures:
    step: int
    """N of ``ProfilerStep#N``."""
    figures: Figures


@dataclass(frozen=True)
class TraceOverlap:
    """One device (GPU rule) or one process (CPU rule) of a trace."""

    rule: Literal["gpu", "cpu"]
    pid: object
    """The Kineto pid: the GPU device's, or the CPU process's."""
    whole: Figures
    steps: tuple[StepFigures, ...]
    steps_from: Literal["cpu_launch", "cpu_span"] | None
    """Where the step windows came from (see the module's docstring); None: no steps."""


def load_trace(path: str | Path) -> dict:
    """A ``.json`` or ``.json.gz`` trace, its decimals as ``Decimal`` (exact arithmetic)."""
    p = Path(path)
    opener = gzip.open if p.name.endswith(".gz") else open
    with opener(p, "rt", encoding="utf-8") as f:
        return json.load(f, parse_float=Decimal)


# ---- interval arithmetic on half-open intervals ----------------------------------------------


def union(intervals) -> list[Interval]:
    """Sorted, disjoint intervals covering exactly ``intervals``; overlapping or touching ones
    merge ([0, 2) and [2, 3) are [0, 3)); empty ones (end <= start) drop."""
    merged: list[Interval] = []
    for start, end in sorted((s, e) for s, e in intervals if e > s):
        if merged and start <= merged[-1].end:
            if end > merged[-1].end:
                merged[-1] = Interval(merged[-1].start, end)
        else:
            merged.append(Interval(start, end))
    return merged


def length(merged: list[Interval]):
    """Total length of disjoint intervals (a ``union``'s output)."""
    return sum((i.end - i.start for i in merged), 0)


def intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """The intersection of two unions, itself a union."""
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i].start, b[j].start), min(a[i].end, b[j].end)
        if end > start:
            out.append(Interval(start, end))
        if a[i].end <= b[j].end:
            i += 1
        else:
            j += 1
    return out


def subtract(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """What of union ``a`` lies outside union ``b``."""
    out: list[Interval] = []
    j = 0
    for start, end in a:
        while j < len(b) and b[j].end <= start:
            j += 1
        k, cursor = j, start
        while k < len(b) and b[k].start < end:
            if b[k].start > cursor:
                out.append(Interval(cursor, b[k].start))
            cursor = max(cursor, b[k].end)
            k += 1
        if cursor < end:
            out.append(Interval(cursor, end))
    return out


def clip(merged: list[Interval], window: Interval) -> list[Interval]:
    return intersect(merged, [window]) if window.end > window.start else []


# ---- figures ----------------------------------------------------------------------------------


def _lanes(events: list[_Event]) -> tuple:
    return tuple(sorted({e.lane for e in events}, key=lambda t: (isinstance(t, str), t)))


def _inside(events: list[_Event], window: Interval | None) -> list[_Event]:
    if window is None:
        return events
    return [e for e in events if min(e.end, window.end) > max(e.start, window.start)]


def _figures(
    comm: list[_Event],
    compute: list[_Event],
    not_compute: list[Interval] = (),
    window: Interval | None = None,
) -> Figures:
    """The figures of ``comm`` and ``compute`` events (compute less ``not_compute``), clipped
    to ``window``; without one, the window is the events' own extent."""
    window, comm_u, compute_u = _unions(comm, compute, not_compute, window)
    comm_us = length(comm_u)
    overlapped_us = length(intersect(comm_u, compute_u))
    exposed_us = comm_us - overlapped_us
    comm_in, compute_in = _inside(comm, window), _inside(compute, window)
    return Figures(
        window_us=None if window is None else (float(window.start), float(window.end)),
        comm_us=float(comm_us),
        compute_us=float(length(compute_u)),
        overlapped_us=float(overlapped_us),
        exposed_us=float(exposed_us),
        exposed_share=float(exposed_us / comm_us) if comm_us else None,
        n_comm=len(comm_in),
        n_compute=len(compute_in),
        comm_lanes=_lanes(comm_in),
        compute_lanes=_lanes(compute_in),
    )


def _unions(comm, compute, not_compute=(), window: Interval | None = None) -> tuple:
    """(window, communication union, compute union less ``not_compute``), clipped to the window;
    without one, the window is the events' own extent."""
    comm_u = union((e.start, e.end) for e in comm)
    compute_u = subtract(union((e.start, e.end) for e in compute), union(not_compute))
    if window is None and (comm or compute):
        window = Interval(min(e.start for e in comm + compute), max(e.end for e in comm + compute))
    if window is not None:
        comm_u, compute_u = clip(comm_u, window), clip(compute_u, window)
    return window, comm_u, compute_u


@dataclass(frozen=True)
class Parts:
    """One device's (GPU rule) or process's (CPU rule) pieces, as the figures count them."""

    rule: Literal["gpu", "cpu"]
    pid: object
    comm: list[_Event]
    """The communication events: NCCL kernels (GPU), ``gloo:*`` events (CPU)."""
    comm_raw: list[dict]
    """The same events as the trace holds them (their ``args``), in the same order."""
    compute: list[Interval]
    """The compute union (CPU: less the main thread's collective calls and waits)."""
    windows: dict[int, Interval]
    """Step number -> its window (module docstring); empty where the trace marks no steps."""
    issue_events: list[dict]
    """The raw events the communication was issued from: every event of the process (CPU: its
    main thread's ``c10d::*`` calls live there) or of the trace (GPU: the launches and the
    CPU calls around them), for :mod:`orchestrator.analysis.trace_collectives`."""


def parts(trace: dict) -> list[Parts]:
    """Each device's (GPU rule, where the trace has kernels) or process's (CPU rule) parts, in
    pid order: the same selection and step windows as :func:`trace_overlap`."""
    events = _complete(trace.get("traceEvents", []))
    if any(e.get("cat") == "kernel" for e in events):
        return [_gpu_parts(events, pid) for pid in _kernel_pids(events)]
    events = [e for e in events if e.get("cat") != "Trace"]
    out = []
    for pid in sorted({e.get("pid") for e in events}, key=lambda p: (isinstance(p, str), p)):
        mine = [e for e in events if e.get("pid") == pid]
        main = main_thread(mine)
        if main is None:
            continue
        comm, compute, not_compute, windows = _cpu_parts(mine, main)
        compute_u = subtract(union((e.start, e.end) for e in compute), union(not_compute))
        raw = [e for e in mine if CPU_COMM.match(str(e.get("name", "")))]
        out.append(Parts("cpu", pid, comm, raw, compute_u, windows, mine))
    return out


def _kernel_pids(events: list[dict]) -> list:
    pids = {e.get("pid") for e in events if e.get("cat") == "kernel"}
    return sorted(pids, key=lambda p: (isinstance(p, str), p))


def _gpu_parts(events: list[dict], pid) -> Parts:
    kernels = [e for e in events if e.get("cat") == "kernel" and e.get("pid") == pid]
    comm = [e for e in kernels if is_comm_kernel(str(e.get("name", "")))]
    compute = [e for e in kernels if is_compute_kernel(str(e.get("name", "")))]
    windows = dict(_gpu_step_windows(events, comm + compute)[0])
    compute_u = union((e["ts"], e["ts"] + e["dur"]) for e in compute)
    return Parts("gpu", pid, [_event(e) for e in comm], comm, compute_u, windows, events)


def step_intervals(trace: dict, step: int) -> tuple[Interval, list, list] | None:
    """For a timeline: traced step ``step``'s window and, inside it, the communication and the
    compute unions (trace microseconds, as floats) of the trace's first device (GPU rule) or
    process (CPU rule), as the figures count them; None where that step is not marked."""
    found = parts(trace)
    if not found or step not in found[0].windows:
        return None
    first, window = found[0], found[0].windows[step]
    comm_u = clip(union((e.start, e.end) for e in first.comm), window)
    compute_u = clip(first.compute, window)
    return _float(window), [_float(i) for i in comm_u], [_float(i) for i in compute_u]


def _float(i: Interval) -> Interval:
    """An interval in floats, as the figures are returned: a drawing needs no exact Decimal."""
    return Interval(float(i.start), float(i.end))


def _complete(events) -> list[dict]:
    """Complete events (``ph == "X"``) with a positive duration."""
    return [e for e in events if e.get("ph") == "X" and (e.get("dur") or 0) > 0]


def _event(e: dict) -> _Event:
    return _Event(e["ts"], e["ts"] + e["dur"], e.get("tid"), str(e.get("name", "")))


def _step_number(e: dict) -> int | None:
    m = STEP.match(str(e.get("name", "")))
    return int(m.group(1)) if m else None


# ---- GPU rule ---------------------------------------------------------------------------------


def is_comm_kernel(name: str) -> bool:
    return COMM_KERNEL.match(name) is not None


def is_compute_kernel(name: str) -> bool:
    return not is_comm_kernel(name) and not any(s in name for s in NOT_COMPUTE_KERNEL)


def gpu_overlap(trace: dict) -> list[TraceOverlap]:
    """The GPU rule, one entry per device (kernel ``pid``), in pid order."""
    events = _complete(trace.get("traceEvents", []))
    kernels: dict[object, list[dict]] = {}
    for e in events:
        if e.get("cat") == "kernel":
            kernels.setdefault(e.get("pid"), []).append(e)
    out = []
    for pid in sorted(kernels, key=lambda p: (isinstance(p, str), p)):
        comm = [e for e in kernels[pid] if is_comm_kernel(str(e.get("name", "")))]
        compute = [e for e in kernels[pid] if is_compute_kernel(str(e.get("name", "")))]
        comm_ev, compute_ev = [_event(e) for e in comm], [_event(e) for e in compute]
        windows, source = _gpu_step_windows(events, comm + compute)
        steps = tuple(StepFigures(n, _figures(comm_ev, compute_ev, window=w)) for n, w in windows)
        out.append(TraceOverlap("gpu", pid, _figures(comm_ev, compute_ev), steps, source))
    return out


def _gpu_step_windows(events: list[dict], counted: list[dict]):
    """(step, window) pairs for one device and where they came from: the CPU step spans and the
    launches of the device's counted kernels (module docstring: never the GPU-side spans)."""
    cpu_steps = sorted(
        (e["ts"], e["ts"] + e["dur"], n)
        for e in events
        if e.get("cat") != "gpu_user_annotation" and (n := _step_number(e)) is not None
    )
    if not cpu_steps:
        return [], None
    launch_ts = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") in LAUNCH_CATEGORIES and "correlation" in e.get("args", {})
    }
    first_start: dict[int, object] = {}
    last_end: dict[int, object] = {}
    for k in counted:
        launched = launch_ts.get(k.get("args", {}).get("correlation"))
        step = _step_holding(cpu_steps, launched) if launched is not None else None
        if step is not None:
            end = k["ts"] + k["dur"]
            first_start[step] = min(first_start.get(step, k["ts"]), k["ts"])
            last_end[step] = max(last_end.get(step, end), end)
    return _consecutive(first_start, last_end, [n for _, _, n in cpu_steps]), "cpu_launch"


def _step_holding(cpu_steps: list[tuple], t) -> int | None:
    for start, end, n in cpu_steps:
        if start <= t < end:
            return n
    return None


def _consecutive(first_start: dict, last_end: dict, order: list[int]) -> list:
    """Step N's window: its first kernel's start to the next step's; the last step's to its last
    kernel's end. A start earlier than the step before's is raised to it (never a window running
    backwards), so the windows never overlap."""
    steps = [n for n in order if n in first_start]
    starts = []
    for n in steps:
        starts.append(max(first_start[n], starts[-1]) if starts else first_start[n])
    ends = starts[1:] + [max(last_end[steps[-1]], starts[-1])] if steps else []
    return [(n, Interval(s, e)) for n, s, e in zip(steps, starts, ends, strict=True)]


# ---- CPU rule ---------------------------------------------------------------------------------


def cpu_overlap(trace: dict) -> list[TraceOverlap]:
    """The CPU rule, one entry per process with ops on a main thread, in pid order."""
    events = [e for e in _complete(trace.get("traceEvents", [])) if e.get("cat") != "Trace"]
    by_pid: dict[object, list[dict]] = {}
    for e in events:
        by_pid.setdefault(e.get("pid"), []).append(e)
    out = []
    for pid in sorted(by_pid, key=lambda p: (isinstance(p, str), p)):
        main = main_thread(by_pid[pid])
        if main is None:
            continue
        out.append(_cpu_process(pid, by_pid[pid], main))
    return out


def main_thread(events: list[dict]):
    """The tid holding ``ProfilerStep#N`` spans; else the one whose ops (gloo's aside) cover
    the most time; None where no thread has ops."""
    steps = [e.get("tid") for e in events if _step_number(e) is not None]
    if steps:
        return max(set(steps), key=steps.count)
    by_tid: dict[object, list] = {}
    for e in events:
        if e.get("cat") in CPU_OP_CATEGORIES and not CPU_COMM.match(str(e.get("name", ""))):
            by_tid.setdefault(e.get("tid"), []).append((e["ts"], e["ts"] + e["dur"]))
    if not by_tid:
        return None
    return max(by_tid, key=lambda t: length(union(by_tid[t])))


def _cpu_parts(events: list[dict], main) -> tuple:
    """(communication, compute, not-compute intervals, {step: window}) of one process."""
    comm = [_event(e) for e in events if CPU_COMM.match(str(e.get("name", "")))]
    ops = [
        _event(e)
        for e in events
        if e.get("tid") == main and e.get("cat") in CPU_OP_CATEGORIES and _step_number(e) is None
    ]
    not_compute = [(e.start, e.end) for e in ops if CPU_NOT_COMPUTE.search(e.name)]
    compute = [e for e in top_level(ops) if not CPU_NOT_COMPUTE.search(e.name)]
    step_spans = dict(
        sorted(
            (n, Interval(e["ts"], e["ts"] + e["dur"]))
            for e in events
            if e.get("tid") == main and (n := _step_number(e)) is not None
        )
    )
    return comm, compute, not_compute, step_spans


def _cpu_process(pid, events: list[dict], main) -> TraceOverlap:
    comm, compute, not_compute, step_spans = _cpu_parts(events, main)
    steps = tuple(
        StepFigures(n, _figures(comm, compute, not_compute, window=w))
        for n, w in step_spans.items()
    )
    whole = _figures(comm, compute, not_compute)
    return TraceOverlap("cpu", pid, whole, steps, "cpu_span" if steps else None)


def top_level(events: list[_Event]) -> list[_Event]:
    """Events that no other event of the list contains (one thread's outermost calls). An
    event that starts inside another but ends after it (clock jitter) counts as top-level."""
    out: list[_Event] = []
    reach = None
    for e in sorted(events, key=lambda e: (e.start, -(e.end - e.start))):
        if reach is not None and e.end <= reach:
            continue
        out.append(e)
        reach = e.end if reach is None else max(reach, e.end)
    return out


def trace_overlap(trace: dict) -> list[TraceOverlap]:
    """The GPU rule where the trace has kernels, else the CPU rule."""
    has_kernels = any(e.get("cat") == "kernel" for e in trace.get("traceEvents", []))
    return gpu_overlap(trace) if has_kernels else cpu_overlap(trace)
