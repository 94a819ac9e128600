"""orchestrator.scheduler, the one module that imports ray: rank placement (pure, but importing
the module imports ray, so it lives here) and running a function on every node of the session's
Ray cluster."""

from __future__ import annotations

import pytest

from orchestrator.scheduler import RankPlacement, place_ranks, run_on_every_node
from workloads.contract import NodeInfo


def _info(node: str, gpus: tuple[str, ...], pid: int) -> NodeInfo:
    return NodeInfo(
        node_id=node, hostname=f"host-{node}", ip=f"10.0.0.{pid}", gpu_ids=gpus, pid=pid
    )


def test_place_ranks_local_ranks_and_visible_gpus_per_node():
    infos = [
        _info("a", ("3",), 1),
        _info("b", ("0",), 2),
        _info("a", ("1",), 3),
        _info("b", ("2",), 4),
        _info("a", ("0",), 5),
    ]
    placed = place_ranks(infos)
    assert all(isinstance(p, RankPlacement) for p in placed)
    assert [p.rank for p in placed] == [0, 1, 2, 3, 4]
    # local ranks count up per node in rank order
    assert [(p.node_id, p.local_rank) for p in placed] == [
        ("a", 0),
        ("b", 0),
        ("a", 1),
        ("b", 1),
        ("a", 2),
    ]
    # every rank sees the GPUs of all the run's ranks on its node, in rank order
    assert {p.rank: p.visible_gpus for p in placed} == {
        0: ("3", "1", "0"),
        1: ("0", "2"),
        2: ("3", "1", "0"),
        3: ("0", "2"),
        4: ("3", "1", "0"),
    }
    # the rank's own GPU and where it ran are kept as the actor reported them
    assert [(p.gpu_ids, p.hostname, p.ip, p.pid) for p in placed][2] == (
        ("1",),
        "host-a",
        "10.0.0.3",
        3,
    )


def test_place_ranks_without_gpus():
    placed = place_ranks([_info("a", (), 1), _info("a", (), 2)])
    assert [(p.local_rank, p.visible_gpus, p.gpu_ids) for p in placed] == [
        (0, None, ()),
        (1, None, ()),
    ]
    assert place_ranks([]) == []


@pytest.mark.slow
def test_run_on_every_node_answers_per_node_and_never_raises(ray_cluster):
    import ray

    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}

    def where() -> str:
        return ray.get_runtime_context().get_node_id()

    answers = run_on_every_node(where, timeout_s=120)
    assert {a.node["node_id"] for a in answers} == alive
    assert all(a.error is None and a.result == a.node["node_id"] for a in answers)

    def broken() -> None:
        raise OSError("disk on fire")

    failed = run_on_every_node(broken, timeout_s=120)
    assert len(failed) == len(alive)
    assert all(a.result is None and "disk on fire" in a.error for a in failed)
