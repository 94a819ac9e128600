"""A rank's clock offset to rank 0 (``workloads/clocks.py``): the estimator on exchanges worked
out by hand, its bound on random ones, then the exchange itself on threads standing in for a
process group's ranks, with an offset planted on one rank's clock and recovered within its
uncertainty. (The same over real gloo ranks: ``tests/integration/test_clocks_gloo.py``.)"""

from __future__ import annotations

import random
import threading
import time

import pytest
import torch

from workloads.clocks import RANK0, ClockOffset, Exchange, estimate, exchanges, measure_offset


def test_the_exchange_with_the_smallest_round_trip_gives_the_offset():
    # rank 0 sent at 1000 and heard back at 1100 (rtt 100); the peer read 5_001_060 in between:
    # its clock is 5_001_060 - 1050 = 5_000_010 ahead, within 50. The slower exchange (rtt
    # 900) would say 5_000_000 +- 450 and is not kept.
    slow = Exchange(t0_send_ns=0, t_peer_ns=5_000_450, t0_recv_ns=900)
    fast = Exchange(t0_send_ns=1000, t_peer_ns=5_001_060, t0_recv_ns=1100)
    assert estimate([slow, fast]) == ClockOffset(5_000_010, 50)
    assert estimate([fast, slow]) == ClockOffset(5_000_010, 50)


def test_an_odd_round_trip_still_bounds_the_offset_in_whole_nanoseconds():
    # midpoint 100.5: the estimate is 100 - 100.5 = -0.5 -> floor -1, uncertainty ceil(101/2)=51,
    # so [-52, 50] holds the causal interval [t_peer - recv, t_peer - send] = [-51, 50]
    o = estimate([Exchange(50, 100, 151)])
    assert o == ClockOffset(-1, 51)
    assert (
        o.offset_ns - o.uncertainty_ns <= 100 - 151 and o.offset_ns + o.uncertainty_ns >= 100 - 50
    )


def test_the_estimate_is_within_its_uncertainty_of_the_true_offset_whatever_the_delays():
    # any one-way delays, however lopsided: the true offset lies in the causal interval
    rng = random.Random(7)
    for _ in range(500):
        true = rng.randint(-(10**12), 10**12)
        xs = []
        for _ in range(rng.randint(1, 8)):
            send = rng.randint(0, 10**15)
            there = send + rng.randint(0, 10**7)  # arrival, on rank 0's clock
            back = there + rng.randint(0, 10**7)
            xs.append(Exchange(send, there + true, back))
        o = estimate(xs)
        assert abs(o.offset_ns - true) <= o.uncertainty_ns
        assert o.uncertainty_ns <= (min(x.rtt_ns for x in xs) + 1) // 2


def test_no_exchange_or_a_negative_round_trip_is_refused():
    with pytest.raises(ValueError, match="no clock exchange"):
        estimate([])
    with pytest.raises(ValueError, match="negative round trip -5 ns"):
        estimate([Exchange(10, 0, 5)])


class ThreadGroup:
    """Ranks as threads: ``broadcast(tensor, src)`` copies src's tensor into every rank's once all
    have called it, as a process group's broadcast does (a barrier before and after the copy)."""

    def __init__(self, world_size: int):
        self.barrier = threading.Barrier(world_size, timeout=30)
        self.slot = None

    def broadcast_for(self, rank: int):
        def broadcast(tensor: torch.Tensor, src: int) -> None:
            if rank == src:
                self.slot = tensor.clone()
            self.barrier.wait()
            if rank != src:
                tensor.copy_(self.slot)
            self.barrier.wait()

        return broadcast


def on_threads(world_size: int, clocks: dict[int, object], rounds: int = 8) -> dict[int, object]:
    """Each rank's ``measure_offset`` result, ranks as threads with their own clocks."""
    group, out, errors = ThreadGroup(world_size), {}, []

    def rank_main(rank: int) -> None:
        try:
            out[rank] = measure_offset(
                rank, world_size, group.broadcast_for(rank), rounds, clocks.get(rank, time.time_ns)
            )
        except Exception as exc:  # noqa: BLE001 - re-raised below in the test's thread
            errors.append(exc)
            group.barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


def test_a_planted_offset_is_recovered_within_its_uncertainty_on_threads():
    # one host, one clock: rank 1's reading shifted by +7 s and rank 2's by -3.5 ms are the
    # true offsets; rank 0 and rank 3 read the clock as it is (true offset 0)
    plant = {1: 7_000_000_000, 2: -3_500_000, 3: 0}
    clocks = {r: (lambda d=d: time.time_ns() + d) for r, d in plant.items()}
    found = on_threads(4, clocks)
    assert found[0] == RANK0
    for rank, true in plant.items():
        o = found[rank]
        assert abs(o.offset_ns - true) <= o.uncertainty_ns, (rank, o)
        # a real bound, not a vacuous one: two barrier round trips on one host stay far below
        # a tenth of a second even on a loaded machine
        assert o.uncertainty_ns < 100_000_000, (rank, o)


def test_only_rank_0_keeps_exchanges_and_each_peer_gets_rounds_of_them():
    group, got = ThreadGroup(3), {}

    def rank_main(rank):
        got[rank] = exchanges(rank, 3, group.broadcast_for(rank), rounds=4)

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got[1] == {} and got[2] == {}
    assert sorted(got[0]) == [1, 2] and all(len(xs) == 4 for xs in got[0].values())
    assert all(x.t0_send_ns <= x.t_peer_ns <= x.t0_recv_ns for xs in got[0].values() for x in xs)


def test_a_rank_without_a_process_group_measures_no_offset():
    # no group (or a one-rank one, which a neighbouring test may leave up): nothing to measure
    # against, so None, and its trace record says so (NULL in traces), not a made-up 0
    from workloads.train import clock_offset

    assert clock_offset(torch.device("cpu")) is None
