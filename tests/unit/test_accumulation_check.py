"""The accumulation check's pure parts: the verdict (measured non-final bytes against the
promise, exactly, op by op) and the probe that turns a strategy's profiled micro-batches into
the non-final bytes per step."""

from __future__ import annotations

from orchestrator.analysis.comm_model import accumulation_verdict
from workloads.collectives import AccumulationProbe, Collective


def test_verdict_ok_when_every_op_matches_and_zero_counts_as_absent():
    assert (
        accumulation_verdict({"all_gather": 8, "reduce_scatter": 0}, {"all_gather": 8}, 2) == "ok"
    )
    assert accumulation_verdict({}, {}, 4) == "ok"


def test_verdict_fails_naming_each_op_both_ways():
    got = accumulation_verdict({"all_reduce": 40, "all_gather": 8}, {"all_gather": 16}, 2)
    assert got == "fail: all_gather sent 8 B, promised 16 B; all_reduce sent 40 B, promised 0 B"


def test_verdict_ignores_ops_outside_the_promise_and_says_when_it_cannot_judge():
    assert accumulation_verdict({"broadcast": 116}, {}, 2, ignore=("broadcast",)) == "ok"
    assert accumulation_verdict({"broadcast": 116}, {}, 2).startswith("fail: broadcast")
    assert accumulation_verdict(None, {}, 2) is None
    assert accumulation_verdict({}, {}, 1).startswith("n/a")
    assert accumulation_verdict({"all_reduce": 4}, None, 2).startswith("unchecked")


class _SelfRecording:
    """A strategy that keeps its own records (as FsdpStrategy): the probe opens none."""

    def __init__(self, records):
        self.collectives = ()
        self._records = records
        self.calls = []

    def profile_start(self):
        self.calls.append("start")

    def micro_step(self, batch, boundary):
        self.calls.append(("micro", boundary))
        return batch

    def optimizer_step(self):
        self.calls.append("step")

    def profile_stop(self):
        self.collectives = tuple(self._records)
        return ("comms",)

    def teardown(self):
        self.calls.append("teardown")


def test_probe_reads_a_self_recording_strategys_records_per_step():
    ga = 3
    records = [
        Collective("all_gather", "fp32", 10, 2, step, micro)
        for step in (0, 1)
        for micro in range(ga)
    ] + [Collective("reduce_scatter", "fp32", 7, 2, step, ga - 1) for step in (0, 1)]
    inner = _SelfRecording(records)
    probe = AccumulationProbe(inner, ga)
    assert probe.non_final_bytes is None and probe.collectives == ()  # passes through
    probe.profile_start()
    for _ in range(2):
        for micro in range(ga):
            assert probe.micro_step(micro, micro == ga - 1) == micro
        probe.optimizer_step()
    assert probe.profile_stop() == ("comms",)
    assert probe.non_final_bytes == {"all_gather": 20}  # micro-batches 0 and 1, per step
    probe.teardown()
    assert inner.calls[0] == "start" and inner.calls[-1] == "teardown"


def test_probe_records_for_a_strategy_without_its_own_recorder():
    class Plain(_SelfRecording):
        def __getattribute__(self, name):
            if name == "collectives":
                raise AttributeError(name)
            return object.__getattribute__(self, name)

    probe = AccumulationProbe(Plain([]), 2)
    probe.profile_start()
    probe.micro_step(0, False)
    probe.micro_step(1, True)
    probe.optimizer_step()
    probe.profile_stop()
    assert probe.non_final_bytes == {}  # no collective issued: nothing sent
