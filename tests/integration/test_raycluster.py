"""orchestrator.raycluster, the one package that imports ray: running a function on every node
of the session's Ray cluster. (Rank placement is pure: tests/unit/test_planner.py; why a join
failed: tests/unit/test_join_error.py and tests/integration/test_join_error.py.)"""

from __future__ import annotations

import pytest

from orchestrator.raycluster.nodes import run_on_every_node


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
