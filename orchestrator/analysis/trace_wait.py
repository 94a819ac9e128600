"""Every rank's traced communication on one clock: each collective instance matched across its
group's ranks, each rank's exposed communication split into time waited for a later peer and
time moving bytes, and the rank the others waited for named. Pure.

Input: one :class:`RankTrace` per traced rank, its trace's ``ts`` already on rank 0's clock (the
same microsecond origin for every rank; ``workloads/clocks.py`` measures the offsets), with the
uncertainty of its offset. The communication and exposure are ``trace_overlap``'s (a rank's
device or process with the most communication: a rank drives one), the names
``trace_collectives``' (the op called, or what the transport ran where the pairing failed).

**Instances.** The k-th call of an op in a process group within a traced step, on every rank of
that group, is one instance (k counts in start order, from 0; a call outside every step window,
or in a trace without step marks, is keyed to step None). Keying by step keeps a missed call
from misaligning more than its own step. The group is the ranks of the call's process group:
the trace's own ``Process Group Ranks`` (NCCL kernels carry it) or, else, the recorder's group
size (``TrainingRecord.step_collectives``) on linksweep's mesh (:func:`mesh_group`: HSDP's
replicate all-reduce strides over the shard blocks, its shard collectives stay in their block),
or, without either, every rank. So an HSDP shard collective matches only the ranks of its shard
group. **Counts that differ** (a rank made fewer calls of an op in a group in a step, or a
member of the group has no trace): the calls are matched up to the fewest, and the later calls
of the ranks with more are *unmatched*: no last arrival is known, so their exposed time counts
as transfer (nothing shows they waited) and is also given apart (``unmatched_s``,
``n_unmatched``, the verdict's count).

**Waited and transfer.** An arrival is the start of the rank's interval for the instance (the
gloo event, the NCCL kernel); the last arrival marks when the transfer could start. A rank's
time in the instance before the last arrival is *waited*, from it on *transfer*. Only the
exposed part counts (``trace_overlap``: communication not under compute, clipped to each step's
window): waiting behind compute costs the step nothing. **Where two collectives run at once on
one rank** (gloo's worker threads, NCCL streams) the time counts for the one that started first
(at equal starts, the one ending first, then by op name): it held the link, and the later one
owns only what lies past every earlier one's end. So every exposed instant belongs to exactly one
instance, and per rank and step ``waited_s + transfer_s == exposed_s``, the step's exposed
figure, to the interval arithmetic's precision (exact on ``load_trace``'s Decimals).

**Clock uncertainty.** Rank r's offset to rank 0 is known within +-u_r, so a peer's arrival on r's
clock is off by at most u_r + u_j, and the last arrival (a max) by at most d = u_r + max u_j over
the group's other ranks. Moving the split point by up to d moves waited (and transfer the other
way) by at most the exposed time the instance owns within d of it: that is ``uncertainty_s``,
never more than ``exposed_s`` (the step's is the sum over its instances). Which rank was last is
*undecided* where the latest two arrivals are closer than their two uncertainties: the instance
still splits, but counts towards no rank's lateness.

**Lateness and the straggler.** An instance's last rank is late by its *margin*, its arrival
less the second-latest one's: every other rank of the group waited at least that long for it
alone. Per rank: the instances it took part in (groups of two or more), how often it was last,
its margins (mean, max, total), and its *score*: the total margin per traced step over the
median traced step's length, the share of a step the others lose waiting for it beyond the
next-latest. By count alone a rank made late once a step (a planted delay before the step, rank
0's own extra work each step) is last in one of its step's collectives (one of ~64 for FSDP2 at
grad_accum 8), so the rule weighs by time; and since ranks sharing a loaded host take turns
being late, often by more than a planted delay in one step, it asks for steadiness. A
**straggler** is named when the rank with the most lateness is late in three quarters of the
traced steps (every step, up to three) by at least :data:`MIN_STEADY_S` beyond every other
rank's lateness in that step, has a score of at least :data:`MIN_SCORE`, holds at least
:data:`MIN_SHARE` of the run's lateness and at least :data:`DOMINANCE` times the runner-up's;
else "no straggler", saying which conditions it missed. The steadiness floor is what spares
rank 0 (whose node also holds Ray's head and the driver, and which reports progress): in the
emulated cluster's clean runs it was last in most steps by 8-26 ms, never 30 ms beyond the other
rank in every step.

One job: the matching across ranks, the split and the rule above, read and changed together.

May import: orchestrator.analysis.trace_collectives, orchestrator.analysis.trace_overlap.
"""

