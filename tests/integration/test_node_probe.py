"""The per-node probe (workloads/probe.py) and NVML on the machine that runs the tests, without Ray.

``read_topo_text`` runs nvidia-smi, ``probe_node`` a child Python that imports torch: real
subprocesses, so these are integration tests. What the driver makes of a probe's report is
unit-tested on captured text in tests/unit/test_discovery.py.
"""

from __future__ import annotations

import ctypes.util
import shutil

import pytest

from orchestrator.topology.matrix import parse_topo
from workloads.contract import NodeReport
from workloads.probe import probe_node, read_topo_text
from workloads.telemetry import NvmlSampler, nvml_available, nvml_inventory

HAS_NVIDIA_SMI = shutil.which("nvidia-smi") is not None
HAS_NVML = ctypes.util.find_library("nvidia-ml") is not None


@pytest.mark.skipif(HAS_NVIDIA_SMI, reason="this node has nvidia-smi")
def test_read_topo_text_without_driver():
    text, why = read_topo_text()
    assert text is None
    assert "nvidia-smi not found" in why


def _nvml_devices() -> list[dict]:
    ok, reason = nvml_available()
    assert ok, reason
    inv = nvml_inventory()
    assert inv, "NVML answered but lists no GPU"
    return inv


@pytest.mark.gpu
def test_topo_probe_finds_every_gpu_pair_on_a_gpu_node():
    """nvidia-smi's matrix names the GPUs NVML lists, and holds a link for every pair of them."""
    text, why = read_topo_text()
    assert text is not None, why
    topology = parse_topo(text)
    n = len(_nvml_devices())
    assert list(topology.gpus) == [f"GPU{i}" for i in range(n)]
    pairs = {(a, b) for a in topology.gpus for b in topology.gpus if a != b}
    assert pairs <= set(topology.links), sorted(pairs - set(topology.links))
    assert all(topology.links[p] for p in pairs)


@pytest.mark.skipif(HAS_NVML, reason="this machine has an NVML library")
def test_nvml_unavailable_on_this_cpu_machine():
    ok, reason = nvml_available()
    assert ok is False
    # e.g. "nvmlInit failed: NVMLError_LibraryNotFound: NVML Shared Library Not Found"
    assert "nvmlInit failed" in reason or "cannot import pynvml" in reason


@pytest.mark.gpu
def test_nvml_inventory_matches_torch_and_the_sampler_reads_gpu0():
    """NVML and CUDA see the same GPUs: as many as torch counts (when CUDA_VISIBLE_DEVICES hides
    none), with the same names and UUIDs (compared as sets: CUDA orders fastest first unless
    CUDA_DEVICE_ORDER=PCI_BUS_ID, NVML by PCI bus id); the sampler reads real values."""
    import os

    import torch

    inv = _nvml_devices()
    n = torch.cuda.device_count()
    cuda_names = sorted(torch.cuda.get_device_name(i) for i in range(n))
    cuda_uuids = {f"GPU-{torch.cuda.get_device_properties(i).uuid}" for i in range(n)}
    nvml_uuids = {g["uuid"] for g in inv}
    assert cuda_uuids <= nvml_uuids, (cuda_uuids, nvml_uuids)
    if not os.environ.get("CUDA_VISIBLE_DEVICES"):
        assert len(inv) == n
        assert sorted(g["name"] for g in inv) == cuda_names
    assert all(g["memory_total_bytes"] and g["pci_bus_id"] for g in inv)
    sampler = NvmlSampler(0, interval_s=0.05)
    sampler.start()
    torch.ones(1024, 1024, device="cuda").sum().item()  # something for the sampler to see
    result = sampler.stop()
    assert result.error is None and len(result.samples) >= 2
    assert all(s.temp_c is not None and s.temp_c > 0 for s in result.samples)


def test_probe_node_here_never_raises_and_says_why():
    """The probe as a plain call on this machine: a report, each absent part with its reason;
    node_id, ip and Ray's resources are left for the driver to fill in."""
    report = probe_node()
    assert isinstance(report, NodeReport)
    assert report.node_id == "" and report.hostname and report.error is None
    assert report.torch_version and report.cuda_status
    if not HAS_NVIDIA_SMI:
        assert report.topo_text is None and "nvidia-smi not found" in report.topo_status
    if not HAS_NVML:
        assert not report.nvml_ok and report.nvml_status and report.inventory == []
    if not report.cuda_available:
        assert report.p2p is None and report.cuda_device_count == 0
        assert report.cuda_status != "ok"
    else:
        n = report.cuda_device_count
        assert len(report.p2p) == n and all(report.p2p[i][i] is None for i in range(n))


def test_session_cluster_declares_no_gpus(ray_cluster):
    """Both logical nodes are this one machine: each declares 0 GPUs, never autodetects (on a
    GPU runner both would otherwise advertise the same physical GPUs)."""
    import ray

    nodes = [ray_cluster.head_node, *ray_cluster.worker_nodes]
    assert len(nodes) == 2
    assert [n._ray_params.num_gpus for n in nodes] == [0, 0]  # what each raylet was given
    assert ray.cluster_resources().get("GPU", 0) == 0
