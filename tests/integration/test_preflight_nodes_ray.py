"""The NVMe preflight's per-node facts come back from every node that can run a rank, through the
session's Ray cluster (two CPU nodes), each read in a task on that node."""

from __future__ import annotations

import pytest

from orchestrator.sweep import preflight as pf
from orchestrator.sweep.spec import parse_spec


@pytest.mark.slow
def test_every_rank_node_answers_its_own_nvme_facts(ray_cluster, tmp_path):
    import ray

    spec = parse_spec(
        {
            "name": "nvme",
            "nvme_path": str(tmp_path / "swap"),
            "grid": {"strategy": ["zero3"], "offload": ["nvme"]},
        }
    )
    alive = {n["NodeID"][:12] for n in ray.nodes() if n["Alive"]}
    answers = pf.ask_rank_nodes(spec, excluded=[], timeout_s=300)
    assert {a.node.split()[1] for a in answers} == alive  # both CPU nodes run ranks
    for a in answers:
        assert a.error is None and a.gpu_ranks is False
        assert a.facts.aio is not None, a.facts.aio_error  # torch and DeepSpeed answered
        assert a.facts.aio.cuda is False  # a CPU node: built without CUDA
        assert a.facts.nvme_path_error is None  # the folder is writable where the ranks run
    # the decision over real answers agrees with each node's own facts
    assert (pf.nvme_errors(spec.nvme_path, answers) == []) == all(
        a.facts.aio.libaio and a.facts.aio.ninja for a in answers
    )

    # an excluded node is never asked
    one = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])[0]
    kept_off = [{"entry": one, "source": "exclude_nodes", "node_id": one}]
    answers = pf.ask_rank_nodes(spec, excluded=kept_off, timeout_s=300)
    assert [a.node.split()[1] for a in answers] == [n[:12] for n in alive if n != one[:12]]
