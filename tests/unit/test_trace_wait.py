"""Waiting for peers vs moving bytes, across ranks on one clock: constructed multi-rank CPU
traces whose arrivals, splits and verdicts are worked out by hand in each test (a planted late
rank, a clean run with rank 0's extra work, counts that differ, HSDP subgroups, collectives
overlapping on one rank, the clocks' uncertainty), then a real GPU trace of the corpus beside a
shifted copy of itself."""

from __future__ import annotations

import copy
import math
import random
from decimal import Decimal

import pytest

from orchestrator.analysis.trace_overlap import cpu_overlap, trace_overlap
from orchestrator.analysis.trace_wait import (
    MIN_STEADY_S,
    RankTrace,
    mesh_group,
    wait_split,
)
from tests.captures import CORPUS, path
from tests.unit.test_trace_overlap import cpu, step_span, trace_04

US = 1e-6
MS = 1e-3
STEP_MS = 1000


def gloo(name, ts, dur, tid=2):
    return cpu(f"gloo:{name}", ts, dur, tid=tid, cat="user_annotation")


CALL = {"all_reduce": "c10d::allreduce_", "all_gather": "c10d::_allgather_base_"}


def rank_trace(collectives_by_step, steps=2, step_ms=STEP_MS):
    """A CPU rank's trace: each step s is [s * step_ms, (s + 1) * step_ms) on the main thread;
    ``collectives_by_step(s)`` gives (op, arrival, end, tid) in step-relative milliseconds. The
    main thread computes from the step's start to the first arrival and from the last end to the
    step's end, calls each collective at its arrival (a 1 ms ``c10d::`` op, not compute) and
    waits (no event) until the collective ends, so its exposed communication is each
    collective's whole interval."""
    events = []
    for s in range(steps):
        base = s * step_ms
        events.append(step_span(s, base, step_ms))
        colls = collectives_by_step(s)
        first = min(a for _, a, _, _ in colls)
        last_end = max(e for _, _, e, _ in colls)
        events.append(cpu("aten::mm", base, first))
        events.append(cpu("aten::add_", base + last_end, step_ms - last_end))
        for op, a, e, tid in colls:
            events.append(cpu(CALL[op], base + a, 1))
            events.append(gloo(op, base + a, e - a, tid=tid))
    for e in events:  # the trace's microseconds
        e["ts"], e["dur"] = e["ts"] * 1000, e["dur"] * 1000
    return {"traceEvents": events}


def one_all_reduce(arrival, end=900):
    return lambda s: [("all_reduce", arrival, end, 2)]


def by_rank(split, rank):
    return [s for s in split.steps if s.rank == rank]


def test_a_late_rank_makes_the_others_wait_and_is_named():
    """Ranks 0 and 2 arrive at 400, rank 1 at 600; the all_reduce ends at 900 on all of them.
    Ranks 0 and 2 wait 200 ms and transfer 300; rank 1 waits nothing, transfers 300."""
    ranks = [RankTrace(r, rank_trace(one_all_reduce(600 if r == 1 else 400))) for r in range(3)]
    split = wait_split(ranks)
    for r, waited in ((0, 200), (1, 0), (2, 200)):
        for s in by_rank(split, r):
            assert (s.waited_s, s.transfer_s) == pytest.approx((waited * MS, 300 * MS))
            assert s.waited_s + s.transfer_s == pytest.approx(s.exposed_s)
            assert (s.n_instances, s.n_unmatched, s.unmatched_s) == (1, 0, 0)
    assert {(i.rank, i.step, i.op, i.group, i.instance, i.last_rank) for i in split.instances} == {
        (r, s, "all_reduce", "0,1,2", 0, 1) for r in range(3) for s in range(2)
    }
    late = {x.rank: x for x in split.lateness}
    assert (late[1].times_last, late[1].instances, late[1].share_last) == (2, 2, 1.0)
    assert late[1].mean_lateness_s == pytest.approx(200 * MS)  # beyond the second-latest
    assert late[1].score == pytest.approx(0.2)  # 200 ms a step of a 1000 ms step
    assert late[1].straggler and not late[0].straggler and late[0].times_last == 0
    assert split.verdict.straggler == 1
    assert split.verdict.why.startswith("rank 1 was last in 2 of 2 collectives")


