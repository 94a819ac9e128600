"""orchestrator/compare/nccltests.py against the corpus (shared/data/corpus/nccltests): twelve real
nccl-tests outputs and what a correct reader gets from each (``expected.json``, SOURCES.md), read
without ``--op``: each file's collective comes from the file.

Conventions that differ from expected.json without disagreeing: linksweep stores a redop of
``none`` and a root of ``-1`` (nccl-tests' "does not apply") as None, and names alltoall
``all_to_all`` (workloads.contract.CANONICAL_OPS).

Where they disagree, the test asserts what is right and says why by the case (BUS_FACTOR_RANKS):
expected.json counts ranks only from ``# nThread``/Rank lines and gives null without them; the
parser reads the world size from busbw/algbw, which nccl-tests computed from it
(src/*.cu ``*GetBw``), and every row is then checked against that factor here."""

from __future__ import annotations

import json

import pytest

from orchestrator.analysis.comm_model import busbw_factor
from orchestrator.compare.nccltests_json import parse
from tests.captures import CORPUS, needs, read
from workloads.contract import canonical_op

DATA = CORPUS / "nccltests"
pytestmark = needs(DATA)
NAMES = [f"{i:02d}" for i in range(1, 13)]

BUS_FACTOR_RANKS = {
    # expected.json: n_ranks null (no nThread line). The AWS Batch README names no node count;
    # busbw/algbw 1.75 on every large row is all_reduce's 2(n-1)/n at 8 ranks.
    "02": 8,
    # expected.json: null. "2x p4de.24xlarge" (8 GPUs each): 16, as busbw/algbw 1.875 says.
    "03": 16,
    # expected.json: null. "4x DGX A100 nodes": 32, busbw/algbw 1.9375.
    "04": 32,
    # expected.json: null. Only 'Rank 127' was kept, so the banners cannot count the ranks
    # (reading them gave 1 before); 32 GB200 nodes x 4 GPUs = 128, busbw/algbw 1.984.
    "11": 128,
    # expected.json: null (no header at all). The NCCL INFO lines say nranks 8; so does busbw.
    "12": 8,
}


def _expected() -> dict[str, tuple[str, dict]]:
    table = json.loads(read(DATA / "expected.json"))
    return {name[:2]: (name, value) for name, value in table.items()}


@pytest.mark.parametrize("key", NAMES)
def test_corpus_file_parses_as_expected_without_op(key):
    name, exp = _expected()[key]
    run = parse(read(DATA / name))
    assert run.ops == (canonical_op(exp["op"]),)
    assert run.op_source != "--op"
    assert run.avg_busbw_gbps == exp["avg_busbw_gbps"]
    if key in BUS_FACTOR_RANKS:
        assert exp["n_ranks"] is None
        assert (run.world_size, run.world_size_source) == (BUS_FACTOR_RANKS[key], "busbw/algbw")
    else:
        assert run.world_size == exp["n_ranks"]
    oop = [r for r in run.rows if not r.in_place]
    inp = [r for r in run.rows if r.in_place]
    assert len(oop) == len(inp) == len(exp["rows"]) == len(exp["wrong_raw"])
    for o, i, e, wrong in zip(oop, inp, exp["rows"], exp["wrong_raw"], strict=True):
        got = {
            "size_bytes": o.msg_bytes,
            "count": o.count,
            "type": o.dtype,
            "redop": o.redop,
            "root": o.root,
            "oop_time_us": o.time_us,
            "oop_algbw_gbps": o.algbw_gbps,
            "oop_busbw_gbps": o.busbw_gbps,
            "ip_time_us": i.time_us,
            "ip_algbw_gbps": i.algbw_gbps,
            "ip_busbw_gbps": i.busbw_gbps,
        }
        want = {
            **e,
            "redop": None if e["redop"] == "none" else e["redop"],
            "root": None if e["root"] == -1 else e["root"],
        }
        assert got == want, f"line {o.line}"
        assert (o.line, o.msg_bytes, i.in_place) == (i.line, i.msg_bytes, True)
        for row, cell in zip((o, i), wrong, strict=True):
            if run.layout == "#wrong":
                assert row.wrong == (None if cell == "N/A" else int(cell)), f"line {row.line}"
            else:  # before 2.13: the largest deviation, not a count
                assert row.max_error == (None if cell == "N/A" else float(cell)), row.line
    for r in run.rows:  # every printed busbw is the op's factor at the world size read
        if r.algbw_gbps and r.algbw_gbps >= 1 and r.busbw_gbps is not None:
            factor = busbw_factor(r.op, run.world_size)
            assert r.busbw_gbps == pytest.approx(r.algbw_gbps * factor, abs=0.015, rel=2e-4)


def test_header_cut_off_reads_as_the_2_13_layout_and_says_so():
    name, _ = _expected()["12"]
    run = parse(read(DATA / name))
    assert run.layout == "#wrong" and run.notes == ("no column header: read as the 2.13+ layout",)


def test_concluded_line_after_the_table_names_its_op():
    name, _ = _expected()["11"]
    run = parse(read(DATA / name))
    assert run.op_source == "Collective test starting" and run.ops == ("all_reduce",)
