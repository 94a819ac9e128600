"""Each rank's clock against rank 0's, measured over the run's own process group.

A traced rank's Chrome trace is on its own wall clock: torch 2.13's exporter
(``torch/profiler/_chrome_trace_export.py``) writes every ``ts`` in microseconds after
``baseTimeNanoseconds``, and ts + base is the event's Unix time in nanoseconds, the clock
``time.time_ns()`` reads (CLOCK_REALTIME). Two ranks on two hosts disagree on that clock by
whatever NTP left between them; to lay their traces on one time axis the driver needs each rank's
offset to rank 0.

The method is the NTP one, over the run's process group (gloo or NCCL alike, no second group):
for each peer, rank 0 reads its clock (``t0_send``) and broadcasts; the peer, once the broadcast
has reached it, reads its own (``t_peer``) and broadcasts that reading back; rank 0 reads its
clock again when it has it (``t0_recv``). By causality the peer's reading was taken between
rank 0's two, so the peer's offset (its clock minus rank 0's at the same instant) lies in
[t_peer - t0_recv, t_peer - t0_send]: the midpoint is the estimate, half the round trip its
uncertainty, a bound rather than a standard error (it assumes neither clock drifts within one
round trip, microseconds to milliseconds). Of ``rounds`` exchanges per peer the one with the
smallest round trip is kept: the others waited somewhere (a scheduler, a late peer). Rank 0
then broadcasts every rank's result; each rank keeps its own.

Cost: 2 x rounds small broadcasts per peer, once, before the traced steps. On NCCL each one is
followed by a device synchronisation: a reading taken before the broadcast's data landed would
break the causal bound.

:func:`estimate` is the pure estimator; :func:`measure_offset` runs the exchange. Both take the
clock as an argument (default ``time.time_ns``) so a test can plant an offset on one rank and
recover it.

May import: torch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

ROUNDS = 8
"""Exchanges per peer: enough that one of them is likely to meet no scheduler delay, few enough
that a shaped link's latency (each round is two broadcasts) costs the run little."""


@dataclass(frozen=True)
class Exchange:
    """One ping-pong between rank 0 and a peer, each reading in its own clock's nanoseconds."""

    t0_send_ns: int
    """Rank 0's clock just before it sent."""
    t_peer_ns: int
    """The peer's clock once rank 0's message had reached it, before it answered."""
    t0_recv_ns: int
    """Rank 0's clock once the answer had reached it."""

    @property
    def rtt_ns(self) -> int:
        return self.t0_recv_ns - self.t0_send_ns


@dataclass(frozen=True)
class ClockOffset:
    """A rank's clock minus rank 0's at the same instant. A time ``t`` this rank read is
    ``t - offset_ns`` on rank 0's clock, within ``uncertainty_ns`` either way."""

    offset_ns: int
    uncertainty_ns: int
    """Half the kept exchange's round trip: the true offset is within this of ``offset_ns``."""


RANK0 = ClockOffset(0, 0)
"""Rank 0 against itself."""


def estimate(exchanges: Sequence[Exchange]) -> ClockOffset:
    """The offset of the exchange with the smallest round trip: t_peer minus the midpoint of
    rank 0's two readings, uncertainty half the round trip (in whole nanoseconds, rounded so
    the bound holds). Raises ValueError on no exchange or on one whose round trip is
    negative (rank 0's clock stepped back)."""
    if not exchanges:
        raise ValueError("no clock exchange to estimate an offset from")
    bad = [e for e in exchanges if e.rtt_ns < 0]
    if bad:
        raise ValueError(f"negative round trip {bad[0].rtt_ns} ns: rank 0's clock stepped back")
    best = min(exchanges, key=lambda e: e.rtt_ns)
    # twice the midpoint estimate; it has the round trip's parity, so where either is odd the
    # estimate moves half a nanosecond (floor) and ceil(rtt / 2) still bounds it
    twice = 2 * best.t_peer_ns - best.t0_send_ns - best.t0_recv_ns
    return ClockOffset(twice // 2, (best.rtt_ns + 1) // 2)


Broadcast = Callable[["object", int], None]
"""``broadcast(tensor, src)``: the group's broadcast of a 1-element int64 tensor from ``src``,
returning once the data is in ``tensor`` on this rank."""


def exchanges(
    rank: int,
    world_size: int,
    broadcast: Broadcast,
    rounds: int = ROUNDS,
    clock: Callable[[], int] = time.time_ns,
) -> dict[int, list[Exchange]]:
    """Run the ping-pongs; on rank 0 ``{peer: its exchanges}``, on the others ``{}``. Every rank
    of the group must call it (each broadcast is a collective of the whole group)."""
    import torch

    buf = torch.zeros(1, dtype=torch.int64)
    out: dict[int, list[Exchange]] = {}
    for peer in range(1, world_size):
        for _ in range(rounds):
            t0_send = clock() if rank == 0 else 0
            buf.fill_(0)
            broadcast(buf, 0)
            if rank == peer:
                buf.fill_(clock())
            broadcast(buf, peer)
            if rank == 0:
                t0_recv = clock()
                out.setdefault(peer, []).append(Exchange(t0_send, int(buf.item()), t0_recv))
    return out


def measure_offset(
    rank: int,
    world_size: int,
    broadcast: Broadcast,
    rounds: int = ROUNDS,
    clock: Callable[[], int] = time.time_ns,
) -> ClockOffset:
    """This rank's :class:`ClockOffset` to rank 0 (rank 0: :data:`RANK0`): the exchanges, rank 0
    estimates each peer's, then broadcasts them all (2 x world_size int64). Collective."""
    import torch

    found = exchanges(rank, world_size, broadcast, rounds, clock)
    table = torch.zeros(2 * world_size, dtype=torch.int64)
    if rank == 0:
        for peer, xs in found.items():
            o = estimate(xs)
            table[2 * peer], table[2 * peer + 1] = o.offset_ns, o.uncertainty_ns
    broadcast(table, 0)
    return ClockOffset(int(table[2 * rank]), int(table[2 * rank + 1]))


def group_broadcast(device) -> Broadcast:
    """The default process group's broadcast for :func:`measure_offset`, through ``device``
    (NCCL needs the tensor on the rank's GPU) and waited for: on CUDA the device is synchronised
    before the result is read, so a clock read after it follows the data's arrival."""
    import torch
    import torch.distributed as dist

    def broadcast(tensor, src: int) -> None:
        moved = tensor.to(device)
        dist.broadcast(moved, src)
        if moved.device.type == "cuda":
            torch.cuda.synchronize(moved.device)
        if moved is not tensor:
            tensor.copy_(moved.cpu())

    return broadcast
