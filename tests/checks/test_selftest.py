"""``linksweep selftest`` in its CPU mode, as CI runs it: a subprocess driver with its own
embedded Ray (no --address, no RAY_ADDRESS), so it never touches the session test cluster.
A check outside the suite (``bash scripts/checks.sh selftest``; ``.ci/run`` runs it after the
suite): its NVMe check needs DeepSpeed's async_io and cpu_adam ops, which the quickstart's
setup does not build and scripts/checks/selftest.sh does.

One run (about 2.5 min on 2 cores) checks the exit code, the folder's files, the database it
wrote, and that every check needing CUDA reads ``not run: no CUDA`` while every other passed;
the fleet check on the embedded one-node cluster (no pairs: intra-node, compute probe, health);
the FSDP2 run's stored bytes against the theory and its accumulation check.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.analysis.fsdp_theory import expected_fsdp, gpt2_sharded_by_name
from orchestrator.selftest import plan
from orchestrator.selftest.plan_text import plan_text
from orchestrator.store import read_query
from orchestrator.topology.discovery import as_report

REPO = Path(__file__).resolve().parents[2]
# quiet lane (tests/lanes.py) where it runs beside other tests: its hang and fleet checks run
# against deadlines and timings
pytestmark = [pytest.mark.slow, pytest.mark.quiet]


def _env() -> dict[str, str]:
    """Its own embedded Ray: never the session cluster's address."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return env | {"PYTHONPATH": str(REPO), "RAY_DISABLE_USAGE_STATS": "1"}


@pytest.fixture(scope="module")
def selftest_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("selftest") / "out"
    p = subprocess.run(
        [sys.executable, "-m", "orchestrator", "selftest", "--out", str(out)],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=720,  # 153 s alone; 449 s once on a loaded machine (load 4 on 2 cores)
    )
    return p, out


