"""The fault hook of the measurement loop (``LINKSWEEP_INJECT_FAULT``, workloads/train.py): its
forms, its refusals (each names the allowed forms), and where each kind fires. The ``delay``
kind plants a slow rank for the straggler measurement: the rank idles for its seconds before the
step's first micro-step, every step with ``*``."""

from __future__ import annotations

import json
import time

import pytest
import torch

from workloads.train import FAULT_FORMS, Fault, _maybe_fault, parse_fault


@pytest.mark.parametrize(
    ("value", "fault"),
    [
        ("1:1", Fault(1, 1, "raise")),
        ("0:3:hang", Fault(0, 3, "hang")),
        ("1:1:kill", Fault(1, 1, "kill")),
        ("1:2:delay:0.25", Fault(1, 2, "delay", 0.25)),
        ("1:*:delay:0.05", Fault(1, None, "delay", 0.05)),
        ("3:*:delay:2", Fault(3, None, "delay", 2.0)),
    ],
)
def test_each_form_parses_to_its_fault(value, fault):
    assert parse_fault(value) == fault


def test_unset_or_empty_is_no_fault():
    assert parse_fault(None) is None
    assert parse_fault("") is None


@pytest.mark.parametrize(
    "value",
    [
        "1",  # no step
        "1:1:explode",  # unknown kind
        "1:1:delay",  # delay without its seconds
        "1:1:hang:5",  # seconds are for delay only
        "1:*",  # every step is for delay only
        "1:*:raise",
        "1:1:delay:0",  # a zero delay plants nothing
        "1:1:delay:-0.1",
        "1:1:delay:inf",
        "1:1:delay:nan",
        "1:1:delay:soon",
        "-1:1",
        "1:-2",
        "one:1",
        "1:1.5",
        "1:1:delay:0.1:extra",
    ],
)
def test_a_bad_value_is_refused_naming_itself_and_the_allowed_forms(value):
    with pytest.raises(ValueError) as err:
        parse_fault(value)
    text = str(err.value)
    assert f"LINKSWEEP_INJECT_FAULT={value!r}" in text
    assert FAULT_FORMS in text
    assert "RANK:*:delay:SECONDS" in text and "RANK:STEP[:raise|hang|kill]" in text


def test_raise_fires_on_its_rank_at_its_step_only():
    fault = parse_fault("1:2")
    _maybe_fault(fault, 0, 2)  # another rank
    _maybe_fault(fault, 1, 1)  # another step
    _maybe_fault(None, 1, 2)
    with pytest.raises(RuntimeError, match="injected fault on rank 1 at step 2"):
        _maybe_fault(fault, 1, 2)


def test_a_delay_idles_for_its_seconds_on_its_rank_at_every_step():
    fault = parse_fault("1:*:delay:0.05")
    for step in (0, 7):
        t0, cpu0 = time.perf_counter(), time.thread_time()
        _maybe_fault(fault, 1, step)
        wall_s, cpu_s = time.perf_counter() - t0, time.thread_time() - cpu0
        assert wall_s >= 0.05
        # Idle, not busy: the emulated nodes share this machine's cores, and a burning rank
        # would take CPU from its peer (workloads/train.py). Less than half of it spent on CPU.
        assert cpu_s < 0.05 / 2, (wall_s, cpu_s)
    t0 = time.perf_counter()
    _maybe_fault(fault, 0, 0)  # rank 0 is not delayed
    assert time.perf_counter() - t0 < 0.05


def test_a_delay_at_one_step_fires_there_only():
    fault = parse_fault("0:3:delay:0.05")
    t0 = time.perf_counter()
    _maybe_fault(fault, 0, 2)
    _maybe_fault(fault, 0, 4)
    assert time.perf_counter() - t0 < 0.05
    t0 = time.perf_counter()
    _maybe_fault(fault, 0, 3)
    assert time.perf_counter() - t0 >= 0.05


def test_a_delay_shows_in_a_trace_as_an_annotation_not_an_op(tmp_path):
    """In a profiler trace the burnt time is a ``planted_delay`` user annotation, so a reader
    sees where the rank was late, and the overlap rules (which count ``cpu_op`` events only as
    compute) see no compute there."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _maybe_fault(parse_fault("0:*:delay:0.02"), 0, 5)
        torch.ones(4).sum()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    planted = [e for e in events if e.get("name") == "planted_delay"]
    assert len(planted) == 1
    assert planted[0]["cat"] == "user_annotation"
    assert planted[0]["dur"] >= 0.02 * 1e6
