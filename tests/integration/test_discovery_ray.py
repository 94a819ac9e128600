"""Discovery and ``linksweep doctor`` on the session's 2-node Ray cluster (no GPU on this machine).

The pure parts (rows, findings, the inspect commands on captured text):
tests/unit/test_discovery.py.
"""

from __future__ import annotations

import pytest

from orchestrator.topology.discovery import node_rows

CPU_ONLY_MESSAGE = (
    "no GPUs found on any node: link variants cannot differ on this cluster; "
    "the CPU path (gloo) still runs sweeps"
)


@pytest.mark.slow
def test_discover_and_doctor_on_cpu_cluster(ray_cluster, capsys):
    import ray

    from orchestrator.cli import main
    from orchestrator.topology.discovery import discover_nodes

    reports = discover_nodes(timeout_s=120)
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(reports) == 2 and {r.node_id for r in reports} == alive
    for r in reports:
        assert r.error is None, r.error
        assert r.hostname
        assert r.cpus == 2.0 and r.gpus == 0.0
        assert not r.nvml_ok and r.nvml_status  # absent, with the reason
        assert r.inventory == [] and r.p2p is None and not r.cuda_available

    rows = node_rows("s", reports)
    assert all(row["nvml"].startswith("absent: ") and len(row["nvml"]) > 8 for row in rows["nodes"])
    assert rows["gpus"] == [] and rows["gpu_links"] == []

    capsys.readouterr()
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert CPU_ONLY_MESSAGE in out
    assert out.count("== node ") == 2
