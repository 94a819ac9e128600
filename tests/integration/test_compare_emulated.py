"""``linksweep compare`` on the emulated cluster (root only): the issue's acceptance.

A baseline sweep whose ``slow`` link is shaped at 500mbit, a candidate whose ``slow`` link is
shaped at 200mbit; both gpt2-tiny, DDP and ZeRO-3, 5 repeats, spread over 2 emulated nodes, the
unshaped ``fast`` link beside it. One cluster serves both: the session's shared emulated cluster
(tests/integration/conftest.py; its nodes 0 and 1, the others excluded), which has the links
``fast``, ``s500=500mbit`` and ``s200=200mbit``; each sweep's ``slow`` names ``ls-s500`` or
``ls-s200``. The baseline runs into ``both.duckdb``, which is then copied to ``base.duckdb``;
the candidate runs into ``both.duckdb`` too (both in one driver process: one join, one launcher
per node). So one pair of sweeps gives both cases:

- across two database files: ``compare base.duckdb both.duckdb`` (a file's newest sweep);
- within one file: ``compare BASE_ID CAND_ID --db both.duckdb``, and ``PATH:SWEEP_ID`` on both
  sides.

Each exits 1; the slow-link variant of both strategies is ``slower``, and so is its slowdown
(slow / fast within each sweep: it grew); the fast link is ``no change`` at ``--threshold 30%``.
Not at 5%: on this shared 2-core machine the same sweep file run twice moves 10-18% on the
unchanged link (bench/bench_drift.py measures it; docs/compare.md "Drift on this machine").
A database compared with itself exits 0 with nothing flagged. The pure verdict logic is unit
tested in tests/unit/test_compare*.py; this test is the end to end run on real shaped links.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from orchestrator import cli
from orchestrator.store import read_query

# alone (tests/lanes.py): the unshaped link must read 'no change' between two sweeps
pytestmark = pytest.mark.alone

REPO = Path(__file__).resolve().parents[2]
THRESHOLD = "30%"
"""The fast link must read ``no change``; on this machine it drifts 10-18% between two sweeps of
the same file, so 5% would flag the machine, not the link (module docstring)."""


def sweep_doc(name: str, slow_iface: str, exclude_nodes: list[str]) -> dict:
    """The sweep both sides run; they differ only in the interface ``slow`` names. On 2 nodes of
    the shared cluster: every run on the same two (``exclude_nodes``: the others)."""
    return {
        "name": name,
        "model": "gpt2-tiny",
        "dataset": "builtin",
        "precision": "fp32",
        "seq_len": 32,  # little compute: the link's share of a step, which the test is about,
        "micro_batch_size": 1,  # is large, and a CPU busy elsewhere moves the figures less
        "steps": 3,
        "warmup_steps": 1,
        "repeats": 5,  # 3 once lost DDP's slowdown verdict: 2 of 3 fast-link runs 2x slow
        "world_size": 2,
        "run_timeout_s": 300,
        "links": {
            "fast": {"GLOO_SOCKET_IFNAME": "ls-fast"},
            "slow": {"GLOO_SOCKET_IFNAME": f"ls-{slow_iface}"},
        },
        "grid": {"strategy": ["ddp", "zero3"], "placement": ["spread"]},
        "exclude_nodes": exclude_nodes,
    }


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_DISABLE_USAGE_STATS="1")
    env["TOKENIZERS_PARALLELISM"] = "false"
    env.pop("RAY_ADDRESS", None)
    return env


BOTH_SWEEPS = """
import shutil, sys
from pathlib import Path
from orchestrator import cli
from orchestrator.raycluster import session
base_yaml, cand_yaml, both, base, address = sys.argv[1:]
with session.held(address):  # one join, one launcher per node for both sweeps
    rc = cli.main(["run", base_yaml, "--db", both, "--address", address])
    if rc == 0:
        for suffix in ("", ".wal"):  # the baseline alone, as its own file
            if Path(both + suffix).exists():
                shutil.copy(both + suffix, base + suffix)
        rc = cli.main(["run", cand_yaml, "--db", both, "--address", address])
