"""The fleet check loop (orchestrator/fleet/loop.py) end to end without Ray: a fake
``orchestrator.raycluster.pinned_probes`` (the one boundary the loop crosses) returns planted
measurements; the loop's rounds, waves, rows, verdict and stored status are checked in a real
DuckDB file. The Ray side is tested in tests/integration/test_fleet_ray.py and on the emulated
cluster in tests/integration/test_fleet_emulated.py."""

from __future__ import annotations

import statistics
import types
from dataclasses import dataclass

import pytest

from orchestrator.fleet import loop as fleet
from orchestrator.fleet.pairs import parse_pairs
from orchestrator.fleet.tables import BenchResult
from orchestrator.store import Q, Reader
from orchestrator.store.live import LiveStore
from orchestrator.store.snapshot import load_fleet
from tests.unit.stand_in import stand_in
from workloads.fleet_contract import ComputeRecord, HealthRecord

GOOD, BAD = 1.0, 0.1


@dataclass(frozen=True)
class Node:
    node_id: str
    ip: str
    hostname: str
    cpus: float = 2.0
    gpus: float = 0.0


Result = BenchResult  # what the Ray side returns, the loop's own record


def _sizes(msg_bytes, keys) -> dict:
    """LinkProbes' ``msg_bytes``: one size for all, or a size per node or pair."""
    return {k: msg_bytes if isinstance(msg_bytes, int) else msg_bytes[k] for k in keys}


def fake_ray_side(
    nodes,
    *,
    slow=(),
    failed_pair=None,
    interrupt_round=None,
    transient=None,
    log=None,
    inter=None,
    intra=None,
    tokens=None,
    gpu_names=None,
):
    """A stand-in module for orchestrator.raycluster.pinned_probes with planted figures: ``inter(a, b)``
    a pair's busbw, ``intra`` and ``tokens`` per node (else GOOD, 5.0 and 1024), ``gpu_names``
    the GPU model NVML names per node (else a CPU node's health)."""
    log = log if log is not None else []
    intra, tokens, gpu_names = intra or {}, tokens or {}, gpu_names or {}

    def result(kind, a, b, msg_bytes, busbw):
        ok = busbw is not None
        return Result(
            kind, a, b, 2, "gloo", "eth0", msg_bytes, (0.1,), 0.1 if ok else None,
            busbw, "ok" if ok else "failed", None if ok else "Connection reset by peer", 0.1,
        )  # fmt: skip

    class LinkProbes:
        def __init__(self, nodes_, env, timeout_s=120.0):
            log.append(("probes", tuple(n.node_id for n in nodes_), dict(env)))
            self.rounds = 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            log.append(("closed",))

        def start(self):
            return {}

        def intra(self, node_ids, msg_bytes, iters=5, warmup=2):
            log.append(("intra", tuple(node_ids)))
            sizes = _sizes(msg_bytes, node_ids)  # a size per node, from its group
            log.append(("intra sizes", sizes))
            return [result("intra", n, n, sizes[n], intra.get(n, 5.0)) for n in node_ids]

        def round(self, pairs, msg_bytes, iters=5, warmup=2):
            if self.rounds == interrupt_round:
                raise KeyboardInterrupt
            self.rounds += 1
            log.append(("round", tuple(pairs)))
            sizes = _sizes(msg_bytes, pairs)  # a size per pair
            log.append(("round sizes", sizes))
            out = []
            for a, b in pairs:
                busbw = inter(a, b) if inter else BAD if set(slow) & {a, b} else GOOD
                if {a, b} == transient and ("transient", a, b) not in log:
                    log.append(("transient", a, b))  # slow the first time only
                    busbw = BAD
                out.append(
                    result("inter", a, b, sizes[(a, b)], None if {a, b} == failed_pair else busbw)
                )
            return out

        def compute(self, node_ids, timeout_s=300.0):
            log.append(("compute", tuple(node_ids)))
            return {
                n: ComputeRecord(
                    "cpu", "gpt2-tiny", "fp32", 128, 4, 2, (0.5,) * 6, tokens.get(n, 1024.0)
                )
                for n in node_ids
            }

    def read_health(nodes_, timeout_s=60.0):
        log.append(("health", tuple(n.node_id for n in nodes_)))
        return {
            n.node_id: HealthRecord(gpus=({"index": 0, "name": gpu_names[n.node_id]},))
            if n.node_id in gpu_names
            else HealthRecord(note="no GPU: NVML checks do not apply")
            for n in nodes_
        }

    mod = types.ModuleType("orchestrator.raycluster.pinned_probes")
    mod.fleet_nodes = lambda: (list(nodes), [{"node_id": "head", "why": "0 CPUs"}])
    mod.LinkProbes, mod.read_health = LinkProbes, read_health
    return mod, log