def test_the_exposed_figure_is_the_overlap_rules():
    """waited + transfer is trace_overlap's exposed figure, step by step."""
    traces = [rank_trace(one_all_reduce(600 if r == 1 else 400)) for r in range(2)]
    split = wait_split([RankTrace(r, t) for r, t in enumerate(traces)])
    for r, t in enumerate(traces):
        [found] = cpu_overlap(t)
        want = {s.step: s.figures.exposed_us * US for s in found.steps}
        got = {s.step: s.waited_s + s.transfer_s for s in by_rank(split, r)}
        assert got == pytest.approx(want)


def test_a_clean_run_with_rank_0s_extra_work_names_no_straggler():
    """As measured in a clean DDP run on the emulated cluster (2 ranks, one all_reduce in each
    130 ms step): rank 0 (its node also holds Ray's head and the driver, and it reports progress)
    arrives last in every step, by 17, 26 and 8 ms: 12% of a step and all of the lateness, but
    not late by 30 ms in three quarters of the steps, so no straggler."""
    late_ms = {0: 17, 1: 26, 2: 8}

    def colls(r):
        return lambda s: [("all_reduce", 60 + (late_ms[s] if r == 0 else 0), 120, 2)]

    split = wait_split([RankTrace(r, rank_trace(colls(r), steps=3, step_ms=130)) for r in range(2)])
    late = {x.rank: x for x in split.lateness}
    assert late[0].times_last == 3 and late[0].score == pytest.approx(17 / 130)
    assert split.verdict.straggler is None and not late[0].straggler
    assert split.verdict.why == (
        "no straggler: the latest rank, 0, costs the others 17.0 ms a step (13.1% of a step) and "
        "holds 100% of all lateness; a straggler needs to be late by 30 ms beyond every other "
        "rank in three quarters of the steps (it was by 8.0 ms)"
    )
    assert 8 * MS < MIN_STEADY_S


def test_a_fixed_delay_in_a_long_step_is_no_straggler_in_a_shorter_one_it_is():
    """100 ms late every step: 2.5% of a 4 s step (no straggler), 6.7% of a 1.5 s one (named)."""

    def run(step_ms):
        return wait_split(
            [
                RankTrace(r, rank_trace(one_all_reduce(500 if r == 1 else 400), step_ms=step_ms))
                for r in range(2)
            ]
        ).verdict

    long = run(4000)
    assert long.straggler is None and long.why.endswith("a straggler needs at least 5% of a step")
    assert run(1500).straggler == 1


def test_ranks_taking_turns_name_no_straggler():
    """Rank 0 is 100 ms late in step 0, rank 1 in step 1: each holds half of the lateness."""
    ranks = [
        RankTrace(r, rank_trace(lambda s, r=r: [("all_reduce", 500 if s == r else 400, 900, 2)]))
        for r in range(2)
    ]
    split = wait_split(ranks)
    assert [x.times_last for x in split.lateness] == [1, 1]
    assert split.verdict.straggler is None


def test_one_late_collective_a_step_weighs_by_time_not_count():
    """Four all_gathers a step; rank 1 is 300 ms late for the first only, and last in none of the
    other three: last in 2 of 8 collectives, yet the others wait 30% of each step for it."""

    def colls(late):
        def per_step(s):
            out = [("all_gather", 400 if late else 100, 450, 2)]
            return out + [("all_gather", 500 + 100 * k, 550 + 100 * k, 2) for k in range(3)]

        return per_step

    ranks = [RankTrace(r, rank_trace(colls(r == 1))) for r in range(2)]
    split = wait_split(ranks)
    late = {x.rank: x for x in split.lateness}
    assert (late[1].times_last, late[1].instances) == (2, 8)
    assert split.verdict.straggler == 1


