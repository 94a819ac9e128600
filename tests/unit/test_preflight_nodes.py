"""The NVMe preflight asks the nodes that run ranks, not the driver's machine
(``orchestrator.sweep.preflight``: ``rank_nodes`` and ``nvme_errors`` pure; ``preflight`` with Ray's node
table and per-node task faked at ``raycluster.nodes``' boundary)."""

from __future__ import annotations

import pytest

from orchestrator.raycluster.nodes import NodeAnswer
from orchestrator.sweep import preflight as pf
from orchestrator.sweep.spec import SpecError, parse_spec
from workloads.aio_check import AioFacts, NodeNvmeFacts

CUDA_HOME = "/usr/local/cuda"


def aio(**over) -> AioFacts:
    base = dict(cuda=False, cuda_home=None, nvcc=False, libaio=True, ninja=True, torch_cuda=None)
    return AioFacts(**(base | over))


def node_facts(path_error: str | None = None, **over) -> NodeNvmeFacts:
    return NodeNvmeFacts(aio=aio(**over), aio_error=None, nvme_path_error=path_error)


GPU_NODE_OK = dict(cuda=True, cuda_home=CUDA_HOME, nvcc=True, torch_cuda="12.8")


def node(node_id: str, cpus: float, gpus: float, host: str) -> dict:
    return {"node_id": node_id, "hostname": host, "ip": f"10.0.0.{len(host)}", "cpus": cpus,
            "gpus": gpus, "resources": {"CPU": cpus, "GPU": gpus}}  # fmt: skip


HEAD = node("aa" * 28, 8, 0, "head")
GPU1 = node("bb" * 28, 96, 8, "gpu-1")
GPU2 = node("cc" * 28, 96, 8, "gpu-2")


def spec(tmp_path, **over):
    body = {
        "name": "nvme",
        "nvme_path": str(tmp_path / "swap"),
        "grid": {"strategy": ["zero3"], "offload": ["nvme"]},
    }
    return parse_spec(body | over)


def answer(n: dict, gpu: bool, facts: NodeNvmeFacts | None, error: str | None = None):
    return pf.NodeNvmeAnswer(f"node {n['node_id'][:12]} ({n['hostname']})", gpu, facts, error)


# --- which nodes run ranks ------------------------------------------------------------------


def test_gpu_less_head_runs_no_rank_on_a_gpu_cluster():
    nodes, gpu = pf.rank_nodes([HEAD, GPU1, GPU2], excluded=[])
    assert gpu is True
    assert [n["hostname"] for n in nodes] == ["gpu-1", "gpu-2"]


def test_cpu_cluster_every_node_runs_ranks():
    nodes, gpu = pf.rank_nodes([HEAD, node("dd" * 28, 4, 0, "cpu-2")], excluded=[], world_size=2)
    assert gpu is False and [n["hostname"] for n in nodes] == ["head", "cpu-2"]


def test_excluded_nodes_run_no_rank():
    excluded = [{"entry": "gpu-2", "source": "exclude_nodes", "node_id": GPU2["node_id"]}]
    nodes, gpu = pf.rank_nodes([HEAD, GPU1, GPU2], excluded)
    assert gpu is True and [n["hostname"] for n in nodes] == ["gpu-1"]
    # every GPU node excluded: the ranks would go to CPU nodes, built without CUDA
    excluded.append({"entry": "gpu-1", "source": "exclude_nodes", "node_id": GPU1["node_id"]})
    nodes, gpu = pf.rank_nodes([HEAD, GPU1, GPU2], excluded)
    assert gpu is False and [n["hostname"] for n in nodes] == ["head"]


def test_shared_gpu_rehearsal_still_needs_a_gpu_node():
    nodes, gpu = pf.rank_nodes([HEAD, node("ee" * 28, 8, 1, "g5")], [], ranks_per_gpu=2)
    assert gpu is True and [n["hostname"] for n in nodes] == ["g5"]


# --- what the answers say -------------------------------------------------------------------


def test_gpu_nodes_with_toolkit_pass_whatever_the_head_lacks():
    answers = [answer(n, True, node_facts(**GPU_NODE_OK)) for n in (GPU1, GPU2)]
    assert pf.nvme_errors("/nvme", answers) == []


def test_cuda_node_without_nvcc_is_refused_by_name():
    answers = [
        answer(GPU1, True, node_facts(**GPU_NODE_OK)),
        answer(GPU2, True, node_facts(**(GPU_NODE_OK | {"nvcc": False}))),
    ]
    errors = pf.nvme_errors("/nvme", answers)
    assert len(errors) == 1
    assert "gpu-2" in errors[0] and "gpu-1" not in errors[0]
    assert "has no bin/nvcc" in errors[0] and "CUDA 12.8 toolkit" in errors[0]
    assert "allowed offloads without it: none, cpu" in errors[0]


