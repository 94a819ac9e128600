"""A sweep with excluded nodes never places a rank on them, checked from stored
placements, on the session cluster (two nodes of 2 CPUs each).

The session cluster's two nodes are Ray nodes on this one machine: they share its IP and its
hostname, so an IP or a hostname would exclude both. These tests therefore exclude by node id;
matching by IP and hostname is covered by tests/unit/test_exclusions.py. Each direction is run
once (the file's ``exclude_nodes`` keeps the ranks off the head node, a fleet check's suspect
keeps them off the worker), so a placement that merely happened to avoid one node cannot pass
both. Run under ``flock /tmp/linksweep-heavy.lock``.
"""

from __future__ import annotations

import json

import pytest
import ray

from orchestrator.cli import main
from orchestrator.store import Store, read_query

SPEC = {
    "name": "exclude-it",
    "model": "gpt2-tiny",
    "dataset": "builtin",
    "seq_len": 32,
    "micro_batch_size": 2,
    "steps": 2,
    "warmup_steps": 1,
    "repeats": 1,
    "world_size": 2,
    "links": {"default": {}},
    "grid": {"strategy": ["ddp"], "grad_accum": [1, 2], "placement": ["pack"]},
}


def q(db, sql):
    return read_query(str(db), sql)[1]


@pytest.fixture(scope="module")
def node_ids(ray_cluster) -> tuple[str, str]:
    """(head, worker) node ids of the session cluster."""
    head = ray_cluster.head_node.node_id
    others = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != head]
    assert len(others) == 1
    return head, others[0]


def write(tmp_path, **overrides) -> str:
    import yaml

    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({**SPEC, **overrides}, sort_keys=False))
    return str(path)


def plant_fleet(db, fleet_id: str, suspect_node: str, pair: tuple[str, str]) -> None:
    """A finished fleet check naming ``suspect_node`` and one suspect pair (what ``linksweep
    fleet`` stores; written here so the test needs no fleet run)."""
    store = Store(str(db))
    try:
        with store.transaction():
            store.insert(
                "fleet_checks",
                [{"fleet_id": fleet_id, "status": "ok", "n_nodes": 2, "n_suspects": 2}],
            )
            store.insert(
                "fleet_nodes",
                [
                    {"fleet_id": fleet_id, "node_id": n, "ip": "127.0.0.1", "hostname": "h",
                     "suspect": n == suspect_node, "why": "slow with every partner"}
                    for n in pair
                ],
            )  # fmt: skip
            store.insert(
                "fleet_pairs",
                [{"fleet_id": fleet_id, "link": "default", "kind": "inter", "round": 0,
                  "node_a": pair[0], "node_b": pair[1], "status": "ok", "slow": True,
                  "suspect": True, "why": "pair busbw 0.2 of the median"}],
            )  # fmt: skip
    finally:
        store.close()


def rank_nodes(db) -> set[str]:
    stored = {r[0] for r in q(db, "SELECT DISTINCT node_id FROM ranks")}
    for (nodes,) in q(db, "SELECT nodes FROM runs"):
        stored |= {n["node_id"] for n in json.loads(nodes)}
    return stored


def test_exclude_nodes_keeps_every_rank_off_the_node(node_ids, tmp_path, capsys):
    head, worker = node_ids
    db = tmp_path / "r.duckdb"
    assert main(["run", write(tmp_path, exclude_nodes=[head]), "--db", str(db)]) == 0
    assert "excluded node " + head[:12] in capsys.readouterr().err
    assert q(db, "SELECT count(*) FROM runs WHERE status = 'ok'") == [(2,)]
    assert rank_nodes(db) == {worker}
    assert q(db, "SELECT node_id FROM nodes") == [(worker,)]  # not even probed for topology
    ((excluded, spec),) = q(db, "SELECT excluded_nodes, spec FROM sweeps")
    (r,) = json.loads(excluded)
    assert (r["entry"], r["source"], r["node_id"]) == (head, "exclude_nodes", head)
    assert r["ip"] and r["hostname"]
    assert json.loads(spec)["exclude_nodes"] == [head]