from __future__ import annotations

import ast
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from orchestrator.analysis.trace_collectives import named_comm, with_recorded
from orchestrator.analysis.trace_overlap import (
    Interval,
    Parts,
    clip,
    length,
    parts,
    subtract,
    union,
)

US = 1e-6
MIN_STEADY_S = 0.030
"""A straggler is late in (at least) three quarters of the traced steps, each time by 30 ms
beyond every other rank's lateness in that step. Set from the emulated cluster's clean and
planted runs (DDP, ZeRO-3, FSDP2 on two links, two sweeps of 12 runs each;
docs/measurements/2026-12-07-straggler-emulated.md): two "nodes" on two shared cores make the
ranks take turns being late by 20-180 ms in a step; no clean run had one rank steadily late
beyond the other by more than 29 ms, and every rank planted 100 ms late before each step was,
by 33 ms or more. A thin margin on a shared host: there a named straggler is a hint to confirm
with repeats."""
MIN_SCORE = 0.05
"""...and at least 5% of a step: a fixed delay is no straggler where the step is long."""
MIN_SHARE = 0.5
"""...and is the rank most of the run's lateness is for."""
DOMINANCE = 2.0
"""...at least twice the runner-up's: one rank, not everybody taking turns."""


@dataclass(frozen=True)
class RankTrace:
    """One traced rank, on rank 0's clock."""

    rank: int
    trace: dict
    """The rank's Kineto/Chrome trace, its ``ts`` rebased: microseconds on rank 0's clock, the
    same origin for every rank of the run. Decimal ``ts`` keep the arithmetic exact."""
    uncertainty_s: float = 0.0
    """Half-width of this rank's offset to rank 0 (0 for rank 0)."""
    recorded: tuple = ()
    """``TrainingRecord.step_collectives``: ((op, msg_bytes, group_size), ...), for groups."""


@dataclass(frozen=True)
class InstanceWait:
    """One rank's part in one collective instance, in seconds on rank 0's clock."""

    rank: int
    step: int | None
    op: str
    """The op called; what the transport ran where the pairing failed."""
    group: str
    """The instance's process group's ranks, comma-separated ("0,1")."""
    instance: int
    """k: the k-th call of ``op`` in ``group`` within the step, from 0."""
    arrival_s: float
    last_arrival_s: float | None
    """None: unmatched."""
    last_rank: int | None
    """None: unmatched, or undecided within the clocks' uncertainty."""
    end_s: float
    exposed_s: float
    """The part of the rank's exposed communication this instance owns."""
    waited_s: float
    transfer_s: float
    uncertainty_s: float
    """How far the waited/transfer split can move given the clocks; at most ``exposed_s``."""
    matched: bool


@dataclass(frozen=True)
class StepWait:
    """One rank's traced step (None: a trace without step marks), in seconds."""

    rank: int
    step: int | None
    exposed_s: float
    waited_s: float
    transfer_s: float
    unmatched_s: float
    """The part of ``transfer_s`` from unmatched instances."""
    uncertainty_s: float
    n_instances: int
    """Instances starting in the step."""
    n_unmatched: int


@dataclass(frozen=True)
class Lateness:
    """How often and by how much one rank was the last to arrive, over a run's traced steps."""

    rank: int
    instances: int
    """Matched instances of two or more ranks it took part in."""
    times_last: int
    share_last: float | None
    mean_lateness_s: float | None
    """Its mean margin over the second-latest arrival, where it was last."""
    max_lateness_s: float | None
    lateness_s: float
    lateness_per_step_s: float
    score: float
    """``lateness_per_step_s`` over the median traced step's length."""
    straggler: bool


