"""The collective recorder's pure side: which dispatcher ops count, their message bytes in
nccl-tests' convention, and bytes per micro-batch, per step and in the non-final micro-batches.
No processes: the dispatcher's arguments are stood in by small objects with the same methods."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from workloads.collectives import (
    C10D_OPS,
    FUNCTIONAL_OPS,
    Collective,
    CollectiveRecorder,
    bytes_by_micro_batch,
    bytes_by_step,
    comm_records,
    mean_by_op,
    message,
    non_final_bytes_by_step,
)
from workloads.contract import CANONICAL_OPS, CommRecord


@dataclass
class FakeTensor:
    n: int
    size_of: int = 4
    dtype: str = "torch.float32"

    def numel(self) -> int:
        return self.n

    def element_size(self) -> int:
        return self.size_of


@dataclass
class FakeGroup:
    ranks: int

    def size(self) -> int:
        return self.ranks


class FakeOp:
    """What the dispatcher hands ``__torch_dispatch__``: an op with a namespace and a name."""

    def __init__(self, namespace: str, name: str):
        self.namespace, self._opname = namespace, name
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return ("out", None)


def rec(op, b, step, micro, dtype="fp32", n=2):
    return Collective(op, dtype, b, n, step, micro)


def test_every_listened_op_maps_to_a_canonical_collective():
    assert {op for op, _, _ in C10D_OPS.values()} <= set(CANONICAL_OPS)
    assert {op for op, *_ in FUNCTIONAL_OPS.values()} <= set(CANONICAL_OPS)


def test_message_sums_bytes_and_names_one_dtype_or_mixed():
    assert message([FakeTensor(10), FakeTensor(6)]) == (64, "fp32")
    assert message([FakeTensor(3, 2, "torch.bfloat16")]) == (6, "bf16")
    assert message([FakeTensor(1), FakeTensor(1, 2, "torch.bfloat16")]) == (6, "mixed")


def test_all_gather_counts_the_gathered_output_and_reduce_scatter_the_input():
    """nccl-tests' msg_bytes: the full buffer on both, whichever argument holds it."""
    recorder = CollectiveRecorder()
    recorder.at(3, 1)
    out, shard, group = FakeTensor(8), FakeTensor(4), FakeGroup(2)
    gather = FakeOp("c10d", "_allgather_base_")
    assert recorder._issue(gather, (out, shard, group, True, -1), {}) == ("out", None)
    scatter = FakeOp("c10d", "_reduce_scatter_base_")
    recorder._issue(scatter, (FakeTensor(2), FakeTensor(4), group, "avg", True, -1), {})
    reduce = FakeOp("c10d", "allreduce_")
    recorder._issue(reduce, ([FakeTensor(5, 2, "torch.bfloat16")], FakeGroup(4), "sum"), {})
    listed = FakeOp("c10d", "allgather_")
    recorder._issue(listed, ([[FakeTensor(4), FakeTensor(4)]], [shard], group), {})
    assert recorder.records == [
        Collective("all_gather", "fp32", 32, 2, 3, 1),
        Collective("reduce_scatter", "fp32", 16, 2, 3, 1),
        Collective("all_reduce", "bf16", 10, 4, 3, 1),
        Collective("all_gather", "fp32", 32, 2, 3, 1),
    ]
    assert gather.calls == scatter.calls == reduce.calls == listed.calls == 1


def test_functional_all_gather_is_scaled_to_the_gathered_size():
    recorder = CollectiveRecorder()
    op = FakeOp("_c10d_functional", "all_gather_into_tensor")
    recorder._issue(op, (FakeTensor(3), 4, "group0"), {})
    assert recorder.records == [Collective("all_gather", "fp32", 48, 4, 0, None)]


def test_other_ops_pass_through_unrecorded():
    recorder = CollectiveRecorder()
    for op in (FakeOp("aten", "add"), FakeOp("c10d", "barrier"), FakeOp("fsdp", "chunk_cat")):
        recorder._issue(op, (), {})
        assert op.calls == 1
    assert recorder.records == []


RECORDS = [
    # step 0, grad_accum 3: micro-batches 0 and 1 gather only, 2 also reduces
    rec("all_gather", 100, 0, 0),
    rec("all_gather", 100, 0, 1),
    rec("all_gather", 100, 0, 2),
    rec("reduce_scatter", 80, 0, 2),
    rec("all_reduce", 4, 0, None),  # a gradient norm in the optimizer step
    # step 1: the planted bug: micro-batch 1 reduce-scatters too
    rec("all_gather", 100, 1, 0),
    rec("all_gather", 100, 1, 1),
    rec("reduce_scatter", 80, 1, 1),
    rec("all_gather", 100, 1, 2),
    rec("reduce_scatter", 80, 1, 2),
]


def test_bytes_by_micro_batch_and_by_step():
    by_micro = bytes_by_micro_batch(RECORDS)
    assert by_micro[(0, 2)] == {"all_gather": 100, "reduce_scatter": 80}
    assert by_micro[(0, None)] == {"all_reduce": 4}
    assert by_micro[(1, 1)] == {"all_gather": 100, "reduce_scatter": 80}
    assert bytes_by_step(RECORDS) == {
        0: {"all_gather": 300, "reduce_scatter": 80, "all_reduce": 4},
        1: {"all_gather": 300, "reduce_scatter": 160},
    }
    assert bytes_by_step(RECORDS, min_bytes=64)[0] == {"all_gather": 300, "reduce_scatter": 80}


def test_non_final_bytes_show_what_accumulation_did_not_skip():
    assert non_final_bytes_by_step(RECORDS, grad_accum=3) == {
        0: {"all_gather": 200},
        1: {"all_gather": 200, "reduce_scatter": 80},
    }
    # grad_accum 1: no non-final micro-batch; every step still has its (empty) entry
    assert non_final_bytes_by_step(RECORDS, grad_accum=1) == {0: {}, 1: {}}
    with pytest.raises(ValueError, match="grad_accum"):
        non_final_bytes_by_step(RECORDS, grad_accum=0)


def test_mean_by_op_averages_over_steps_counting_a_missing_op_as_zero():
    assert mean_by_op(bytes_by_step(RECORDS)) == {
        "all_gather": 300,
        "all_reduce": 2,
        "reduce_scatter": 120,
    }
    assert mean_by_op({}) == {}


def test_comm_records_group_by_op_size_and_dtype():
    records = [
        Collective("all_gather", "bf16", 10, 2, 0, 0, 0.5),
        Collective("all_gather", "bf16", 10, 2, 0, 1, 0.25),
        Collective("all_gather", "fp32", 10, 2, 0, 1, 1.0),
    ]
    assert comm_records(records) == (
        CommRecord("all_gather", 10, 2, 0.75, "bf16", group_size=2),
        CommRecord("all_gather", 10, 1, 1.0, "fp32", group_size=2),
    )