def test_exclude_suspects_keeps_ranks_off_the_fleets_suspect_node(node_ids, tmp_path, capsys):
    head, worker = node_ids
    db = tmp_path / "r.duckdb"
    plant_fleet(db, "fleet-1", worker, (head, worker))
    path = write(tmp_path, exclude_nodes=["no-such-host"])
    assert main(["run", path, "--db", str(db), "--exclude-suspects", "fleet-1"]) == 0
    err = capsys.readouterr().err
    assert "names the pair" in err and "not excluded" in err  # the pair: a warning only
    assert "'no-such-host' matches no alive node" in err
    assert rank_nodes(db) == {head}
    ((excluded,),) = q(db, "SELECT excluded_nodes FROM sweeps")
    got = [(r["entry"], r["source"], r["node_id"]) for r in json.loads(excluded)]
    assert got == [("no-such-host", "exclude_nodes", None), (worker, "fleet fleet-1", worker)]

    # --resume (no --exclude-suspects): the fleet entry the sweep stored is re-resolved and
    # still keeps the re-run off the worker
    forget_last_run(db)
    assert main(["run", path, "--db", str(db), "--resume"]) == 0
    assert "excluded node " + worker[:12] in capsys.readouterr().err
    assert q(db, "SELECT count(*) FROM runs WHERE status = 'ok'") == [(2,)]
    assert rank_nodes(db) == {head}
    ((excluded,),) = q(db, "SELECT excluded_nodes FROM sweeps")
    assert [(r["entry"], r["source"], r["node_id"]) for r in json.loads(excluded)] == got


def forget_last_run(db) -> None:
    """The sweep as if its driver had been stopped before its last run: that run's rows gone,
    the sweep ``interrupted``."""
    ((run_id,),) = q(db, "SELECT run_id FROM runs ORDER BY seq DESC LIMIT 1")
    store = Store(str(db))
    try:
        with store.transaction():
            for t in ("runs", "ranks", "steps", "comms", "transports", "telemetry",
                      "nccl_logs", "run_phases", "diagnostics"):  # fmt: skip
                store.delete(t, {"run_id": run_id})
            store.update("sweeps", {"status": "ok"}, {"status": "interrupted"})
    finally:
        store.close()


def test_unknown_fleet_id_starts_nothing(node_ids, tmp_path, capsys):
    head, worker = node_ids
    db = tmp_path / "r.duckdb"
    plant_fleet(db, "fleet-1", worker, (head, worker))
    assert main(["run", write(tmp_path), "--db", str(db), "--exclude-suspects", "nope"]) == 2
    err = capsys.readouterr().err
    assert "--exclude-suspects nope: no such fleet check" in err and "fleet-1" in err
    assert q(db, "SELECT count(*) FROM sweeps") == [(0,)]
    empty = tmp_path / "empty.duckdb"
    Store(str(empty)).close()
    assert main(["run", write(tmp_path), "--db", str(empty), "--exclude-suspects", "latest"]) == 2
    assert "most recent fleet ids: none (run linksweep fleet first)" in capsys.readouterr().err
    assert q(empty, "SELECT count(*) FROM sweeps") == [(0,)]


def test_too_little_left_after_exclusion_is_refused_before_anything(node_ids, tmp_path, capsys):
    head, _ = node_ids
    db = tmp_path / "r.duckdb"
    path = write(tmp_path, exclude_nodes=[head], grid={"placement": ["spread"]})
    assert main(["run", path, "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "'spread'" in err and "allowed: world_size <= 1" in err
    assert "1 excluded node(s)" in err and head[:12] in err
    assert not db.exists()


def test_linkbench_placement_group_avoids_the_excluded_node(node_ids):
    """The link microbenchmark's run goes through the same placement group: its placements
    (not stored per rank in link_bench) are read from the result."""
    from orchestrator.raycluster.runs import execute_run
    from orchestrator.sweep.planner import Launch, linkbench_config
    from orchestrator.sweep.spec import parse_spec

    spec = parse_spec({**SPEC, "linkbench_max_mb": 1})
    head, worker = node_ids
    # each direction twice in a row: a scheduler that merely alternates nodes cannot pass
    for i, (excluded_id, expect) in enumerate([(head, worker)] * 2 + [(worker, head)] * 2):
        config = linkbench_config(spec, f"exclude-lb-{i}", gpu=False)
        result = execute_run(Launch(config, {}, 2, "pack", {"CPU": 1.0}, 120.0, (excluded_id,)))
        assert result.error is None
        assert {p.node_id for p in result.placements} == {expect}


def test_linkbench_command_records_its_exclusions(node_ids, tmp_path):
    head, _ = node_ids
    db = tmp_path / "r.duckdb"
    path = write(tmp_path, exclude_nodes=[head], linkbench_max_mb=1)
    assert main(["linkbench", path, "--db", str(db)]) == 0
    ((excluded,),) = q(db, "SELECT excluded_nodes FROM sweeps")
    assert [r["node_id"] for r in json.loads(excluded)] == [head]
    assert q(db, "SELECT DISTINCT status FROM link_bench") == [("ok",)]
    assert head not in {r[0] for r in q(db, "SELECT node_id FROM nodes")}
