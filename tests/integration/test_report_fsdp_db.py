"""FSDP2 beside DDP and ZeRO-3 in a stored sweep, read back by ``linksweep report`` and by the
lines ``linksweep run`` ends with. Without Ray: the planner plans a sweep of DDP (grad_sync each
and last), ZeRO-3 and FSDP2 (each and last, resharding or not) x grad_accum 1 and 8 x two links,
every planned run is stored with bytes per step and a step time planted from them
(``compute + bytes / link bandwidth``), and the real statistics read it back. One sweep plants
an accumulation-check failure (FSDP2 resharding with sync last reduce-scatters on non-final
micro-batches); the other passes everywhere.
"""

from __future__ import annotations

import io

import pytest

from orchestrator.analysis.headline import build_headline
from orchestrator.cli import main
from orchestrator.report.accumulation import accumulation_lines
from orchestrator.store import Q, Reader, Store
from orchestrator.sweep.execute import refresh_all_stats
from orchestrator.sweep.planner import plan_runs
from orchestrator.sweep.spec import parse_spec
from orchestrator.ui import print_headline

PARAM_B = 0.5e9
LINK_GBPS = {"fast": 10.0, "slow": 1.0}
SPEC = {
    "name": "fsdp-report",
    "model": "gpt2-tiny",
    "world_size": 2,
    "repeats": 2,
    "links": {name: {"X_LINK": name} for name in LINK_GBPS},
    "grid": {
        "strategy": ["ddp", "zero3", "fsdp"],
        "grad_accum": [1, 8],
        "grad_sync": ["each", "last"],
        "reshard_after_forward": [True, False],
    },
}
RS_BYTES = 3_500_000_000
FAIL = f"fail: reduce_scatter sent {RS_BYTES} B, promised 0 B"


def _bytes(v) -> float:
    """Bytes per optimizer step, shaped like each strategy's (ZeRO-3 a little under FSDP2
    resharding, so that one is hurt most beyond the spread)."""
    ga, each = v.grad_accum, v.grad_sync == "each"
    if v.strategy == "ddp":
        return PARAM_B * (ga if each else 1)
    if v.strategy == "zero3":
        return 2.5 * PARAM_B * ga
    gathers = 2 if v.reshard_after_forward == "true" else 1
    return PARAM_B * (gathers * ga + (ga if each else 1))


def _check(v, fail: bool) -> str:
    if v.grad_accum == 1:
        return "n/a: grad_accum 1 has no non-final micro-batch"
    planted = v.strategy == "fsdp" and v.grad_sync == "last" and v.reshard_after_forward == "true"
    return FAIL if fail and planted else "ok"


def _store(db: str, sid: str, fail: bool) -> list[str]:
    """One sweep's runs and statistics; the run ids of the planted failures."""
    spec = parse_spec(SPEC)
    runs, failed = [], []
    for p in plan_runs(spec):
        v = p.variant
        nbytes = _bytes(v)
        step = (0.1 * v.grad_accum + nbytes / (LINK_GBPS[v.link] * 1e9)) * (1 + 0.004 * p.repeat)
        run_id = f"{sid}-r{p.seq:04d}"
        check = _check(v, fail)
        failed += [run_id] if check.startswith("fail") else []
        runs.append(
            {"run_id": run_id, "sweep_id": sid, "seq": p.seq, "repeat": p.repeat,
             "status": "ok", "throttled": False, "median_step_time_s": step,
             "comm_bytes_per_step": nbytes, "accum_check": check}
            | v.to_dict()
        )  # fmt: skip
    with Store(db) as s:
        with s.transaction():
            s.insert("sweeps", [{"sweep_id": sid, "name": SPEC["name"], "spec": SPEC}])
            s.insert("runs", runs)
        refresh_all_stats(s, spec, sid)
    return failed


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("fsdp-report") / "r.duckdb")
    failed = _store(db, "s-fail", fail=True)
    _store(db, "s-pass", fail=False)
    return db, failed


def _report(db: str, sid: str, out) -> str:
    assert main(["report", "--db", db, "--sweep", sid, "--out", str(out)]) == 0
    return (out / "report.html").read_text(encoding="utf-8")


def test_report_names_the_failed_runs_and_the_bytes(stored, tmp_path):
    db, failed = stored
    assert len(failed) == 4  # grad_accum 8, both links, two repeats
    page = _report(db, "s-fail", tmp_path)
    assert "ACCUMULATION CHECK FAILED on 4 of 28 checked run(s)" in page  # the box at the top
    section = page.split("<h3>Accumulation check failures</h3>")[1].split("</table>")[0]
    assert "<td>FSDP2 (reshard, sync last)</td><td class='num'>8</td><td>fast, slow</td>" in section
    assert "reduce_scatter sent 3,500,000,000 B (3,500 MB), promised 0 B" in section
    assert all(run_id in section for run_id in failed)


def test_a_passing_sweep_says_nothing_of_the_check(stored, tmp_path):
    db, _ = stored
    page = _report(db, "s-pass", tmp_path)
    assert "ACCUMULATION" not in page and "Accumulation check failures" not in page
    with Reader(db) as r:
        assert accumulation_lines(r.rows(Q.ACCUM_CHECKS, sweep_id="s-pass")) == []


def test_run_summary_lines_from_the_stored_checks(stored):
    db, failed = stored
    with Reader(db) as r:
        lines = accumulation_lines(r.rows(Q.ACCUM_CHECKS, sweep_id="s-fail"))
    assert lines[0].startswith("ACCUMULATION CHECK FAILED on 4 of 28 checked run(s)")
    assert lines[1:] == [
        "  FSDP2 (reshard, sync last) at grad_accum 8 (links fast, slow): reduce_scatter sent "
        f"3,500,000,000 B (3,500 MB), promised 0 B; run(s) {', '.join(failed)}"
    ]


def test_headline_names_each_flavour_and_the_most_hurt_with_its_bytes(stored, tmp_path):
    db, _ = stored
    with Reader(db) as r:  # what linksweep run reads for its headline
        sens = r.rows(Q.REPORT_SENSITIVITY, sweep_id="s-pass")
        variants = r.rows(Q.REPORT_VARIANTS, sweep_id="s-pass")
    h = build_headline(sens, variants)
    (link,) = h.links
    assert list(link.cells) == [
        "DDP (sync each)",
        "DDP",
        "ZeRO-3",
        "FSDP2 (reshard, sync each)",
        "FSDP2 (reshard, sync last)",
        "FSDP2 (no reshard, sync each)",
        "FSDP2 (no reshard, sync last)",
    ]
    assert link.sentences[0].startswith(
        "On slow, FSDP2 (reshard, sync each) is hurt most, about as much at every grad_accum"
    )
    assert (
        "FSDP2 (reshard, sync each) 1,500 MB at grad_accum 1, 12,000 MB at 8"
        in (link.sentences[-1])
    )
    assert (
        "FSDP2 (no reshard, sync last) 1,000 MB at grad_accum 1, 4,500 MB at 8"
        in (link.sentences[-1])
    )
    buf = io.StringIO()
    print_headline(h, file=buf)
    assert "FSDP2 (no reshard, sync last)" in buf.getvalue()
    page = _report(db, "s-pass", tmp_path)
    assert "FSDP2 (reshard, sync each) is hurt most" in page
    # both flavour axes vary (columns) and the placement is the default: no fixed line
    assert "<h3>FSDP2</h3>" in page and "<th>reshard_after_forward</th>" in page