@dataclass(frozen=True)
class Verdict:
    straggler: int | None
    why: str
    n_instances: int
    """Matched instances of two or more ranks."""
    n_undecided: int
    """Of those, the ones whose last rank the clocks cannot tell."""
    n_unmatched: int
    """Calls left unmatched, over all ranks."""


@dataclass(frozen=True)
class WaitSplit:
    instances: tuple[InstanceWait, ...]
    steps: tuple[StepWait, ...]
    lateness: tuple[Lateness, ...]
    verdict: Verdict


@dataclass(frozen=True)
class _Call:
    rank: int
    step: int | None
    op: str
    group: tuple[int, ...]
    interval: Interval


@dataclass
class _Rank:
    rank: int
    uncertainty_s: float
    calls: list[_Call]
    exposed: list[Interval]
    """The rank's exposed communication, inside the step windows (all of it without windows)."""
    windows: dict[int | None, Interval]


def mesh_group(rank: int, world: int, group_size: int | None, op: str) -> tuple[int, ...]:
    """The ranks of ``rank``'s process group of ``group_size`` for ``op`` on linksweep's mesh.
    Every rank where the size is unknown, the world's or does not divide it; else HSDP's 2-D
    mesh (replicate x shard, ``workloads/fsdp.mesh_shape``, rank = r * shard + s): an all_reduce
    in a smaller group is the replicate all-reduce (ranks s, s + shard, ...), any other op a
    shard collective (the block of ``group_size`` consecutive ranks)."""
    if not group_size or group_size >= world or world % group_size:
        return tuple(range(world))
    if op == "all_reduce":
        stride = world // group_size
        return tuple(range(rank % stride, world, stride))
    start = rank // group_size * group_size
    return tuple(range(start, start + group_size))


def _trace_group(raw: dict) -> tuple[int, ...] | None:
    """The ``Process Group Ranks`` an NCCL kernel (or ``record_param_comms``) carries."""
    found = raw.get("args", {}).get("Process Group Ranks")
    if isinstance(found, str):
        try:
            found = ast.literal_eval(found)
        except (ValueError, SyntaxError):
            return None
    if isinstance(found, (list, tuple)) and found and all(isinstance(r, int) for r in found):
        return tuple(sorted(found))
    return None


def _busiest(found: list[Parts]) -> Parts | None:
    """The device or process with the most communication: the one the rank drove."""
    return max(found, key=lambda p: len(p.comm), default=None)


def _rank(rt: RankTrace, world: int) -> _Rank:
    p = _busiest(parts(rt.trace))
    if p is None:
        return _Rank(rt.rank, rt.uncertainty_s, [], [], {})
    groups = {}
    for e, raw in zip(p.comm, p.comm_raw, strict=True):
        if (g := _trace_group(raw)) is not None:
            groups[(e.start, e.end)] = g
    calls = []
    for n in with_recorded(named_comm(p), rt.recorded):
        op = n.issued or n.ran_as
        group = groups.get(tuple(n.interval)) or mesh_group(rt.rank, world, n.group_size, op)
        calls.append(_Call(rt.rank, n.step, op, group, n.interval))
    comm_u = union(c.interval for c in calls)
    exposed = subtract(comm_u, p.compute)
    windows: dict[int | None, Interval] = dict(p.windows)
    if windows:
        exposed = union(i for w in windows.values() for i in clip(exposed, w))
    elif comm_u:
        windows = {None: Interval(comm_u[0].start, comm_u[-1].end)}
    return _Rank(rt.rank, rt.uncertainty_s, calls, exposed, windows)


def _instances(ranks: dict[int, _Rank]) -> dict[tuple, dict[int, _Call]]:
    """(step, group, op, k) -> {rank: its call}, every rank's calls included, matched or not."""
    keyed: dict[tuple, dict[int, list[_Call]]] = {}
    for r in ranks.values():
        for c in sorted(r.calls, key=lambda c: c.interval.start):
            keyed.setdefault((c.step, c.group, c.op), {}).setdefault(r.rank, []).append(c)
    out: dict[tuple, dict[int, _Call]] = {}
    for (step, group, op), by_rank in keyed.items():
        for rank, calls in by_rank.items():
            for k, c in enumerate(calls):
                out.setdefault((step, group, op, k), {})[rank] = c
    return out


