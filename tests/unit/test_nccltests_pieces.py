"""The pieces of the nccl-tests parsers on their own: one pass over the text collecting the
tables and the facts around them (``_scan``), and the op of a -J file (``_json_op``)."""

from __future__ import annotations

import pytest

from orchestrator.compare.nccltests import NcclTestsError, _scan
from orchestrator.compare.nccltests_json import _json_op

_TEXT = """\
# nccl-tests version 2.13.9 nccl-headers=21903 nccl-library=21903
#  Rank  0 Group  0 Pid   1234 on     node-a device  0 [0x07] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   1235 on     node-b device  0 [0x07] NVIDIA H100 80GB HBM3
# Collective test starting: all_gather_perf
#
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
node-a:1234 [0] NCCL INFO comm 0x1 rank 0 nranks 2 - Init COMPLETE
        1024           128     float    none      -1    10.00    0.10    0.05      0    10.00    0.10    0.05      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.05
"""


def test_one_pass_collects_the_table_and_the_facts_around_it():
    scan = _scan(_TEXT)
    (header,) = scan.headers
    assert (header.op, header.op_source) == ("all_gather_perf", "Collective test starting")
    (row,) = scan.rows
    assert row.header is header and row.line == 9
    assert row.keys == {
        "size": "1024",
        "count": "128",
        "type": "float",
        "redop": "none",
        "root": "-1",
    }
    assert row.out_of_place == row.in_place == ["10.00", "0.10", "0.05", "0"]
    assert scan.ranks == {
        0: ("node-a", "NVIDIA H100 80GB HBM3"),
        1: ("node-b", "NVIDIA H100 80GB HBM3"),
    }
    assert scan.ranks_complete
    assert (scan.avg_busbw_gbps, scan.out_of_bounds) == (0.05, 0)
    assert (scan.nccl_tests_version, scan.headless) == ("2.13.9", False)


def test_banners_with_a_gap_do_not_count_the_ranks():
    scan = _scan(_TEXT.replace("Rank  1 ", "Rank  3 "))
    assert not scan.ranks_complete


def test_a_header_without_rows_names_its_line():
    with pytest.raises(NcclTestsError, match="line 6: a table header but no rows"):
        _scan("\n".join(_TEXT.splitlines()[:8]))


@pytest.mark.parametrize(
    ("args", "op", "expected"),
    [
        (["/opt/nccl-tests/build/all_reduce_perf", "-b", "8"], None, ("all_reduce", "json args")),
        (["./all_reduce_perf"], "all_reduce_perf", ("all_reduce", "json args")),
        ([], "alltoall", ("all_to_all", "--op")),
        (["python"], "broadcast", ("broadcast", "--op")),
    ],
)
def test_the_json_op_comes_from_argv_else_from_the_option(args, op, expected):
    assert _json_op(args, op) == expected


@pytest.mark.parametrize(
    ("args", "op", "message"),
    [
        (["./all_gather_perf"], "all_reduce", "ran ./all_gather_perf; --op says all_reduce"),
        (["python"], None, "name no \\*_perf binary; pass --op"),
    ],
)
def test_the_json_op_is_refused_where_argv_and_option_disagree_or_both_are_silent(
    args, op, message
):
    with pytest.raises(NcclTestsError, match=message):
        _json_op(args, op)
