"""A planted straggler, named: ``sweeps/straggler-emulated.yaml`` narrowed to DDP over the shared
emulated cluster's unshaped link (root only), once clean and once with rank 1 planted slow (its
``fast_planted`` link: ``LINKSWEEP_INJECT_FAULT`` ``1:*:delay:SECONDS``, rank 1 idles
before every step, timed and traced). Two runs, one repeat, spread over 2 nodes.

What it checks, from the database and the traces beside it: both runs ok; the planted rank's
trace holds one ``planted_delay`` span per traced step and no other rank's does; every rank's
measured clock offset to rank 0 lies within its uncertainty of the true 0 (the nodes share one
kernel) and each run's merged trace has a process per rank; waited + transfer = exposed per rank
and traced step; rank 0, which the plant leaves alone, waits about the planted delay longer per
traced step than in the clean run; the straggler verdict names rank 1 in the planted run and no
rank in the clean one.

Marked ``alone``: it compares the two runs' waited times, taken at different moments. The
full sweep (DDP, ZeRO-3, FSDP2 on two links, clean and planted) runs outside the suite; its
table is docs/measurements/2026-12-07-straggler-emulated.md.
"""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest
import yaml

from orchestrator.store import read_query
from tests.integration.test_strategies_emulated import run_on
from workloads.train import parse_fault

REPO = Path(__file__).resolve().parents[2]
SWEEP = REPO / "sweeps" / "straggler-emulated.yaml"
PLANTED = "fast_planted"


PLANTED_DELAY_S = 0.3
"""The copy's planted delay, three times the file's 0.1 s: the verdict asks a straggler to be
late by 30 ms beyond every other rank in three quarters of the traced steps, which 0.1 s
cleared by as little as 3 ms on 2 shared cores (trace_wait.MIN_STEADY_S), and once, in a
whole-suite run, did not (rank 1 unnamed, score 0.29). The file's delay is what its measured
table used; the copy asks whether the verdict names a rank that is plainly late."""


def narrowed(doc: dict, others: list[str]) -> dict:
    """The sweep file cut to its 2-run copy: DDP over ``fast`` and ``fast_planted`` (planted
    :data:`PLANTED_DELAY_S`), no link microbenchmark (nothing here reads the link model); every
    other key as the file has it."""
    doc = dict(doc)
    fault = doc["links"][PLANTED]["LINKSWEEP_INJECT_FAULT"]
    planted = {**doc["links"][PLANTED], "LINKSWEEP_INJECT_FAULT": fault.rsplit(":", 1)[0] + f":{PLANTED_DELAY_S}"}  # fmt: skip
    doc["links"] = {**doc["links"], PLANTED: planted}
    doc["grid"] = {
        **doc["grid"],
        "strategy": ["ddp"],
        "link": ["fast", PLANTED],
        "linkbench": False,
    }
    return {**doc, "repeats": 1, "exclude_nodes": others}


def rows(db: Path, sql: str) -> list[dict]:
    cols, values = read_query(str(db), sql)
    return [dict(zip(cols, v, strict=True)) for v in values]


def planted_spans(path: str) -> list[dict]:
    """The ``planted_delay`` spans of one rank's trace file."""
    with open(path, "rb") as f:
        events = json.loads(gzip.decompress(f.read()))["traceEvents"]
    return [e for e in events if e.get("name") == "planted_delay"]


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.alone  # rank 0's waited time in two runs taken at different moments
def test_a_planted_slow_rank_is_named_and_a_clean_run_has_none(emulated_cluster, tmp_path):
    doc = narrowed(yaml.safe_load(SWEEP.read_text()), emulated_cluster.node_ips()[2:])
    fault = parse_fault(doc["links"][PLANTED]["LINKSWEEP_INJECT_FAULT"])
    assert (fault.rank, fault.step, fault.kind) == (1, None, "delay")
    traced_steps = doc["trace"]["steps"]
    _, db = run_on(emulated_cluster.address, doc, tmp_path / "straggler")

    runs = {
        r["link"]: r
        for r in rows(
            db,
            "SELECT run_id, link, status, error, straggler_rank, straggler_why, merged_trace_path "
            "FROM runs",
        )
    }
    assert sorted(runs) == ["fast", PLANTED]
    for r in runs.values():
        assert r["status"] == "ok", r["error"]
    run_of = {r["run_id"]: link for link, r in runs.items()}

    files = rows(db, "SELECT run_id, rank, path FROM traces ORDER BY run_id, rank")
    spans = {(run_of[f["run_id"]], f["rank"]): planted_spans(f["path"]) for f in files}
    assert len(spans[(PLANTED, 1)]) == traced_steps
    assert all(s["dur"] >= fault.delay_s * 1e6 for s in spans[(PLANTED, 1)])
    assert spans[(PLANTED, 0)] == spans[("fast", 0)] == spans[("fast", 1)] == []

    # One clock: the nodes are namespaces of one kernel, so the true offset is 0 and every
    # measured one lies within its uncertainty; each run's merged trace has a process per rank.
    clocks = rows(db, "SELECT rank, clock_offset_ns, clock_uncertainty_ns FROM traces")
    assert len(clocks) == 2 * 2
    for c in clocks:
        if c["rank"] == 0:
            assert (c["clock_offset_ns"], c["clock_uncertainty_ns"]) == (0, 0), c
        else:
            assert c["clock_uncertainty_ns"] is not None, c
            assert abs(c["clock_offset_ns"]) <= c["clock_uncertainty_ns"], c
    for r in runs.values():
        with gzip.open(r["merged_trace_path"]) as f:
            merged = json.load(f)["traceEvents"]
        names = {
            e["args"]["name"]
            for e in merged
            if e.get("ph") == "M" and e.get("name") == "process_name"
        }
        assert {"rank 0", "rank 1"} <= names, sorted(names)

    # Every rank's exposed communication splits into waited and transfer, adding up.
    split = rows(db, "SELECT * FROM trace_wait WHERE step IS NOT NULL ORDER BY run_id, rank, step")
    assert len(split) == 2 * 2 * traced_steps  # runs x ranks x traced steps
    for s in split:
        assert s["waited_s"] >= 0 and s["transfer_s"] >= 0, s
        assert s["waited_s"] + s["transfer_s"] == pytest.approx(s["exposed_s"], abs=1e-6), s

    # Rank 0, which the plant leaves alone, waits for the planted rank: its waited time per
    # traced step grows by about the planted delay.
    waited = {
        link: statistics.median(
            s["waited_s"] for s in split if s["rank"] == 0 and run_of[s["run_id"]] == link
        )
        for link in runs
    }
    grown_s = waited[PLANTED] - waited["fast"]
    assert 0.5 * fault.delay_s < grown_s < 1.5 * fault.delay_s, waited

    # The verdict: the planted rank named in the planted run, no rank in the clean one.
    late = rows(db, "SELECT run_id, rank, score, straggler FROM trace_lateness ORDER BY rank")
    named = {
        link: [x["rank"] for x in late if x["straggler"] and run_of[x["run_id"]] == link]
        for link in runs
    }
    assert named == {"fast": [], PLANTED: [1]}, late
    assert runs[PLANTED]["straggler_rank"] == 1, runs[PLANTED]["straggler_why"]
    assert runs["fast"]["straggler_rank"] is None, runs["fast"]["straggler_why"]
    assert runs["fast"]["straggler_why"], runs["fast"]  # "no straggler" is said, not left blank