def _matched(key: tuple, members: dict[int, _Call]) -> bool:
    """Every rank of the instance's group made its k-th call."""
    return all(r in members for r in key[1])


def _like(t, us: float):
    """``us`` in the type of trace time ``t`` (Decimal + float raises)."""
    return Decimal(repr(us)) if isinstance(t, Decimal) else us


def _owned(ranks: dict[int, _Rank]) -> dict[tuple[int, Interval, str, tuple], list[Interval]]:
    """Each call's share of its rank's exposed time: the earliest-starting call owns an overlap
    (module docstring), so the shares partition the exposed set."""
    out = {}
    for r in ranks.values():
        reach = None
        for c in sorted(r.calls, key=lambda c: (c.interval.start, c.interval.end, c.op, c.group)):
            start = c.interval.start if reach is None else max(c.interval.start, reach)
            out[(r.rank, c.interval, c.op, c.group)] = clip(
                r.exposed, Interval(start, c.interval.end)
            )
            reach = c.interval.end if reach is None else max(reach, c.interval.end)
    return out


def _before(pieces: list[Interval], t) -> list[Interval]:
    return [Interval(s, min(e, t)) for s, e in pieces if s < t]


def _from(pieces: list[Interval], t) -> list[Interval]:
    return [Interval(max(s, t), e) for s, e in pieces if e > t]


def _split(pieces, t, d) -> tuple[list, list, float]:
    """(waited pieces, transfer pieces, uncertainty in the pieces' unit) at split point ``t``
    known within +-``d``."""
    waited, transfer = _before(pieces, t), _from(pieces, t)
    if not d:
        return waited, transfer, 0.0
    # a trace read with Decimal floats keeps its whole-number ts as int: match a Decimal bound
    sample = next((x for i in pieces for x in i if isinstance(x, Decimal)), t)
    dd = _like(sample, d)
    earlier = length(_from(waited, t - dd))
    later = length(_before(transfer, t + dd))
    return waited, transfer, float(max(earlier, later))


@dataclass
class _Piece:
    """One rank's instance, split, before it is cut into steps."""

    call: _Call
    key: tuple
    last: object
    last_rank: int | None
    waited: list[Interval]
    transfer: list[Interval]
    uncertainty_us: float
    matched: bool


def wait_split(ranks: Sequence[RankTrace], world_size: int | None = None) -> WaitSplit:
    """Waited and transfer per rank, step and instance, each rank's lateness and the verdict
    (module docstring). ``world_size``: the run's (default: the traced ranks')."""
    world = world_size or (max((rt.rank for rt in ranks), default=-1) + 1)
    by_rank = {rt.rank: _rank(rt, world) for rt in ranks}
    instances = _instances(by_rank)
    owned = _owned(by_rank)
    pieces: list[_Piece] = []
    margins: dict[int, list[tuple]] = {r: [] for r in by_rank}
    took_part: dict[int, int] = {r: 0 for r in by_rank}
    n_multi = n_undecided = 0
    for key, members in instances.items():
        matched = _matched(key, members)
        last = last_rank = None
        if matched:
            order = sorted(members.values(), key=lambda c: c.interval.start)
            last, last_rank = order[-1].interval.start, order[-1].rank
            if len(order) > 1:
                n_multi += 1
                for c in order:
                    took_part[c.rank] += 1
                second = order[-2]
                margin_us = float(last - second.interval.start)
                tie_us = (
                    by_rank[last_rank].uncertainty_s + by_rank[second.rank].uncertainty_s
                ) / US
                if margin_us <= tie_us:
                    n_undecided += 1
                    last_rank = None
                else:
                    margins[order[-1].rank].append((key[0], margin_us * US))
        for rank, c in members.items():
            mine = owned[(rank, c.interval, c.op, c.group)]
            if matched:
                others = [by_rank[j].uncertainty_s for j in members if j != rank]
                d_us = (by_rank[rank].uncertainty_s + max(others, default=0.0)) / US
                waited, transfer, unc = _split(mine, last, d_us)
            else:
                waited, transfer, unc = [], mine, 0.0
            pieces.append(_Piece(c, key, last, last_rank, waited, transfer, unc, matched))
    late, missed = _lateness(by_rank, margins, took_part)
    n_unmatched = sum(not p.matched for p in pieces)
    return WaitSplit(
        instances=tuple(_instance_rows(pieces)),
        steps=tuple(_step_rows(by_rank, pieces)),
        lateness=tuple(late),
        verdict=_verdict(tuple(late), missed, n_multi, n_undecided, n_unmatched),
    )