def test_counts_that_differ_match_up_to_the_fewest_and_count_the_rest_as_transfer():
    """Rank 1 makes a second all_reduce in step 0 [920, 960) that rank 0 never makes: it is
    unmatched, counted as transfer and given apart."""

    def extra(s):
        return [("all_reduce", 400, 900, 2)] + ([("all_reduce", 920, 960, 3)] if s == 0 else [])

    split = wait_split(
        [RankTrace(0, rank_trace(one_all_reduce(400))), RankTrace(1, rank_trace(extra))]
    )
    s0 = next(s for s in by_rank(split, 1) if s.step == 0)
    assert (s0.n_instances, s0.n_unmatched) == (2, 1)
    assert s0.unmatched_s == pytest.approx(40 * MS)
    assert s0.transfer_s == pytest.approx((500 + 40) * MS)
    assert s0.waited_s + s0.transfer_s == pytest.approx(s0.exposed_s)
    [lone] = [i for i in split.instances if not i.matched]
    assert (lone.rank, lone.step, lone.instance, lone.last_arrival_s) == (1, 0, 1, None)
    assert split.verdict.n_unmatched == 1


def test_a_missing_ranks_trace_leaves_its_groups_instances_unmatched():
    split = wait_split([RankTrace(0, rank_trace(one_all_reduce(400)))], world_size=2)
    assert all(not i.matched for i in split.instances)
    assert [s.transfer_s for s in split.steps] == pytest.approx([500 * MS] * 2)
    assert split.verdict.straggler is None
    assert split.verdict.why == "no straggler: no collective matched across ranks"


def test_the_mesh_gives_hsdp_its_shard_and_replicate_groups():
    assert mesh_group(3, 4, 2, "all_gather") == (2, 3)  # shard block
    assert mesh_group(3, 4, 2, "reduce_scatter") == (2, 3)
    assert mesh_group(3, 4, 2, "all_reduce") == (1, 3)  # replicate: stride 2
    assert mesh_group(1, 8, 2, "all_reduce") == (1, 5)  # 2 x 4: shard 4, stride 4
    assert mesh_group(1, 4, None, "all_gather") == (0, 1, 2, 3)
    assert mesh_group(1, 4, 4, "all_reduce") == (0, 1, 2, 3)
    assert mesh_group(1, 4, 3, "all_gather") == (0, 1, 2, 3)  # does not divide: every rank


def test_hsdp_shard_collectives_match_only_their_shard_group():
    """4 ranks, 2 x 2: each step an all_gather in the shard group (size 2) at [100, 300), then
    the replicate all_reduce (size 2) at [400, 900). Rank 3 is 150 ms late for its all_gather:
    rank 2 (its shard peer) waits 150 ms, ranks 0 and 1 (the other shard group) wait nothing.
    Rank 3 then arrives on time at the replicate all_reduce with rank 1."""
    recorded = (("all_gather", 4096, 2), ("all_reduce", 8192, 2))

    def colls(r):
        ag = 250 if r == 3 else 100
        return lambda s: [("all_gather", ag, 300, 2), ("all_reduce", 400, 900, 3)]

    split = wait_split([RankTrace(r, rank_trace(colls(r)), recorded=recorded) for r in range(4)])
    groups = {(i.rank, i.op): i.group for i in split.instances}
    assert groups[(0, "all_gather")] == groups[(1, "all_gather")] == "0,1"
    assert groups[(2, "all_gather")] == groups[(3, "all_gather")] == "2,3"
    assert groups[(0, "all_reduce")] == groups[(2, "all_reduce")] == "0,2"
    assert groups[(1, "all_reduce")] == groups[(3, "all_reduce")] == "1,3"
    waited = {r: sum(s.waited_s for s in by_rank(split, r)) for r in range(4)}
    assert waited == pytest.approx({0: 0, 1: 0, 2: 2 * 150 * MS, 3: 0}, abs=1e-12)
    late = {x.rank: x for x in split.lateness}
    assert late[3].times_last == 2 and late[3].instances == 4  # 2 all_gathers, 2 all_reduces
    assert split.verdict.straggler == 3


