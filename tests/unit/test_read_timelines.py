"""The report's timelines read each rank's copy on rank 0's clock where there is one, and say so;
a rank without one (or whose copy cannot be read) is drawn from its own trace, on its own clock."""

from __future__ import annotations

import gzip
import json

from orchestrator.report.labels import VARIANT_KEY
from orchestrator.report.reading import read_timelines
from tests.unit.test_trace_overlap import cpu, step_span


def _write(path, shift_us: float) -> str:
    """One CPU step [0, 100) (+ shift): compute [0, 40), a gloo all_reduce [40, 90)."""
    events = [
        step_span(0, 0, 100),
        cpu("aten::mm", 0, 40),
        cpu("gloo:all_reduce", 40, 50, tid=2, cat="user_annotation"),
    ]
    for e in events:
        e["ts"] += shift_us
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    return str(path)


def test_rebased_copies_first_then_the_ranks_own_trace(tmp_path):
    base = {k: None for k in VARIANT_KEY} | {"strategy": "ddp", "grad_accum": 1, "link": "slow"}
    rows = [
        base | {"run_id": "a", "rank": 0, "steps": 1, "path": _write(tmp_path / "r0.json.gz", 0),
                "rebased_path": _write(tmp_path / "r0-rebased.json.gz", 1000)},
        base | {"run_id": "a", "rank": 1, "steps": 1, "path": _write(tmp_path / "r1.json.gz", 0),
                "rebased_path": str(tmp_path / "absent.json.gz")},
    ]  # fmt: skip
    got = {t["rank"]: t for t in read_timelines(rows)}
    assert got[0]["common_clock"] and got[0]["window"] == (1000, 1100)
    assert not got[1]["common_clock"] and got[1]["window"] == (0, 100)
    assert got[1]["comm"] == [(40, 90)]
