"""fleet_rows: measurements and verdicts laid out as the fleet tables; waves of node checks."""

from __future__ import annotations

import json
from types import SimpleNamespace as NS

import pytest

from orchestrator.commands import fleet as fleet_cmd
from orchestrator.fleet import tables
from orchestrator.fleet.suspects import Failed
from orchestrator.store import TABLES
from workloads.fleet_contract import ComputeRecord, HealthRecord


def node(node_id: str, host: str, ip: str = "10.0.0.1", gpus: float = 0.0):
    return NS(node_id=node_id, hostname=host, ip=ip, cpus=2.0, gpus=gpus)


def bench(kind, a, b, status="ok", busbw=1.0):
    return NS(
        kind=kind,
        node_a=a,
        node_b=b,
        world_size=2,
        backend="gloo",
        ifname="eth0",
        msg_bytes=4_000_000,
        time_s=0.01 if status == "ok" else None,
        busbw_gbps=busbw if status == "ok" else None,
        status=status,
        error=None if status == "ok" else "boom",
    )


def columns(table: str) -> list[str]:
    return [
        line.strip().split()[0].strip('"')
        for line in TABLES[table].splitlines()
        if line.strip() and not line.strip().startswith("--")
    ]


def test_waves_never_put_two_nodes_of_one_machine_together():
    nodes = [node("a1", "h1"), node("a2", "h1"), node("b1", "h2"), node("a3", "h1")]
    waves = tables.waves(nodes)
    assert [[n.node_id for n in w] for w in waves] == [["a1", "b1"], ["a2"], ["a3"]]
    for w in waves:
        hosts = [n.hostname for n in w]
        assert len(hosts) == len(set(hosts))
    assert sorted(n.node_id for w in waves for n in w) == sorted(n.node_id for n in nodes)


def test_distinct_machines_are_one_wave_and_share_no_host():
    nodes = [node(f"n{i}", f"h{i}") for i in range(5)]
    assert len(tables.waves(nodes)) == 1
    assert tables.shared_hosts(nodes) == set()
    assert tables.shared_hosts([*nodes, node("x", "h0")]) == {"n0", "x"}


def test_rows_match_the_schema_columns():
    nodes = [node("a", "h1", gpus=1.0), node("b", "h2")]
    row = tables.pair_row("f1", "default", bench("inter", "a", "b"), 0)
    assert list(row) == columns("fleet_pairs")
    compute = {
        "a": ComputeRecord("cuda:0", "gpt2", "bf16", 1024, 8, 5, (0.1, 0.1), 81920.0),
        "b": "RayActorError: died",
    }
    health = {"a": HealthRecord(gpus=({"index": 0, "name": "NVIDIA H100"},)), "b": HealthRecord()}
    rows = tables.node_rows("f1", nodes, compute, health, None)
    assert [list(r) for r in rows] == [columns("fleet_nodes")] * 2
    a, b = rows
    assert a["compute_status"] == "ok" and a["compute_tokens_per_s"] == 81920.0
    assert a["gpu_names"] == "NVIDIA H100"
    assert json.loads(a["health"])["idle"]["gpus"][0]["name"] == "NVIDIA H100"
    assert b["compute_status"] == "failed" and b["compute_error"] == "RayActorError: died"
    rr = tables.round_row("f1", "default", "inter", 2, 3, 1.5)
    assert list(rr) == columns("fleet_rounds")


def test_measured_values_keep_failures_with_their_error_and_drop_skipped():
    rows = [
        tables.pair_row("f", "l", bench("inter", "a", "b", busbw=2.0), 0),
        tables.pair_row("f", "l", bench("inter", "a", "c", status="failed"), 1),
        tables.pair_row("f", "l", bench("intra", "a", "a", busbw=9.0), None),
        tables.pair_row("f", "l", bench("intra", "b", "b", status="skipped"), None),
    ]
    inter, intra = tables.measured_values(rows)
    assert inter == {"l": {("a", "b"): 2.0, ("a", "c"): Failed("boom")}}
    assert intra == {"l": {"a": 9.0}}


def test_verdict_lands_on_its_own_pair_row():
    rows = [
        tables.pair_row("f", "l", bench("inter", "a", "b"), 0),
        tables.pair_row("f", "l", bench("intra", "a", "a"), None),
    ]
    verdict = NS(
        pairs={("l", "a", "b"): NS(slow=True, suspect=False, why="slow with a")},
        intra={("l", "a"): NS(slow=False, suspect=False, why=None)},
        nodes={},
    )
    inter_row, intra_row = tables.judged_pair_rows(rows, verdict)
    assert (inter_row["slow"], inter_row["suspect"], inter_row["why"]) == (
        True,
        False,
        "slow with a",
    )
    assert (intra_row["slow"], intra_row["suspect"]) == (False, False)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--pairs", "some"], "--pairs"),
        (["--max-mb", "0"], "--max-mb"),
        (["--max-mb", "-3"], "--max-mb"),
        (["--threshold", "1.5"], "--threshold"),
        (["--sweep", "/nonexistent/sweep.yaml"], "sweep"),
    ],
)
def test_bad_flags_are_named_before_anything_runs(argv, needle, tmp_path, capsys):
    from orchestrator import cli

    db = tmp_path / "r.duckdb"
    assert cli.main(["fleet", "--db", str(db), *argv]) == 2
    assert needle in capsys.readouterr().err
    assert not db.exists()  # nothing written


def test_fleet_is_a_command():
    assert fleet_cmd.EPILOG.startswith("exit codes")


def test_the_fleet_measures_a_link_with_the_env_a_sweep_gives_it():
    from orchestrator.sweep.planner import link_env_defaults

    assert link_env_defaults({}) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert link_env_defaults({"NCCL_P2P_DISABLE": "1"})["NCCL_NVLS_ENABLE"] == "0"
    assert "NCCL_NVLS_ENABLE" not in link_env_defaults({"NCCL_P2P_DISABLE": "0"})


def test_rank_form_in_a_link_value_is_unique_per_rank_process_of_the_check():
    from orchestrator.raycluster.pinned_probes import FleetNode, rank_envs

    nodes = [
        FleetNode("a", "10.0.0.1", "h0", cpus=8.0, gpus=2.0),
        FleetNode("b", "10.0.0.2", "h1", cpus=8.0, gpus=0.0),
        FleetNode("c", "10.0.0.3", "h2", cpus=8.0, gpus=4.0),
    ]
    envs = rank_envs(nodes, {"NCCL_DEBUG_FILE": "/tmp/n-{rank}.log", "X": "1"})
    got = {k: [e["NCCL_DEBUG_FILE"] for e in v] for k, v in envs.items()}
    assert got == {
        "a": ["/tmp/n-0.log", "/tmp/n-1.log"],
        "b": ["/tmp/n-2.log", "/tmp/n-3.log"],  # a CPU node: two gloo ranks
        "c": [f"/tmp/n-{r}.log" for r in (4, 5, 6, 7)],
    }
    assert all(e["X"] == "1" for v in envs.values() for e in v)