def test_overlapping_collectives_on_one_rank_count_for_the_first_started():
    """On both ranks an all_gather on thread 2 [100, 500) and an all_reduce on thread 3
    [300, 800); rank 1 arrives at the all_reduce at 400. Rank 0's overlap [300, 500) is the
    all_gather's, so the all_reduce owns [500, 800): its waited part is nothing before 500 and
    the split at 400 falls outside it; its 300 ms are all transfer. Exposed [100, 800) in all."""

    def colls(ar):
        return lambda s: [("all_gather", 100, 500, 2), ("all_reduce", ar, 800, 3)]

    split = wait_split([RankTrace(0, rank_trace(colls(300))), RankTrace(1, rank_trace(colls(400)))])
    mine = {(i.rank, i.op, i.step): i for i in split.instances}
    ar0 = mine[(0, "all_reduce", 0)]
    assert (ar0.exposed_s, ar0.waited_s, ar0.transfer_s) == pytest.approx((300 * MS, 0, 300 * MS))
    assert mine[(0, "all_gather", 0)].exposed_s == pytest.approx(400 * MS)
    ar1 = mine[(1, "all_reduce", 0)]  # rank 1's all_reduce starts at 400: owns [500, 800)
    assert ar1.exposed_s == pytest.approx(300 * MS)
    for s in split.steps:
        assert s.exposed_s == pytest.approx(700 * MS)
        assert s.waited_s + s.transfer_s == pytest.approx(s.exposed_s)


def test_a_rank_waiting_past_another_collectives_end_splits_inside_its_own_share():
    """Rank 0: all_gather [100, 300) and all_reduce [200, 800) on two threads; rank 1 arrives at
    the all_reduce at 500. Rank 0's all_reduce owns [300, 800): 200 ms waited, 300 transfer."""

    def colls(ar):
        return lambda s: [("all_gather", 100, 300, 2), ("all_reduce", ar, 800, 3)]

    split = wait_split([RankTrace(0, rank_trace(colls(200))), RankTrace(1, rank_trace(colls(500)))])
    ar0 = next(i for i in split.instances if (i.rank, i.op, i.step) == (0, "all_reduce", 0))
    assert (ar0.waited_s, ar0.transfer_s) == pytest.approx((200 * MS, 300 * MS))


def test_the_clocks_uncertainty_bounds_the_split_and_can_leave_the_last_rank_undecided():
    """Rank 1 arrives 200 ms after rank 0. Offsets known within 30 ms each: rank 0's split point
    can move 60 ms either way, so its waited is 200 +- 60 ms; rank 1's own (it has none) could
    grow by 60. Within 150 ms each, the 200 ms margin is not enough to say who was last."""
    traces = [rank_trace(one_all_reduce(400 + 200 * r)) for r in range(2)]
    split = wait_split([RankTrace(r, t, uncertainty_s=30 * MS) for r, t in enumerate(traces)])
    for i in split.instances:
        assert i.uncertainty_s == pytest.approx(60 * MS)
        assert i.uncertainty_s <= i.exposed_s
    assert [s.uncertainty_s for s in split.steps] == pytest.approx([60 * MS] * 4)
    assert split.verdict.straggler == 1 and split.verdict.n_undecided == 0
    wide = wait_split([RankTrace(r, t, uncertainty_s=150 * MS) for r, t in enumerate(traces)])
    assert wide.verdict.n_undecided == 2 and wide.verdict.straggler is None
    assert all(i.last_rank is None for i in wide.instances)
    assert [s.waited_s for s in by_rank(wide, 0)] == pytest.approx([200 * MS] * 2)  # still split
    assert wide.verdict.why == "no straggler: no rank was last by more than the clocks' uncertainty"


def _shift(trace: dict, by_us) -> dict:
    out = copy.deepcopy(trace)
    for e in out["traceEvents"]:
        if "ts" in e:
            e["ts"] += by_us
    return out


