"""``linksweep fleet`` on the emulated cluster (root only): a planted slow node is found and a clean fleet names nobody.

- One of 4 emulated nodes, chosen at random here (the seed is printed), is planted slow
  (``--slow-node I=100mbit``: every interface, both directions). ``fleet`` exits 1 and names that
  node and no other; ``report --fleet`` draws its heatmap; a sweep run with
  ``--exclude-suspects FLEET_ID`` places no rank on it (from the stored placements) and records
  the exclusion.
- With no planted fault, three checks in a row (one driver process) exit 0 and name no
  suspect.

Both run on the session's shared emulated cluster of 4 nodes (tests/integration/conftest.py):
the slow node is planted on it with ``plant_faults`` (the tc ``up --slow-node`` would create)
and cleared after the test, so the clean checks see every link as ``up`` made it. The checks use
the nodes' default network (ctl, the interface each node's Ray IP is on), as a user's ``linksweep
fleet`` without ``--sweep`` does. The fleet wall time and the per-round times are printed
(``pytest -s``) for the issue's note. The rule itself is unit tested on synthetic fleets
(tests/unit/test_suspects.py); this is the end to end run on real shaped links.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from orchestrator.emulated import link_subnet
from orchestrator.store import read_query

# alone (tests/lanes.py): no false suspect, and the planted one named, from timings across nodes
pytestmark = pytest.mark.alone

REPO = Path(__file__).resolve().parents[2]
NODES = 4
SLOW_RATE = "100mbit"


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_DISABLE_USAGE_STATS="1")
    env["TOKENIZERS_PARALLELISM"] = "false"
    env.pop("RAY_ADDRESS", None)
    return env


def _run(args: list[str], timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    """A command in a subprocess (never here: this process keeps the session's Ray)."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def fleet(db: Path, address: str, *extra: str) -> tuple[int, str, str]:
    """Run one check; (exit code, fleet id, stdout)."""
    proc = _run(["-m", "orchestrator", "fleet", "--db", str(db), "--address", address, *extra])
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    _, rows = read_query(
        str(db), "SELECT fleet_id FROM fleet_checks ORDER BY started_at DESC LIMIT 1"
    )
    return proc.returncode, rows[0][0], proc.stdout


def rows(db: Path, sql: str) -> list[dict]:
    cols, values = read_query(str(db), sql)
    return [dict(zip(cols, v, strict=True)) for v in values]


def timings(db: Path, fleet_id: str) -> str:
    check = rows(db, f"SELECT wall_s FROM fleet_checks WHERE fleet_id = '{fleet_id}'")[0]
    rounds = rows(
        db,
        "SELECT kind, round, n_pairs, wall_s FROM fleet_rounds "
        f"WHERE fleet_id = '{fleet_id}' ORDER BY kind, round",
    )
    inter = [r["wall_s"] for r in rounds if r["kind"] == "inter"]
    parts = ", ".join(f"{r['kind']}[{r['round']}] {r['wall_s']:.1f} s" for r in rounds)
    return (
        f"fleet {fleet_id}: wall {check['wall_s']:.1f} s; inter-node rounds "
        f"{[round(x, 1) for x in inter]} s; stages: {parts}"
    )


@pytest.fixture(scope="module")
def work(tmp_path_factory, emulated_cluster):
    return tmp_path_factory.mktemp("fleet-emulated")


@pytest.mark.root
@pytest.mark.slow
def test_fleet_names_the_planted_slow_node_and_a_sweep_avoids_it(work, emulated_cluster):
    seed = int.from_bytes(os.urandom(4), "little")
    slow = random.Random(seed).randrange(NODES)
    print(f"seed {seed}: node {slow} planted at {SLOW_RATE}")
    slow_ip = f"{str(link_subnet(0).network_address).rsplit('.', 1)[0]}.{slow + 1}"
    db = work / "slow.duckdb"
    with emulated_cluster.slow_nodes([f"{slow}={SLOW_RATE}"]) as address:
        rc, fleet_id, out = fleet(db, address)
        print(out)
        print(timings(db, fleet_id))
        suspects = rows(db, f"SELECT * FROM fleet_suspects WHERE fleet_id = '{fleet_id}'")
        assert rc == 1, out
        assert [(s["kind"], s["ip"]) for s in suspects] == [("node", slow_ip)], suspects
        assert "slow with 3 of 3 partners" in suspects[0]["why"]
        # Every pair was measured, in 3 rounds of 2 (a round-robin of 4 nodes), none failed.
        pairs = rows(
            db,
            "SELECT round, node_a, node_b, status, slow FROM fleet_pairs "
            f"WHERE fleet_id = '{fleet_id}' AND kind = 'inter'",
        )
        assert len(pairs) == 6 and all(p["status"] == "ok" for p in pairs)
        assert sorted({p["round"] for p in pairs}) == [0, 1, 2]
        for r in range(3):
            in_round = [p for p in pairs if p["round"] == r]
            ids = [x for p in in_round for x in (p["node_a"], p["node_b"])]
            assert len(in_round) == 2 and len(set(ids)) == 4
        # The report draws the heatmap.
        report = _run(
            [
                "-m",
                "orchestrator",
                "report",
                "--db",
                str(db),
                "--fleet",
                fleet_id,
                "--out",
                str(work / "report"),
            ]  # fmt: skip
        )
        assert report.returncode == 0, report.stderr[-2000:]
        assert (work / "report" / "fleet.html").exists()
        assert (work / "report" / "fleet_heatmap_default.png").stat().st_size > 0

        # A sweep told to avoid the suspects never places a rank on the slow node.
        sweep = work / "avoid.yaml"
        sweep.write_text(
            yaml.safe_dump(
                {
                    "name": "avoid-suspects",
                    "model": "gpt2-tiny",
                    "dataset": "builtin",
                    "precision": "fp32",
                    "seq_len": 32,
                    "micro_batch_size": 1,
                    "steps": 2,
                    "warmup_steps": 1,
                    "repeats": 2,
                    "world_size": 2,
                    "run_timeout_s": 300,
                    "links": {"default": {"GLOO_SOCKET_IFNAME": "ls-ctl"}},
                    "grid": {"strategy": ["ddp"], "placement": ["spread"]},
                }
            )
        )
        run = _run(
            [
                "-m",
                "orchestrator",
                "run",
                str(sweep),
                "--db",
                str(db),
                "--address",
                address,
                "--exclude-suspects",
                fleet_id,
            ]  # fmt: skip
        )
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    excluded = rows(db, "SELECT sweep_id, excluded_nodes FROM sweeps")
    assert len(excluded) == 1
    entries = json.loads(excluded[0]["excluded_nodes"])
    assert [e["ip"] for e in entries] == [slow_ip], entries
    placed = {r["node_id"] for r in rows(db, "SELECT DISTINCT node_id FROM ranks")}
    assert len(placed) >= 2 and suspects[0]["node_id"] not in placed, placed


THREE_CHECKS = """
import sys
from orchestrator import cli
from orchestrator.raycluster import session
db, address = sys.argv[1:]
with session.held(address):  # one join for the three checks; each starts its own probes
    codes = [cli.main(["fleet", "--db", db, "--address", address]) for _ in range(3)]
print("exit codes", codes)
sys.exit(max(codes))
"""
"""Three ``linksweep fleet`` in a row, in one process (not this one: it keeps the session's Ray
connection)."""


@pytest.mark.root
@pytest.mark.slow
def test_no_planted_fault_three_checks_name_no_suspect(work, emulated_cluster):
    db = work / "clean.duckdb"
    t0 = time.monotonic()
    proc = _run(["-c", THREE_CHECKS, str(db), emulated_cluster.address])
    print(f"three checks: {time.monotonic() - t0:.0f} s")
    checks = rows(db, "SELECT fleet_id, status, n_suspects FROM fleet_checks ORDER BY started_at")
    for c in checks:
        print(timings(db, c["fleet_id"]))
    assert [(c["status"], c["n_suspects"]) for c in checks] == [("ok", 0)] * 3, proc.stdout[-6000:]
    assert rows(db, "SELECT * FROM fleet_suspects") == []
    assert proc.returncode == 0 and "exit codes [0, 0, 0]" in proc.stdout, proc.stderr[-3000:]