def _s(us) -> float:
    return float(us) * US


def _instance_rows(pieces: list[_Piece]) -> list[InstanceWait]:
    rows = []
    for p in pieces:
        c = p.call
        waited, transfer = length(p.waited), length(p.transfer)
        rows.append(
            InstanceWait(
                rank=c.rank,
                step=c.step,
                op=c.op,
                group=",".join(str(r) for r in c.group),
                instance=p.key[3],
                arrival_s=_s(c.interval.start),
                last_arrival_s=None if p.last is None else _s(p.last),
                last_rank=p.last_rank,
                end_s=_s(c.interval.end),
                exposed_s=_s(waited + transfer),
                waited_s=_s(waited),
                transfer_s=_s(transfer),
                uncertainty_s=p.uncertainty_us * US,
                matched=p.matched,
            )
        )
    return sorted(rows, key=lambda r: (r.rank, r.arrival_s, r.op, r.group))


def _step_rows(by_rank: dict[int, _Rank], pieces: list[_Piece]) -> list[StepWait]:
    """Each rank's instances' pieces, cut by its step windows (a piece past its own step's window
    counts in the step it falls in, as the exposed figure does)."""
    rows = []
    for rank, r in sorted(by_rank.items()):
        mine = [p for p in pieces if p.call.rank == rank]
        for step, w in r.windows.items():
            waited = [i for p in mine for i in clip(union(p.waited), w)]
            transfer = [i for p in mine for i in clip(union(p.transfer), w)]
            unmatched = [i for p in mine if not p.matched for i in clip(union(p.transfer), w)]
            unc = sum(
                min(p.uncertainty_us, float(length(clip(union(p.waited + p.transfer), w))))
                for p in mine
                if p.uncertainty_us
            )
            starting = [p for p in mine if p.call.step == step]
            rows.append(
                StepWait(
                    rank=rank,
                    step=step,
                    exposed_s=_s(length(clip(r.exposed, w))),
                    waited_s=_s(length(waited)),
                    transfer_s=_s(length(transfer)),
                    unmatched_s=_s(length(unmatched)),
                    uncertainty_s=unc * US,
                    n_instances=len(starting),
                    n_unmatched=sum(not p.matched for p in starting),
                )
            )
    return rows


def _step_length_s(by_rank: dict[int, _Rank]) -> float | None:
    """The median over traced steps of the longest rank's window."""
    longest: dict[int | None, float] = {}
    for r in by_rank.values():
        for step, w in r.windows.items():
            longest[step] = max(longest.get(step, 0.0), _s(w.end - w.start))
    return statistics.median(longest.values()) if longest else None


def _lateness(by_rank, margins, took_part) -> tuple[list[Lateness], list[str]]:
    """Each rank's lateness, the straggler flagged, and the conditions of the rule the latest
    rank missed (none where it is named). ``margins``: rank -> [(step, margin_s)]."""
    steps = {s for r in by_rank.values() for s in r.windows} or {None}
    step_s = _step_length_s(by_rank)
    total = {r: sum(m for _, m in ms) for r, ms in margins.items()}
    score = {r: _score(t / len(steps), step_s) for r, t in total.items()}
    straggler, missed = _straggler(total, _steady(margins, steps), score)
    rows = []
    for r, ms in sorted(margins.items()):
        m = [x for _, x in ms]
        rows.append(
            Lateness(
                rank=r,
                instances=took_part[r],
                times_last=len(m),
                share_last=len(m) / took_part[r] if took_part[r] else None,
                mean_lateness_s=statistics.fmean(m) if m else None,
                max_lateness_s=max(m) if m else None,
                lateness_s=total[r],
                lateness_per_step_s=total[r] / len(steps),
                score=score[r],
                straggler=r == straggler,
            )
        )
    return rows, missed


