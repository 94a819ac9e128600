"""Which collective each interval of a trace's communication was, and how much of each one a
step left exposed. Pure.

Every communication interval that ``trace_overlap`` counts (a ``gloo:*`` event on CPU, an NCCL
kernel on GPU) gets two names:

- **issued**: the op the strategy called, as torch's dispatcher records the call on the main
  thread (``c10d::_reduce_scatter_base_``, ``_c10d_functional::all_gather_into_tensor``), in the
  collective recorder's words (``workloads/collectives.py``: its ``C10D_OPS`` and
  ``FUNCTIONAL_OPS`` tables, so ``c10d::_reduce_scatter_base_`` is ``reduce_scatter``);
- **ran as**: what the transport ran: gloo's event (``gloo:all_reduce``) or the NCCL kernel's
  name (``ncclDevKernel_AllGather_RING_LL`` is ``all_gather``, ``ncclKernel_SendRecv_*``
  ``send_recv``). The two differ: gloo runs a reduce_scatter as an all_reduce (a traced FSDP2
  step on gloo: each of its 48 ``c10d::_reduce_scatter_base_`` calls was a ``gloo:all_reduce``),
  and NCCL runs all_to_all as SendRecv kernels.

**Pairing a call with its interval.** CPU: the main thread's calls and gloo's events, each in
start order, the k-th with the k-th: gloo's worker threads take collectives in the order they
were queued, so starts come in the order of the calls. Where the two counts differ, that order
cannot be trusted and no interval is named (issued None). GPU: the call on the launching thread
whose span holds the kernel's launch (``args.correlation``): a ``c10d::`` call or torch's
``nccl:<op>`` annotation (some calls reach NCCL without a ``c10d::`` event); else the kernel's
own ``Collective name`` argument (newer torch writes it on the kernel); else None.

**Bytes and group** come from the collective recorder: its sequence of one profiled step ((op,
message bytes, group size) in issue order, ``TrainingRecord.step_collectives``) is laid over each
traced step whose issued ops are exactly that sequence, so each interval also carries its
message size and its group's size (HSDP's shard collectives and its replicate all-reduce apart);
where the sequences differ, bytes and group stay None.

**Figures** per step and (issued, ran as, group size): the intervals' count and message bytes,
their busy time (the union of the intervals, clipped to the step's window) and its exposed part
(that union less the compute union). Two collectives can run at once (two gloo threads, two
streams), so the busy times of a step's collectives can add up to more than its ``comm_s``.
A trace without step marks gives one row per collective with step None (the whole trace).

May import: orchestrator.analysis.trace_overlap, workloads.collectives, workloads.contract.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from orchestrator.analysis.trace_overlap import (
    LAUNCH_CATEGORIES,
    Interval,
    Parts,
    clip,
    length,
    main_thread,
    subtract,
    union,
)
from workloads.collectives import C10D_OPS, FUNCTIONAL_OPS
from workloads.contract import canonical_op

ISSUED: dict[str, str] = {f"c10d::{name}": spec[0] for name, spec in C10D_OPS.items()} | {
    f"_c10d_functional::{name}": spec[0] for name, spec in FUNCTIONAL_OPS.items()
}
"""A dispatcher call's event name -> the collective it issues (the recorder's tables)."""
KERNEL_OP = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
"""The op in an NCCL kernel's name: ``ncclDevKernel_AllGather_RING_LL`` -> ``AllGather``."""

RecordedStep = Sequence[tuple[str, int, int]]
"""The recorder's collectives of one step: (op, message bytes, group size), in issue order."""


@dataclass(frozen=True)
class NamedComm:
    """One communication interval of a trace, named."""

    step: int | None
    """The step whose window holds its start; None: no step marks (or outside them)."""
    issued: str | None
    """The collective the strategy called; None where the pairing could not be trusted."""
    ran_as: str
    """What the transport ran (gloo's event, the NCCL kernel)."""
    interval: Interval
    msg_bytes: int | None = None
    group_size: int | None = None


@dataclass(frozen=True)
class CollectiveFigures:
    """One step's intervals of one collective (issued, ran as, group size), in microseconds."""

    step: int | None
    issued: str | None
    ran_as: str
    group_size: int | None
    n: int
    msg_bytes: int | None
    """Summed over the intervals; None where the recorder's step could not be laid over."""
    busy_us: float
    exposed_us: float


def issued_op(name: str) -> str | None:
    """The collective a dispatcher call's event issues; None for anything else."""
    return ISSUED.get(name)


def ran_as(name: str) -> str:
    """What a gloo event or an NCCL kernel ran, in canonical words where there are some."""
    if name.startswith("gloo:"):
        raw = name.removeprefix("gloo:")
    elif m := KERNEL_OP.match(name):
        raw = re.sub(r"(?<!^)(?=[A-Z])", "_", m.group(1)).lower()  # SendRecv -> send_recv
    else:
        raw = name
    try:
        return canonical_op(raw)
    except ValueError:
        return raw


