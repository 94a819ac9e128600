"""Long sweeps, the pure parts: what a resume still runs, spec differences, the dead-driver
rule, the spool's file format, the flight-recorder env. No Ray, no files, no database."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from orchestrator.analysis.stats import VARIANT_KEY
from orchestrator.store import liveness, spool
from orchestrator.sweep.planner import fresh_slots, plan_runs, run_env, run_id_for
from orchestrator.sweep.resume import (
    ResumeError,
    attempt_run_id,
    remaining_slots,
    spec_differences,
)
from orchestrator.sweep.spec import parse_spec

SID = "20260101-000000-abcdef"


def spec(**overrides):
    body = {
        "name": "s",
        "repeats": 2,
        "links": {"a": {}, "b": {}},
        "grid": {"strategy": ["ddp"], "grad_accum": [1, 2]},
    }
    body.update(overrides)
    return parse_spec(body)


def stored_row(p, status="ok", attempt=1, superseded_by=None):
    v = p.variant
    return {
        "run_id": attempt_run_id(SID, p.seq, attempt),
        "seq": p.seq,
        "repeat": p.repeat,
        **{k: getattr(v, k) for k in VARIANT_KEY},  # the columns SWEEP_RUN_SLOTS selects
        "status": status,
        "attempt": attempt,
        "superseded_by": superseded_by,
    }


def test_nothing_stored_resumes_everything_in_plan_order():
    planned = plan_runs(spec())
    slots = remaining_slots(SID, planned, [], retry_failed=False)
    assert [s.planned for s in slots] == planned
    assert slots == fresh_slots(SID, planned)


def test_only_missing_pairs_run_in_the_original_interleaved_order():
    planned = plan_runs(spec())  # 4 variants x 2 repeats = 8, repeat 1 first
    assert len(planned) == 8
    stored = [stored_row(planned[i]) for i in (0, 1, 4)]  # two of repeat 1, one of repeat 2
    stored.append(stored_row(planned[2], status="failed"))
    slots = remaining_slots(SID, planned, stored, retry_failed=False)
    assert [s.planned.seq for s in slots] == [4, 6, 7, 8]
    assert [(s.planned.repeat, s.planned.variant) for s in slots] == [
        (planned[i].repeat, planned[i].variant) for i in (3, 5, 6, 7)
    ]
    assert all(s.attempt == 1 and s.supersedes is None for s in slots)
    assert [s.run_id for s in slots] == [run_id_for(SID, q) for q in (4, 6, 7, 8)]


def test_retry_failed_reruns_failed_runs_as_a_new_attempt_that_supersedes():
    planned = plan_runs(spec())
    stored = [stored_row(p) for p in planned]
    stored[2] = stored_row(planned[2], status="failed")
    slots = remaining_slots(SID, planned, stored, retry_failed=True)
    assert len(slots) == 1
    (slot,) = slots
    assert slot.planned == planned[2]
    assert slot.attempt == 2 and slot.supersedes == run_id_for(SID, 3)
    assert slot.run_id == f"{run_id_for(SID, 3)}-a2" != slot.supersedes
    # after that retry failed too, a third attempt supersedes the second, not the first
    stored[2] = stored_row(planned[2], status="failed", superseded_by=slot.run_id)
    stored.append(stored_row(planned[2], status="failed", attempt=2))
    (third,) = remaining_slots(SID, planned, stored, retry_failed=True)
    assert third.attempt == 3 and third.supersedes == slot.run_id
    # once a retry succeeded there is nothing left to retry
    stored[-1] = stored_row(planned[2], status="ok", attempt=2)
    assert remaining_slots(SID, planned, stored, retry_failed=True) == []


def test_a_stored_run_that_disagrees_with_the_plan_is_refused():
    planned = plan_runs(spec())
    wrong = stored_row(planned[0]) | {"link": "b"}
    with pytest.raises(ResumeError, match="seq 1"):
        remaining_slots(SID, planned, [wrong], retry_failed=False)
    overlap_off = stored_row(planned[0]) | {"overlap_comm": "false"}  # planned: default
    with pytest.raises(ResumeError, match="overlap_comm"):
        remaining_slots(SID, planned, [overlap_off], retry_failed=False)
    beyond = stored_row(planned[0]) | {"seq": 99}
    with pytest.raises(ResumeError, match=r"\[99\]"):
        remaining_slots(SID, planned, [beyond], retry_failed=False)


def test_spec_differences_name_nested_fields():
    a = spec().to_json_dict()
    b = spec(steps=7, grid={"strategy": ["ddp"], "grad_accum": [1, 4]}).to_json_dict()
    assert spec_differences(a, b) == ["grid.grad_accum", "steps"]
    assert spec_differences(a, spec().to_json_dict()) == []


NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.timezone.utc)


def sweep(**kw):
    row = {
        "status": "running",
        "driver_host": "h1",
        "driver_pid": 42,
        "heartbeat_at": NOW - dt.timedelta(seconds=5),
        "started_at": NOW - dt.timedelta(hours=3),
    }
    row.update(kw)
    return row


@pytest.mark.parametrize(
    ("row", "host", "alive", "gone"),
    [
        (sweep(), "h1", True, False),  # our host, pid alive, fresh heartbeat
        (sweep(), "h1", False, True),  # our host, pid gone
        (sweep(), "h2", False, False),  # another host: the pid says nothing there
        (sweep(heartbeat_at=NOW - dt.timedelta(seconds=600)), "h2", True, True),  # stale
        (sweep(status="ok"), "h1", False, False),  # finished sweeps are what they say
        (sweep(status="interrupted"), "h1", False, False),
        (sweep(driver_pid=None, heartbeat_at=None), "h1", False, True),  # v2 row: start time
    ],
)
def test_driver_gone(row, host, alive, gone):
    assert liveness.driver_gone(row, host, NOW, alive=lambda pid: alive) is gone


def test_spool_payload_round_trips_datetimes_and_json_values():
    when = dt.datetime(2026, 1, 1, 1, 2, 3, 456789, tzinfo=dt.timezone.utc)
    p = spool.Payload(
        "r1",
        {"runs": [{"run_id": "r1", "started_at": when, "variant": {"a": 1}, "x": 1.5}]},
        [{"table": "runs", "key": {"run_id": "r0"}, "values": {"superseded_by": "r1"}}],
    )
    back = spool.decode(spool.encode(p))
    assert back == p
    assert back.tables["runs"][0]["started_at"] == when
    with pytest.raises(ValueError, match="format"):
        spool.decode(b'{"format": 99, "run_id": "r", "tables": {}}')


def test_run_env_arms_the_nccl_flight_recorder_and_the_link_env_wins():
    s = spec(links={"a": {}, "b": {"TORCH_NCCL_TRACE_BUFFER_SIZE": "10"}})
    env = run_env(s, "a", "RID", 1)
    assert env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"].endswith("RID-")
    assert run_env(s, "b", "RID", 1)["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "10"


def test_slots_are_frozen():
    (slot, *_) = fresh_slots(SID, plan_runs(spec()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        slot.run_id = "x"


def test_spool_writes_numpy_scalars_as_plain_numbers():
    import numpy as np

    p = spool.Payload("r", {"runs": [{"n": np.int64(3), "x": np.float32(0.5), "b": np.bool_(1)}]})
    assert spool.decode(spool.encode(p)).tables["runs"][0] == {"n": 3, "x": 0.5, "b": True}