sys.exit(rc)
"""
"""Both sweeps, one after the other, in one process (not this one: it keeps the session's Ray
connection): the second reuses the first's join and its launchers, as a user's script running
``cli.main`` twice would."""


def _run_sweeps(docs: tuple[dict, dict], work: Path, both: Path, base: Path, address: str):
    files = []
    for doc in docs:
        files.append(work / f"{doc['name']}.yaml")
        files[-1].write_text(yaml.safe_dump(doc, sort_keys=False))
    argv = [*map(str, files), str(both), str(base), address]
    proc = subprocess.run(
        [sys.executable, "-c", BOTH_SWEEPS, *argv], cwd=REPO, env=_env(),
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory, emulated_cluster):
    """(base.duckdb, both.duckdb, baseline sweep id, candidate sweep id, seconds it took)."""
    work = tmp_path_factory.mktemp("compare-emulated")
    address, others = emulated_cluster.address, emulated_cluster.node_ips()[2:]
    t0 = time.monotonic()
    both, base = work / "both.duckdb", work / "base.duckdb"
    docs = (sweep_doc("compare-base", "s500", others), sweep_doc("compare-cand", "s200", others))
    _run_sweeps(docs, work, both, base, address)
    took_s = time.monotonic() - t0
    print(f"two sweeps: {took_s:.0f} s")
    _, rows = read_query(str(both), "SELECT sweep_id, name FROM sweeps ORDER BY started_at")
    assert [name for _, name in rows] == ["compare-base", "compare-cand"]
    (base_id, _), (cand_id, _) = rows
    return base, both, base_id, cand_id, took_s


def _compare(capsys, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = cli.main(["compare", *argv])
    return rc, capsys.readouterr().out


def _verdicts(rows: list[dict]) -> dict[tuple[str, str], str]:
    """(strategy, link) -> verdict; every row here has grad_accum 1 and placement spread."""
    return {(r["key"]["strategy"], r["key"]["link"]): r["verdict"] for r in rows}


def _assert_slow_link_flagged(out: dict) -> None:
    variants, slowdowns = _verdicts(out["variants"]), _verdicts(out["slowdowns"])
    for strategy in ("ddp", "zero3"):
        assert variants[(strategy, "slow")] == "slower", out["variants"]
        assert variants[(strategy, "fast")] == "no change", out["variants"]
        assert slowdowns[(strategy, "slow")] == "slower", out["slowdowns"]
    assert set(variants) == {(s, link) for s in ("ddp", "zero3") for link in ("fast", "slow")}
    assert out["regressions"] >= 4  # two variants and two slowdowns


@pytest.mark.root
@pytest.mark.slow
def test_slower_slow_link_flagged_across_two_files(sweeps, capsys):
    base, both, base_id, cand_id, took_s = sweeps
    rc, text = _compare(capsys, str(base), str(both), "--threshold", THRESHOLD, "--format", "json")
    out = json.loads(text)
    assert rc == 1, text
    assert out["regressions"] > 0
    _assert_slow_link_flagged(out)
    # The table a user reads, printed for the record (README "Comparing sweeps").
    rc, table = _compare(capsys, str(base), str(both), "--threshold", THRESHOLD)
    print(table)
    assert rc == 1 and "slower" in table


@pytest.mark.root
@pytest.mark.slow
def test_slower_slow_link_flagged_within_one_file(sweeps, capsys):
    base, both, base_id, cand_id, _ = sweeps
    for argv in (
        [base_id, cand_id, "--db", str(both)],
        [f"{both}:{base_id}", f"{both}:{cand_id}"],
    ):
        rc, text = _compare(capsys, *argv, "--threshold", THRESHOLD, "--format", "json")
        assert rc == 1, text
        _assert_slow_link_flagged(json.loads(text))


@pytest.mark.root
@pytest.mark.slow
def test_a_database_compared_with_itself_flags_nothing(sweeps, capsys):
    base, *_ = sweeps
    rc, text = _compare(capsys, str(base), str(base), "--format", "json")  # default 5%
    out = json.loads(text)
    assert rc == 0, text
    assert out["regressions"] == 0
    rows = out["variants"] + out["slowdowns"] + out["throughput"]
    assert out["variants"] and out["slowdowns"] and {r["verdict"] for r in rows} == {"no change"}
    assert all(r["ratio"] == pytest.approx(1.0) for r in rows)
