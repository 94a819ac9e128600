"""A rank other than 0 that reaches the rendezvous before rank 0 listens no longer stalls both
ranks' ``pg_init``: two real forked gloo ranks through ``workloads.rank._process_group`` over
``tcp://127.0.0.1``, rank 1 first on purpose.

Without the wait (``workloads.rank.wait_for_master``) rank 1's first connect is refused and torch
retries it after its back-off (torch 2.13: 0.5 s with +-50 % jitter, so 0.25-0.75 s after the
refusal), and rank 0's group waits for rank 1 that long too. Rank 0 is late by ``RANK0_LATE_S``,
well under the back-off's 0.25 s minimum: the old code then always finished at least 0.2 s after
rank 0 started. A longer lateness (0.3 s) would not tell: the jittered retry then lands anywhere
from just after rank 0 listens to 0.45 s later."""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import time

import torch
import torch.distributed as dist

from tests.integration.rayports import free_port
from workloads.contract import DeviceDecision
from workloads.diag import Armed
from workloads.phases import PhaseClock
from workloads.rank import _process_group, wait_for_master

RANK0_LATE_S = 0.05
"""How much after rank 1 rank 0 enters its group setup: the race's bad order, made certain."""

UP_WITHIN_S = 0.15
"""Both groups are up this soon after rank 0 started: ~0.02 s idle with the wait, never under
0.2 s without it (the back-off's 0.25 s minimum less ``RANK0_LATE_S``)."""


def _rank(rank: int, port: int, rank1_entering, results) -> None:
    """One rank: its group setup as a run does it, then one all_reduce through the group."""
    decision = DeviceDecision("gloo", "cpu", "", None)
    clock = PhaseClock()
    armed = Armed(f"pg-order-{os.getppid()}", rank)
    if rank == 0:
        rank1_entering.wait(10)
        time.sleep(RANK0_LATE_S)  # the scenario's lateness, not a synchronisation
    else:
        rank1_entering.set()
    start = time.monotonic()  # CLOCK_MONOTONIC: one clock for both processes
    with _process_group(decision, ("127.0.0.1", port), rank, 2, 30.0, armed, clock):
        up = time.monotonic()
        total = torch.ones(1)
        dist.all_reduce(total)
    results.put((rank, start, up, total.item(), clock.seconds["pg_init"]))


def test_a_rank_ahead_of_rank_0_groups_up_as_soon_as_rank_0_listens():
    ctx = mp.get_context("fork")
    port, rank1_entering, results = free_port(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, port, rank1_entering, results)) for r in (0, 1)]
    for p in procs:
        p.start()
    try:
        got = dict((r[0], r[1:]) for r in (results.get(timeout=30) for _ in procs))
    finally:
        for p in procs:
            p.join(10)
    (start0, up0, total0, pg_init0), (start1, up1, total1, pg_init1) = got[0], got[1]
    assert [p.exitcode for p in procs] == [0, 0]
    assert total0 == total1 == 2.0  # the probe connection was not taken for a rank
    assert start0 - start1 >= RANK0_LATE_S  # the bad order did happen
    assert up0 - start0 < UP_WITHIN_S, f"rank 0 up {up0 - start0:.3f} s after it started"
    assert up1 - start0 < UP_WITHIN_S, f"rank 1 up {up1 - start0:.3f} s after rank 0 started"
    assert pg_init0 < UP_WITHIN_S
    assert pg_init1 < RANK0_LATE_S + UP_WITHIN_S  # its wait for rank 0 is part of its pg_init


def test_the_wait_gives_up_at_its_bound_when_nothing_listens():
    port = free_port()  # bound then closed: a connect is refused
    t0 = time.monotonic()
    assert wait_for_master("127.0.0.1", port, 0.05) is False
    assert 0.05 <= time.monotonic() - t0 < 1.0


def test_the_wait_returns_at_once_when_the_port_listens():
    with socket.create_server(("127.0.0.1", 0)) as server:
        t0 = time.monotonic()
        assert wait_for_master("127.0.0.1", server.getsockname()[1], 5.0) is True
        assert time.monotonic() - t0 < 1.0
