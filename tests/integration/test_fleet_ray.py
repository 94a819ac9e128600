"""The fleet check's probes on the session Ray cluster (2 nodes of 2 CPUs, one machine):
orchestrator/raycluster/pinned_probes.py placing workloads/fleet_probe.py on nodes, for real.

Each stage's wall time is printed (``pytest -s``) so a report can quote it. Run under
``flock /tmp/linksweep-heavy.lock``: it starts Ray actors and trains a small model on each node.
"""

from __future__ import annotations

import time

import pytest

from orchestrator.raycluster.pinned_probes import (
    BenchResult,
    FleetNode,
    LinkProbes,
    fleet_nodes,
    read_health,
)
from workloads.fleet_contract import ComputeRecord, HealthRecord
from workloads.fleet_probe import CPU_PROBE, NO_GPU_NOTE

# quiet lane (tests/lanes.py): failing probes must end well before their deadline
pytestmark = [pytest.mark.slow, pytest.mark.quiet]

MSG_BYTES = 2**20


def _stage(name: str, t0: float) -> float:
    now = time.monotonic()
    print(f"fleet stage {name}: {now - t0:.2f} s")
    return now


@pytest.fixture(scope="module")
def nodes(ray_cluster) -> list[FleetNode]:
    found, skipped = fleet_nodes()
    assert len(found) == 2 and skipped == []
    assert [(n.cpus, n.gpus) for n in found] == [(2.0, 0.0), (2.0, 0.0)]
    assert found == sorted(found, key=lambda n: (n.ip, n.node_id))
    return found


def _ok(r: BenchResult, kind: str, world: int) -> None:
    assert r.status == "ok", r.error
    assert (r.kind, r.world_size, r.backend, r.msg_bytes) == (kind, world, "gloo", MSG_BYTES)
    assert len(r.times_s) == 3 and all(t > 0 for t in r.times_s)
    assert r.time_s == sorted(r.times_s)[1]
    assert r.busbw_gbps is not None and r.busbw_gbps > 0
    assert r.wall_s >= sum(r.times_s)


def test_links_compute_and_health_on_two_cpu_nodes(nodes):
    a, b = (n.node_id for n in nodes)
    t = time.monotonic()
    with LinkProbes(nodes, {}, timeout_s=120) as probes:
        assert probes.start() == {}
        t = _stage("start: 2 ranks per node, torch imported", t)
        intra = probes.intra([a], MSG_BYTES, iters=3, warmup=1)
        intra += probes.intra([b], MSG_BYTES, iters=3, warmup=1)
        t = _stage("intra, node a then node b", t)
        for r, node in zip(intra, (a, b), strict=True):
            _ok(r, "intra", 2)
            assert (r.node_a, r.node_b, r.ifname) == (node, node, "lo")
        (pair,) = probes.round([(a, b)], MSG_BYTES, iters=3, warmup=1)
        t = _stage("round (one pair)", t)
        print(f"pair: {pair}")
        _ok(pair, "inter", 2)
        assert (pair.node_a, pair.node_b) == (a, b)
        assert pair.ifname not in (None, "lo")  # the interface holding the nodes' Ray IP
        (again,) = probes.round([(b, a)], MSG_BYTES, iters=3, warmup=1)  # actors reused
        t = _stage("round again (actors reused)", t)
        _ok(again, "inter", 2)
        records = probes.compute([a, b], timeout_s=300)  # on each node's first rank
        t = _stage("compute probe (both nodes at once, on the link's ranks)", t)

    print({k[:8]: round(v.tokens_per_s, 1) for k, v in records.items() if not isinstance(v, str)})
    assert set(records) == {a, b}
    for rec in records.values():
        assert isinstance(rec, ComputeRecord), rec
        assert (rec.device, rec.model, rec.precision) == ("cpu", "gpt2-tiny", "fp32")
        assert len(rec.step_times_s) == CPU_PROBE.timed_steps and rec.tokens_per_s > 0
        assert rec.health_under_load is None

    health = read_health(nodes, timeout_s=60)
    _stage("health", t)
    assert set(health) == {a, b}
    for h in health.values():
        assert isinstance(h, HealthRecord)
        assert (h.note, h.error, h.gpus) == (NO_GPU_NOTE, None, ())
        assert h.cpu["cpus"] >= 1 and h.cpu["mem_available_bytes"] > 0


def test_a_failing_pair_is_a_result_and_the_next_call_gets_fresh_actors(nodes):
    a, b = (n.node_id for n in nodes)
    t = time.monotonic()
    # gloo cannot bind to an interface that does not exist: both ranks fail at group creation
    with LinkProbes(nodes, {"GLOO_SOCKET_IFNAME": "nosuch0"}, timeout_s=60) as probes:
        (bad,) = probes.round([(a, b)], MSG_BYTES, iters=2, warmup=0)
        t = _stage("failing round", t)
        assert (bad.status, bad.times_s, bad.time_s, bad.busbw_gbps) == ("failed", (), None, None)
        print(f"failed pair: {bad}")
        assert "nosuch0" in bad.error
        assert bad.wall_s < 10  # the ranks fail at group creation, long before the deadline
        # intra ranks bind to loopback whatever the link says: restarted actors measure fine
        results = probes.intra([a, b], MSG_BYTES, iters=3, warmup=1)
        _stage("intra after the failure (fresh actors)", t)
        for r in results:
            _ok(r, "intra", 2)


def test_bad_arguments_name_the_field(nodes):
    a, b = (n.node_id for n in nodes)
    probes = LinkProbes(nodes, {})  # no actor starts before a measurement
    with pytest.raises(ValueError, match="msg_bytes must be a power of two >= 4"):
        probes.intra([a], 3 * 2**20)
    with pytest.raises(ValueError, match="a node is in two pairs"):
        probes.round([(a, b), (b, a)], MSG_BYTES)
    with pytest.raises(ValueError, match=r"node ids \['nope'\] are not"):
        probes.round([(a, "nope")], MSG_BYTES)
    probes.close()


def test_a_pair_past_the_deadline_fails_and_its_ranks_are_replaced(nodes):
    a, b = (n.node_id for n in nodes)
    with LinkProbes(nodes, {}, timeout_s=120) as probes:
        assert probes.start() == {}
        probes.timeout_s = 0.5  # 20 all_reduces of 64 MiB take seconds over gloo on CPU
        t0 = time.monotonic()
        (late,) = probes.round([(a, b)], 64 * 2**20, iters=20, warmup=1)
        waited_s = time.monotonic() - t0
        print(f"late pair: {late.status} {late.error} after {waited_s:.2f} s")
        assert (late.status, late.times_s, late.busbw_gbps) == ("failed", (), None)
        # the driver's deadline, or the ranks' own process-group timeout: whichever came first
        assert "no answer within" in late.error or "rank" in late.error
        assert waited_s < 10
        probes.timeout_s = 120
        (fine,) = probes.round([(a, b)], MSG_BYTES, iters=3, warmup=1)
        _ok(fine, "inter", 2)