def test_gpu_rank_needs_the_toolkit_even_when_the_probe_task_saw_no_gpu():
    """The probe task asks Ray for no GPU; what decides the build is whether ranks get one."""
    errors = pf.nvme_errors("/nvme", [answer(GPU1, True, node_facts(torch_cuda="12.8"))])
    assert len(errors) == 1 and "CUDA 12.8 toolkit" in errors[0] and "gpu-1" in errors[0]
    assert pf.nvme_errors("/nvme", [answer(HEAD, False, node_facts(cuda=True))]) == []


def test_nodes_with_the_same_gap_share_one_line_naming_each():
    answers = [answer(n, False, node_facts(libaio=False, ninja=False)) for n in (HEAD, GPU1)]
    (line,) = pf.nvme_errors("/nvme", answers)
    assert "2 nodes" in line and "head" in line and "gpu-1" in line
    assert "libaio-dev" in line and "pip install ninja" in line


def test_unwritable_nvme_path_is_named_per_node():
    answers = [
        answer(GPU1, True, node_facts("Permission denied", **GPU_NODE_OK)),
        answer(GPU2, True, node_facts(**GPU_NODE_OK)),
    ]
    (line,) = pf.nvme_errors("/nvme", answers)
    assert line.startswith("nvme_path: '/nvme' is not a writable folder on node")
    assert "gpu-1" in line and "gpu-2" not in line and "Permission denied" in line


def test_a_node_that_does_not_answer_refuses():
    failed = NodeNvmeFacts(aio=None, aio_error="ImportError: no deepspeed", nvme_path_error=None)
    errors = pf.nvme_errors(
        "/nvme", [answer(GPU1, True, None, "no answer within 180 s"), answer(GPU2, True, failed)]
    )
    assert any("could not be checked on" in e and "gpu-1" in e and "180 s" in e for e in errors)
    assert any("gpu-2" in e and "ImportError: no deepspeed" in e for e in errors)


# --- preflight asks the rank nodes through Ray ---------------------------------------------


@pytest.fixture
def fake_ray(monkeypatch):
    """Ray's node table and ``run_on_every_node`` faked: each node answers its own facts."""
    cluster = {"nodes": [HEAD, GPU1, GPU2], "facts": {}, "asked": []}

    def run_on_every_node(fn, timeout_s, skip=(), args=(), only=None):
        asked = [n for n in cluster["nodes"] if only is None or n["node_id"] in only]
        cluster["asked"].append(([n["hostname"] for n in asked], args, fn.__name__))
        return [NodeAnswer(n, result=cluster["facts"][n["hostname"]]) for n in asked]

    monkeypatch.setattr(pf, "alive_nodes", lambda: list(cluster["nodes"]))
    monkeypatch.setattr(pf, "run_on_every_node", run_on_every_node, raising=False)
    return cluster


def test_cpu_head_without_libaio_does_not_refuse_what_gpu_nodes_can_run(
    fake_ray, monkeypatch, tmp_path
):
    """Failed before: preflight read the driver's own facts (a GPU-less head without libaio) and
    refused a sweep the GPU nodes could run."""
    head_facts = aio(libaio=False)
    monkeypatch.setattr(pf, "aio_facts", lambda: head_facts, raising=False)  # the old seam
    fake_ray["facts"] = {"head": node_facts(libaio=False), "gpu-1": node_facts(**GPU_NODE_OK),
                         "gpu-2": node_facts(**GPU_NODE_OK)}  # fmt: skip
    s = spec(tmp_path)
    pf.preflight(s)  # the call as `linksweep run` and selftest make it
    assert fake_ray["asked"] == [(["gpu-1", "gpu-2"], (s.nvme_path,), "node_nvme_facts")]


def test_cuda_node_without_toolkit_is_refused_though_the_driver_has_one(
    fake_ray, monkeypatch, tmp_path
):
    """Failed before: only the driver was checked; a GPU node without nvcc failed in its ranks."""
    monkeypatch.setattr(pf, "aio_facts", lambda: aio(**GPU_NODE_OK), raising=False)
    fake_ray["facts"] = {"gpu-1": node_facts(**GPU_NODE_OK),
                         "gpu-2": node_facts(**(GPU_NODE_OK | {"cuda_home": None}))}  # fmt: skip
    with pytest.raises(SpecError) as err:
        pf.preflight(spec(tmp_path))
    text = str(err.value)
    assert "gpu-2" in text and "gpu-1" not in text and "CUDA 12.8 toolkit" in text


def test_excluded_node_is_not_asked(fake_ray, tmp_path):
    fake_ray["facts"] = {"gpu-1": node_facts(**GPU_NODE_OK)}  # gpu-2 would lack everything
    excluded = [{"entry": "gpu-2", "source": "exclude_nodes", "node_id": GPU2["node_id"]}]
    pf.preflight(spec(tmp_path), excluded=excluded)
    assert fake_ray["asked"][0][0] == ["gpu-1"]


def test_sweeps_without_nvme_ask_nothing(fake_ray, tmp_path):
    pf.preflight(spec(tmp_path, grid={"strategy": ["zero3"], "offload": ["cpu"]}), excluded=[])
    assert fake_ray["asked"] == []