def test_clocks_off_within_their_uncertainty_move_the_split_by_at_most_uncertainty_s():
    """Three ranks, arrivals drawn at random; each rank's clock then misread by up to its
    uncertainty (50 ms): every instance's waited time moves by no more than its uncertainty_s."""
    rng = random.Random(7)
    for _ in range(20):
        arrivals = [rng.randrange(100, 700) for _ in range(3)]
        traces = [rank_trace(one_all_reduce(a)) for a in arrivals]
        before = wait_split([RankTrace(r, t, 50 * MS) for r, t in enumerate(traces)])
        errors = [rng.randrange(-50, 51) for _ in range(3)]
        moved = [_shift(t, e * 1000) for t, e in zip(traces, errors, strict=True)]
        after = wait_split([RankTrace(r, t, 50 * MS) for r, t in enumerate(moved)])
        for a, b in zip(before.instances, after.instances, strict=True):
            assert (a.rank, a.step, a.op, a.instance) == (b.rank, b.step, b.op, b.instance)
            assert abs(a.waited_s - b.waited_s) <= a.uncertainty_s + 1e-12
            assert a.uncertainty_s <= 100 * MS + 1e-12


def test_decimal_traces_split_exactly():
    """A trace in Decimals (load_trace's) with a float uncertainty: no Decimal + float error."""
    traces = []
    for r in range(2):
        t = rank_trace(one_all_reduce(400 + 100 * r))
        for e in t["traceEvents"]:
            e["ts"], e["dur"] = Decimal(e["ts"]) + Decimal("0.125"), Decimal(e["dur"])
        traces.append(t)
    split = wait_split([RankTrace(r, t, uncertainty_s=1e-5) for r, t in enumerate(traces)])
    s = by_rank(split, 0)[0]
    # as load_trace reads a file: whole-number ts stay int beside Decimal ones
    for e in traces[1]["traceEvents"]:
        if e["name"] == "gloo:all_reduce":
            e["ts"] = int(e["ts"] - Decimal("0.125"))
    mixed = wait_split([RankTrace(r, t, uncertainty_s=1e-5) for r, t in enumerate(traces)])
    assert by_rank(mixed, 0)[0].waited_s + by_rank(mixed, 0)[0].transfer_s == s.exposed_s
    assert (s.waited_s, s.transfer_s, s.exposed_s) == (100e3 * US, 400e3 * US, 500e3 * US)


# ---- a real GPU trace ------------------------------------------------------------------------

REAL = CORPUS / "traces" / "04_hta_nccl-parser-config_rank0-of-2_a100_float-ts.json.gz"


def test_a_real_gpu_trace_beside_a_later_copy_of_itself():
    """Rank 1 is rank 0's trace 50 us later: every NCCL kernel is matched in the group the
    kernels name (``Process Group Ranks``), rank 1 is last everywhere by 50 us, and on both
    ranks every step's waited + transfer is trace_overlap's exposed figure, with several
    streams of NCCL kernels overlapping."""
    path(REAL)  # skips where the corpus is absent
    trace = trace_04()  # read once per worker, shared with test_trace_overlap; never changed
    late = _shift(trace, Decimal(50))
    split = wait_split([RankTrace(0, trace), RankTrace(1, late)])
    assert split.instances and all(i.matched for i in split.instances)
    assert {i.group for i in split.instances} == {"0,1"}
    assert {i.last_rank for i in split.instances} == {1}
    [found] = trace_overlap(trace)
    want = {s.step: s.figures.exposed_us * US for s in found.steps}
    for r in (0, 1):
        got = {s.step: s for s in by_rank(split, r)}
        assert set(got) == set(want)
        for step, s in got.items():
            assert math.isclose(s.exposed_s, want[step], abs_tol=1e-12)
            assert math.isclose(s.waited_s + s.transfer_s, s.exposed_s, abs_tol=1e-12)
    assert sum(s.waited_s for s in by_rank(split, 1)) == 0
    waited0 = [i.waited_s for i in split.instances if i.rank == 0]
    assert all(w <= 50 * US + 1e-12 for w in waited0) and sum(waited0) > 0
    assert split.lateness[1].times_last == len(waited0)
    assert split.lateness[1].mean_lateness_s == pytest.approx(50 * US)