def _steady(margins: dict[int, list[tuple]], steps: set) -> dict[int, float]:
    """Per rank: in each traced step its lateness beyond the latest other rank's in that step,
    at the lower quartile over the steps (the least of them, up to three steps): how late it is
    in three quarters of the steps at least."""
    per: dict[int, dict] = {r: dict.fromkeys(steps, 0.0) for r in margins}
    for r, ms in margins.items():
        for step, m in ms:
            per[r][step] = per[r].get(step, 0.0) + m
    out = {}
    for r in margins:
        net = sorted(
            per[r][s] - max((per[j].get(s, 0.0) for j in margins if j != r), default=0.0)
            for s in per[r]
        )
        out[r] = net[len(net) // 4] if net else 0.0
    return out


def _score(per_step_s: float, step_s: float | None) -> float:
    return per_step_s / step_s if step_s else 0.0


def _straggler(total: dict, steady: dict, score: dict) -> tuple[int | None, list[str]]:
    """The rank the rule names (module docstring), or None and what the latest rank missed."""
    ranked = sorted(total, key=lambda r: (-total[r], r))
    if not ranked or total[ranked[0]] <= 0:
        return None, []
    top, runner = ranked[0], (total[ranked[1]] if len(ranked) > 1 else 0.0)
    whole = sum(total.values())
    missed = []
    if steady[top] < MIN_STEADY_S:
        missed.append(
            f"to be late by {MIN_STEADY_S * 1e3:.0f} ms beyond every other rank in three quarters "
            f"of the steps (it was by {steady[top] * 1e3:.1f} ms)"
        )
    if score[top] < MIN_SCORE:
        missed.append(f"at least {MIN_SCORE:.0%} of a step")
    if total[top] < MIN_SHARE * whole:
        missed.append(f"at least {MIN_SHARE:.0%} of all lateness")
    if total[top] < DOMINANCE * runner:
        missed.append(f"{DOMINANCE:g}x the runner-up's lateness")
    return (None if missed else top), missed


def _verdict(
    late: tuple[Lateness, ...], missed: list[str], n_multi: int, n_undecided: int, n_unmatched
) -> Verdict:
    counts = {"n_instances": n_multi, "n_undecided": n_undecided, "n_unmatched": n_unmatched}
    if not n_multi:
        return Verdict(None, "no straggler: no collective matched across ranks", **counts)
    named = [x for x in late if x.straggler]
    if named:
        x = named[0]
        whole = sum(y.lateness_s for y in late)
        return Verdict(
            x.rank,
            f"rank {x.rank} was last in {x.times_last} of {x.instances} collectives, the others "
            f"waiting {x.lateness_per_step_s * 1e3:.1f} ms a step for it beyond the next-latest "
            f"rank ({x.score:.0%} of a step; {x.lateness_s / whole:.0%} of all lateness)",
            **counts,
        )
    top = max(late, key=lambda y: (y.lateness_s, -y.rank), default=None)
    if top is None or top.lateness_s <= 0:
        why = "no straggler: no rank was last by more than the clocks' uncertainty"
    else:
        whole = sum(y.lateness_s for y in late)
        why = (
            f"no straggler: the latest rank, {top.rank}, costs the others "
            f"{top.lateness_per_step_s * 1e3:.1f} ms a step ({top.score:.1%} of a step) and holds "
            f"{top.lateness_s / whole:.0%} of all lateness; a straggler needs " + ", ".join(missed)
        )
    return Verdict(None, why, **counts)