def named_comm(p: Parts) -> list[NamedComm]:
    """Every communication interval of ``p`` with its names, in start order."""
    issued = _issued_cpu(p) if p.rule == "cpu" else _issued_gpu(p)
    out = [
        NamedComm(_step_of(p.windows, e.start), op, ran_as(e.name), Interval(e.start, e.end))
        for e, op in zip(p.comm, issued, strict=True)
    ]
    return sorted(out, key=lambda n: n.interval.start)


def _issued_cpu(p: Parts) -> list[str | None]:
    """The CPU pairing (module docstring), one entry per ``p.comm`` event."""
    main = main_thread(p.issue_events)
    calls = sorted(
        (e["ts"], op)
        for e in p.issue_events
        if e.get("tid") == main and (op := issued_op(str(e.get("name", "")))) is not None
    )
    if len(calls) != len(p.comm):
        return [None] * len(p.comm)
    order = sorted(range(len(p.comm)), key=lambda i: p.comm[i].start)
    out: list[str | None] = [None] * len(p.comm)
    for (_, op), i in zip(calls, order, strict=True):
        out[i] = op
    return out


def _issued_gpu(p: Parts) -> list[str | None]:
    """The GPU pairing (module docstring), one entry per ``p.comm`` kernel."""
    launches = {
        e["args"]["correlation"]: (e.get("pid"), e.get("tid"), e["ts"])
        for e in p.issue_events
        if e.get("cat") in LAUNCH_CATEGORIES and "correlation" in e.get("args", {})
    }
    calls: dict[tuple, list[tuple]] = {}
    for e in p.issue_events:
        if (op := _gpu_call_op(e)) is not None:
            calls.setdefault((e.get("pid"), e.get("tid")), []).append(
                (e["ts"], e["ts"] + e["dur"], op)
            )
    out: list[str | None] = []
    for raw in p.comm_raw:
        args = raw.get("args", {})
        launch = launches.get(args.get("correlation"))
        op = None
        if launch is not None:
            pid, tid, ts = launch
            holding = [(s, o) for s, e, o in calls.get((pid, tid), ()) if s <= ts < e]
            op = max(holding, key=lambda so: so[0])[1] if holding else None  # the innermost
        if op is None and args.get("Collective name"):
            op = ran_as(str(args["Collective name"]))
        out.append(op)
    return out


def _gpu_call_op(e: dict) -> str | None:
    """The collective a CPU-side event issues: a dispatcher call, or torch's ``nccl:<op>``
    annotation around the launch (some calls reach NCCL without a ``c10d::`` event: all_to_all
    in a real A100 trace); never the GPU-side ``nccl:*`` spans."""
    name = str(e.get("name", ""))
    if (op := issued_op(name)) is not None:
        return op
    if name.startswith("nccl:") and e.get("cat") != "gpu_user_annotation":
        try:
            return canonical_op(name.removeprefix("nccl:"))
        except ValueError:
            return None
    return None


def _step_of(windows: dict[int, Interval], t) -> int | None:
    for n, w in windows.items():
        if w.start <= t < w.end:
            return n
    return None


def with_recorded(named: list[NamedComm], recorded: RecordedStep | None) -> list[NamedComm]:
    """``named`` with each step's message bytes and group sizes from the recorder's step, where
    that step's issued ops are exactly the recorded sequence (module docstring)."""
    if not recorded:
        return named
    ops = [op for op, _, _ in recorded]
    by_step: dict[int | None, list[int]] = {}
    for i, n in enumerate(named):
        by_step.setdefault(n.step, []).append(i)
    out = list(named)
    for step, idx in by_step.items():
        if step is None or [named[i].issued for i in idx] != ops:
            continue
        for i, (_, msg_bytes, group_size) in zip(idx, recorded, strict=True):
            out[i] = replace(named[i], msg_bytes=msg_bytes, group_size=group_size)
    return out


def collective_figures(p: Parts, recorded: RecordedStep | None = None) -> list[CollectiveFigures]:
    """Per step and collective: count, bytes, busy and exposed time (module docstring)."""
    named = with_recorded(named_comm(p), recorded)
    groups: dict[tuple, list[NamedComm]] = {}
    for n in named:
        groups.setdefault((n.step, n.issued, n.ran_as, n.group_size), []).append(n)
    out = []
    for (step, issued, ran, group_size), members in groups.items():
        busy = union(m.interval for m in members)
        compute = p.compute
        if step is not None:
            busy, compute = clip(busy, p.windows[step]), clip(p.compute, p.windows[step])
        sizes = [m.msg_bytes for m in members]
        out.append(
            CollectiveFigures(
                step=step,
                issued=issued,
                ran_as=ran,
                group_size=group_size,
                n=len(members),
                msg_bytes=None if None in sizes else sum(sizes),
                busy_us=float(length(busy)),
                exposed_us=float(length(subtract(busy, compute))),
            )
        )
    return sorted(out, key=lambda f: (f.step is None, f.step or 0, -f.busy_us))