def four(hostnames=("h0", "h1", "h2", "h3")):
    return [Node(f"n{i}", f"10.0.0.{i + 1}", h) for i, h in enumerate(hostnames)]


def check(monkeypatch, tmp_path, nodes, links=None, **plant):
    mod, log = fake_ray_side(nodes, **plant)
    stand_in(monkeypatch, mod)
    db = str(tmp_path / "f.duckdb")
    opts = fleet.FleetOptions(links=links or {"default": {}}, pairs=parse_pairs("all"))
    said: list[str] = []
    fleet_id = fleet.run_fleet(LiveStore(db), opts, "10.0.0.1:6379", said.append)
    return db, fleet_id, log, said


def test_a_slow_node_is_stored_as_the_one_suspect(monkeypatch, tmp_path):
    db, fleet_id, log, said = check(monkeypatch, tmp_path, four(), slow=("n2",))
    got = load_fleet(db, fleet_id)
    c = got["check"]
    assert (c["status"], c["n_nodes"], c["n_rounds"], c["n_suspects"]) == ("ok", 4, 3, 1)
    assert c["max_mb"] == 4.0 and c["pairs_mode"] == "all"
    assert [(s["kind"], s["node_id"], s["ip"]) for s in got["suspects"]] == [
        ("node", "n2", "10.0.0.3")
    ]
    inter = [p for p in got["pairs"] if p["kind"] == "inter"]
    assert len(inter) == 6 and {p["round"] for p in inter} == {0, 1, 2}
    assert all(p["slow"] == ("n2" in (p["node_a"], p["node_b"])) for p in inter)
    assert not any(p["suspect"] for p in inter)  # explained by n2
    assert {p["node_a"] for p in got["pairs"] if p["kind"] == "intra"} == {"n0", "n1", "n2", "n3"}
    kinds = [r["kind"] for r in got["rounds"]]
    assert kinds.count("inter") == 3 and kinds.count("start") == 1
    # four machines: every node check of a stage in one wave
    assert [e for e in log if e[0] == "intra"] == [("intra", ("n0", "n1", "n2", "n3"))]
    assert [e for e in log if e[0] == "compute"] == [("compute", ("n0", "n1", "n2", "n3"))]
    assert any("round 3/3" in s for s in said)


def test_nodes_of_one_machine_take_turns_for_node_checks(monkeypatch, tmp_path):
    db, fleet_id, log, _ = check(monkeypatch, tmp_path, four(("vm",) * 4))
    assert [e for e in log if e[0] == "compute"] == [("compute", (f"n{i}",)) for i in range(4)]
    assert len([e for e in log if e[0] == "intra"]) == 4
    got = load_fleet(db, fleet_id)
    assert got["suspects"] == [] and got["check"]["n_suspects"] == 0
    assert "share a machine" in " ".join(got["check"]["notes"])


def test_a_failed_pair_is_a_row_and_a_suspect_with_its_error(monkeypatch, tmp_path):
    db, fleet_id, _, _ = check(monkeypatch, tmp_path, four(), failed_pair={"n0", "n1"})
    got = load_fleet(db, fleet_id)
    failed = [p for p in got["pairs"] if p["status"] == "failed"]
    assert len(failed) == 1 and "Connection reset by peer" in failed[0]["error"]
    assert [(s["kind"], s["node_id"], s["partner_id"]) for s in got["suspects"]] == [
        ("pair", "n0", "n1")
    ]


