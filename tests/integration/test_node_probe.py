"""The per-node probe (workloads/probe.py) and NVML on the machine that runs the tests, without Ray.

``read_topo_text`` runs nvidia-smi, ``probe_node`` a child Python that imports torch: real
subprocesses, so these are integration tests. What the driver makes of a probe's report is
unit-tested on captured text in tests/unit/test_discovery.py.
"""

from __future__ import annotations

import ctypes.util
import shutil

import pytest

from orchestrator.topo import parse_topo
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


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_NVIDIA_SMI, reason="no nvidia-smi")
def test_read_topo_text_on_a_gpu_node():
    text, why = read_topo_text()
    assert text is not None, why
    assert parse_topo(text).gpus[0] == "GPU0"


@pytest.mark.skipif(HAS_NVML, reason="this machine has an NVML library")
def test_nvml_unavailable_on_this_cpu_machine():
    ok, reason = nvml_available()
    assert ok is False
    # e.g. "nvmlInit failed: NVMLError_LibraryNotFound: NVML Shared Library Not Found"
    assert "nvmlInit failed" in reason or "cannot import pynvml" in reason


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_NVML, reason="no NVML library")
def test_real_nvml_sampler_and_inventory():
    ok, reason = nvml_available()
    assert ok, reason
    inv = nvml_inventory()
    assert inv and inv[0]["name"]
    sampler = NvmlSampler(0, interval_s=0.05)
    sampler.start()
    result = sampler.stop()
    assert len(result.samples) >= 2 and result.error is None


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