def test_cpu_selftest_exits_0_and_says_not_run_for_every_gpu_check(selftest_out):
    p, out = selftest_out
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    with open(out / "checks.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["check"] for r in rows] == list(plan.CHECK_NAMES)
    needs = {c.name: c.needs for c in plan.CHECKS}
    planned = {c.check: c for c in _plan(out).checks}
    for r in rows:
        c = planned[r["check"]]
        expected = ("pass",) if c.run else ("not run", c.why_not)
        assert (r["result"], r["detail"])[: len(expected)] == expected, r
        # on CPU: every GPU check is not run, and only they (FSDP2's two ranks are gloo's)
        assert c.run == (needs[r["check"]] in ("", "2 devices")), r
    assert "not run: no CUDA" in p.stdout and "nvme_offload" in p.stdout


def _plan(out: Path) -> plan.SelftestPlan:
    """The plan for the node the selftest probed, as its dry run makes it."""
    nodes = json.loads((out / "nodes.json").read_text())
    return plan.plan_selftest([plan.NodeFacts.from_report(as_report(n)) for n in nodes])


def test_it_ran_exactly_the_sweeps_its_plan_and_its_dry_run_list(selftest_out):
    _, out = selftest_out
    the_plan = _plan(out)
    ran = {p.stem: yaml.safe_load(p.read_text()) for p in (out / "sweeps").glob("*.yaml")}
    assert ran == the_plan.sweeps
    assert (out / "plan.txt").read_text() == plan_text(the_plan) + "\n"
    dry = subprocess.run(
        [sys.executable, "-m", "orchestrator", "selftest", "--dry-run"],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert dry.stdout == (out / "plan.txt").read_text()


def test_the_folder_holds_captures_sweeps_and_the_database(selftest_out):
    _, out = selftest_out
    for name in ("doctor.txt", "nodes.json", "nvml-inventory.json", "nccl/transports.csv",
                 "fleet.txt"):  # fmt: skip
        assert (out / name).is_file(), name
    assert sorted(p.stem for p in (out / "sweeps").glob("*.yaml")) == sorted(
        plan.sweep_specs(cuda=False, n_gpus=0)
    )
    assert "plan.txt" in {p.name for p in out.iterdir()}
    assert "doctor: nothing invalidates" in (out / "doctor.txt").read_text()
    (node,) = json.loads((out / "nodes.json").read_text())
    assert node["cuda_available"] is False and node["hostname"]
    _, rows = read_query(
        str(out / "results.duckdb"),
        "SELECT s.name, r.status, count(*) FROM runs r JOIN sweeps s USING (sweep_id) "
        "GROUP BY ALL ORDER BY ALL",
    )
    assert rows == [
        ("selftest-fsdp2", "ok", 1),
        ("selftest-hang", "failed", 1),
        ("selftest-nvme", "ok", 1),
        ("selftest-one_rank", "ok", 1),
        ("selftest-one_rank_alt", "ok", 1),
        ("selftest-two_rank", "ok", 8),
    ]
    stacks = sorted((out / "hang").glob("*.stack.txt"))
    assert len(stacks) == 2  # both ranks of the hung run
    assert any("_maybe_fault" in s.read_text() for s in stacks)  # rank 1, where it hangs


def test_the_one_rank_run_went_once_per_launcher_and_each_ones_start_up_is_reported(selftest_out):
    """On CPU the one-rank check runs forked (the default) and on fresh actors: startup.csv
    and the check's detail give each launcher's start-up per run, from the stored phases; the
    actors' run paid its imports, the forked one did not."""
    p, out = selftest_out
    with open(out / "startup.csv", newline="") as f:
        rows = {(r["ranks"], r["launcher"]): r for r in csv.DictReader(f)}
    assert set(rows) == {("one rank", "fork"), ("one rank", "actors"), ("two ranks", "fork")}
    fork, actors = rows["one rank", "fork"], rows["one rank", "actors"]
    assert fork["runs"] == actors["runs"] == "1"
    assert 0 < float(fork["median_s"]) < float(actors["median_s"]), rows
    assert float(fork["imports"]) * 20 < float(actors["imports"]), rows  # see test_launcher
    assert fork["cuda_init"] == actors["cuda_init"] == ""  # a CPU rank has no such phase
    with open(out / "checks.csv", newline="") as f:
        check = next(r for r in csv.DictReader(f) if r["check"] == "one_rank_launchers")
    assert check["result"] == "pass", check
    assert "fork start-up" in check["detail"] and "actors start-up" in check["detail"]
    assert "start-up per run by launcher" in p.stdout


def test_the_fleet_check_ran_on_the_one_node_and_its_summary_is_in_fleet_txt(selftest_out):
    _, out = selftest_out
    with open(out / "checks.csv", newline="") as f:
        rows = {r["check"]: r for r in csv.DictReader(f)}
    assert rows["fleet"]["result"] == "pass", rows["fleet"]
    assert (
        "1 node(s)" in rows["fleet"]["detail"] and "0 inter-node pair(s)" in rows["fleet"]["detail"]
    )
    assert (rows["fleet_gpu"]["result"], rows["fleet_gpu"]["detail"]) == ("not run", "no CUDA")
    db = str(out / "results.duckdb")
    _, checks = read_query(db, "SELECT fleet_id, status, n_nodes, wall_s FROM fleet_checks")
    ((fleet_id, status, n_nodes, wall_s),) = checks
    assert (status, n_nodes) == ("ok", 1) and wall_s > 0
    _, pairs = read_query(db, "SELECT kind, backend, status FROM fleet_pairs")
    assert pairs == [("intra", "gloo", "ok")]
    text = (out / "fleet.txt").read_text()
    assert f"fleet check {fleet_id}" in text
    print(f"fleet check wall_s {wall_s:.1f}")  # what the fleet adds to the selftest (-s shows it)


def test_the_fsdp2_run_sent_what_the_theory_says_and_kept_its_accumulation_promise(selftest_out):
    """The stored FSDP2 run, read back as the verdict reads it: two gloo ranks at grad_accum 2,
    bytes per step equal ``fsdp_theory``'s, and the non-final micro-batch sent what
    ``grad_sync: last`` promises (all-gathers, no reduce-scatter)."""
    _, out = selftest_out
    _, rows = read_query(
        str(out / "results.duckdb"),
        "SELECT r.strategy, r.grad_accum, r.grad_sync, r.world_size, r.backend, "
        "r.comm_bytes_per_step, r.expected_comm_bytes_per_step, r.accum_check, "
        "r.promised_non_final_bytes, epoch(r.finished_at - r.started_at) "
        "FROM runs r JOIN sweeps s USING (sweep_id) WHERE s.name = 'selftest-fsdp2'",
    )
    ((strategy, ga, sync, world, backend, measured, expected, check, promised, wall_s),) = rows
    assert (strategy, ga, sync, world, backend) == ("fsdp", 2, "last", 2, "gloo")
    theory = expected_fsdp("fsdp", "last", True, 2, 2, gpt2_sharded_by_name("gpt2-tiny"))
    assert measured == expected == sum(theory.per_step.values())
    assert check == "ok" and json.loads(promised) == theory.non_final
    assert "reduce_scatter" not in theory.non_final
    with open(out / "checks.csv", newline="") as f:
        fsdp2 = next(r for r in csv.DictReader(f) if r["check"] == "fsdp2")
    assert fsdp2["result"] == "pass" and "= theory, accum_check ok" in fsdp2["detail"], fsdp2
    print(f"fsdp2 run wall_s {wall_s:.1f}")  # what the FSDP2 check adds (-s shows it)