def test_each_link_is_measured_with_a_fresh_set_of_ranks_and_its_env(monkeypatch, tmp_path):
    links = {"nvlink": {}, "pcie": {"NCCL_P2P_DISABLE": "1"}}
    db, fleet_id, log, _ = check(monkeypatch, tmp_path, four(), links=links)
    envs = [e[2] for e in log if e[0] == "probes"]
    assert len(envs) == 2 and log.count(("closed",)) == 2
    # the compute probe once, on the last link's ranks, before they are killed
    steps = [e[0] for e in log if e[0] in ("probes", "compute", "closed")]
    assert steps == ["probes", "closed", "probes", "compute", "closed"]
    assert envs[1]["NCCL_P2P_DISABLE"] == "1" and envs[1]["NCCL_NVLS_ENABLE"] == "0"
    assert all(e["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" for e in envs)
    got = load_fleet(db, fleet_id)
    assert {p["link"] for p in got["pairs"]} == {"nvlink", "pcie"}


def test_a_stop_keeps_what_was_measured_without_a_verdict(monkeypatch, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        check(monkeypatch, tmp_path, four(), slow=("n1",), interrupt_round=1)
    db = str(tmp_path / "f.duckdb")
    got = load_fleet(db, "latest")
    c = got["check"]
    assert c["status"] == "interrupted" and c["n_suspects"] is None
    inter = [p for p in got["pairs"] if p["kind"] == "inter"]
    assert len(inter) == 2 and all(p["slow"] is None for p in inter)  # one round, no verdict
    assert got["suspects"] == []


def test_message_bytes_is_a_power_of_two_within_the_mib_asked():
    assert fleet.message_bytes(4) == 4 * 2**20
    assert fleet.message_bytes(48) == 32 * 2**20
    assert fleet.message_bytes(0.000001) == 4
    sizes = [fleet.message_bytes(x) for x in (1, 3, 5, 100, 1000)]
    assert all(s & (s - 1) == 0 for s in sizes)
    assert statistics.median(sizes) == 4 * 2**20


def test_fake_nvml_pcie_x8_and_a_throttled_gpu_are_suspects_with_the_reason(monkeypatch, tmp_path):
    """The issue's fake-NVML acceptance, through the real NVML reader, the rule and the store."""
    from tests.unit.fake_nvml import FakeNvml, health_gpu, thermally_throttled_gpu, x8_of_x16_gpu
    from workloads.fleet_probe import read_node_health

    nodes = [Node(f"n{i}", f"10.0.0.{i + 1}", f"h{i}", gpus=2.0) for i in range(4)]
    gpus = {
        "n0": [health_gpu(0), health_gpu(1)],
        "n1": [health_gpu(0), x8_of_x16_gpu(1)],
        "n2": [thermally_throttled_gpu(0), health_gpu(1)],
        "n3": [health_gpu(0), health_gpu(1)],
    }
    mod, _ = fake_ray_side(nodes)
    mod.read_health = lambda nodes_, timeout_s=60.0: {
        n.node_id: read_node_health(FakeNvml(gpus[n.node_id]), expect_gpus=True) for n in nodes_
    }
    stand_in(monkeypatch, mod)
    db = str(tmp_path / "f.duckdb")
    opts = fleet.FleetOptions(links={"default": {}}, pairs=parse_pairs("all"))
    fleet_id = fleet.run_fleet(LiveStore(db), opts, "addr", lambda s: None)
    suspects = {s["node_id"]: s["why"] for s in load_fleet(db, fleet_id)["suspects"]}
    assert sorted(suspects) == ["n1", "n2"]
    assert "x8 of x16" in suspects["n1"] and "GPU1" in suspects["n1"]
    assert "HwThermalSlowdown" in suspects["n2"] and "GPU0" in suspects["n2"]


def test_a_pair_slow_once_is_measured_again_and_not_named(monkeypatch, tmp_path):
    db, fleet_id, log, said = check(monkeypatch, tmp_path, four(), transient={"n0", "n3"})
    got = load_fleet(db, fleet_id)
    assert got["suspects"] == [] and got["check"]["n_suspects"] == 0
    (row,) = [p for p in got["pairs"] if (p["node_a"], p["node_b"]) == ("n0", "n3")]
    assert (row["busbw_gbps"], row["first_busbw_gbps"], row["slow"]) == (GOOD, BAD, False)
    assert row["round"] is not None  # keeps its tournament round
    assert [r["kind"] for r in got["rounds"]].count("recheck") == 1
    assert [e for e in log if e[0] == "round"][-1] == ("round", (("n0", "n3"),))
    assert any("measured 1 slow or failed pair(s) again" in s for s in said)


def test_a_slow_node_stays_slow_when_its_pairs_are_measured_again(monkeypatch, tmp_path):
    db, fleet_id, log, _ = check(monkeypatch, tmp_path, four(), slow=("n1",))
    got = load_fleet(db, fleet_id)
    assert [s["node_id"] for s in got["suspects"]] == ["n1"]
    again = [p for p in got["pairs"] if p["first_busbw_gbps"] is not None]
    assert len(again) == 3 and all(p["busbw_gbps"] == BAD and p["slow"] for p in again)
    # three pairs of n1 measured again: n1 can be in one pair per round
    assert [len(e[1]) for e in log if e[0] == "round"][-3:] == [1, 1, 1]


def test_the_rule_defaults_by_fleet_kind_and_is_stored_with_the_check(monkeypatch, tmp_path):
    db, fleet_id, _, _ = check(monkeypatch, tmp_path, four())
    assert load_fleet(db, fleet_id)["check"]["rule"]["rel"] == 0.5  # CPU nodes
    gpus = [Node(f"n{i}", f"10.0.0.{i + 1}", f"h{i}", gpus=2.0) for i in range(4)]
    (tmp_path / "g").mkdir()
    db, fleet_id, _, _ = check(monkeypatch, tmp_path / "g", gpus)
    assert load_fleet(db, fleet_id)["check"]["rule"]["rel"] == 0.15


def test_a_check_whose_driver_is_gone_reads_interrupted_and_a_live_one_running(
    monkeypatch, tmp_path
):
    import datetime as dt
    import os
    from pathlib import Path

    from orchestrator.store import Store, bring_up_to_date, liveness

    db, fleet_id, _, _ = check(monkeypatch, tmp_path, four())
    c = load_fleet(db, fleet_id)["check"]
    assert (c["driver_pid"], c["driver_host"]) == (os.getpid(), liveness.this_host())
    assert c["heartbeat_at"] is not None
    dead_pid = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no process has it
    now = dt.datetime.now(dt.timezone.utc)
    row = {"driver_host": liveness.this_host(), "heartbeat_at": now, "started_at": now}
    with Store(db) as s:
        s.insert(
            "fleet_checks",
            [{"fleet_id": "dead", "status": "running", "driver_pid": dead_pid, **row}],
        )
        s.insert(
            "fleet_checks",
            [{"fleet_id": "live", "status": "running", "driver_pid": os.getpid(), **row}],
        )
    bring_up_to_date(db)  # what every reading command does first (report --fleet, query, ...)
    with Reader(db) as r:
        got = {x["fleet_id"]: x for x in r.rows(Q.RECENT_FLEETS, limit=10)}
    assert (got["dead"]["status"], got["live"]["status"], got[fleet_id]["status"]) == (
        "interrupted",
        "running",
        "ok",
    )
    dead = load_fleet(db, "dead")["check"]
    assert "driver stopped before the end" in dead["error"] and dead["n_suspects"] is None


def test_a_v5_database_gets_the_fleet_driver_columns_keeping_its_checks(monkeypatch, tmp_path):
    import duckdb

    from orchestrator.store import SCHEMA_VERSION, Store

    db, fleet_id, _, _ = check(monkeypatch, tmp_path, four())
    con = duckdb.connect(db)  # what linksweep v5 wrote: no driver_pid, heartbeat_at
    for col in ("driver_pid", "heartbeat_at"):
        con.execute(f"ALTER TABLE fleet_checks DROP COLUMN {col}")
    con.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    con.close()
    with Store(db) as s:
        assert s.query("SELECT value FROM meta WHERE key = 'schema_version'")[1] == [
            (str(SCHEMA_VERSION),)
        ]
        assert s.query("SELECT fleet_id, status, driver_pid FROM fleet_checks")[1] == [
            (fleet_id, "ok", None)
        ]


def _mixed_fleet(slowed=None):
    """2 A100 nodes (8 GPUs), 2 A10G nodes (4 GPUs) and a CPU node, each healthy for what it is
    (``slowed``: that node 4x slower in every figure), as fake_ray_side's plants."""
    a100, a10g = "NVIDIA A100-SXM4-40GB", "NVIDIA A10G"
    model = {"a0": a100, "a1": a100, "g0": a10g, "g1": a10g}
    gpus = {"a0": 8.0, "a1": 8.0, "g0": 4.0, "g1": 4.0, "c0": 0.0}
    nodes = [Node(n, f"10.0.0.{i + 1}", f"h{i}", gpus=g) for i, (n, g) in enumerate(gpus.items())]
    k = {n: 4.0 if n == slowed else 1.0 for n in gpus}

    def inter(a, b):
        kinds = {model.get(a), model.get(b)}
        x = 0.9 if None in kinds else 40.0 if kinds == {a100} else 5.0 if kinds == {a10g} else 4.0
        return x / max(k[a], k[b])

    intra = {n: {a100: 230.0, a10g: 12.0}.get(model.get(n), 1.5) / k[n] for n in gpus}
    tokens = {n: {a100: 130e3, a10g: 35e3}.get(model.get(n), 650.0) / k[n] for n in gpus}
    plant = {"inter": inter, "intra": intra, "tokens": tokens, "gpu_names": model}
    return nodes, plant


@pytest.mark.parametrize("slowed", [None, "g1"])
def test_a_mixed_fleet_is_judged_per_kind_and_gpu_model(monkeypatch, tmp_path, slowed):
    """One population put a CPU node's figures in the A100s' median and the A10Gs' tokens/s
    against the A100s': the CPU node was named, and the CPU rule and 4 MiB judged the GPUs."""
    nodes, plant = _mixed_fleet(slowed)
    db, fleet_id, log, said = check(monkeypatch, tmp_path, nodes, **plant)
    got = load_fleet(db, fleet_id)
    assert [s["node_id"] for s in got["suspects"]] == ([slowed] if slowed else [])
    groups = {n["node_id"]: n["health"]["group"] for n in got["nodes"]}
    assert groups == {
        "a0": "gpu:NVIDIA A100-SXM4-40GB",
        "a1": "gpu:NVIDIA A100-SXM4-40GB",
        "g0": "gpu:NVIDIA A10G",
        "g1": "gpu:NVIDIA A10G",
        "c0": "cpu",
    }
    # message size per group: 64 MiB on GPU nodes, 4 MiB with the CPU node (gloo)
    sizes = {(p["node_a"], p["node_b"]): p["msg_bytes"] for p in got["pairs"]}
    assert sizes[("a0", "a0")] == sizes[("a0", "g0")] == 64 * 2**20
    assert sizes[("c0", "c0")] == 4 * 2**20
    assert all(b == 4 * 2**20 for (a, c), b in sizes.items() if "c0" in (a, c))
    rule = got["check"]["rule"]
    assert (rule["rel"], rule["by_kind"]["cpu"]["rel"], rule["by_kind"]["gpu"]["rel"]) == (
        0.15,
        0.5,
        0.15,
    )
    assert got["check"]["max_mb"] == 64.0
    assert log.index(("health", tuple(groups))) < log.index(("intra", tuple(groups)))
    assert any(s.startswith("groups (judged apart): gpu:NVIDIA A100-SXM4-40GB (2)") for s in said)
    assert any("pair(s) across groups" in n for n in got["check"]["notes"])
