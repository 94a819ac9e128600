"""clusters/: GPU counts agree and sweeps fit. Pure file checks: no cloud, no Kubernetes, no Ray.

Checks that need Ray's own code (its launcher schema, its version):
tests/integration/test_clusters_ray.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CLUSTERS = REPO / "clusters"
SWEEPS = sorted((REPO / "sweeps").glob("*.yaml"))

# GPUs per instance type, from the AWS instance type pages; the YAML must declare the same.
AWS_GPUS = {"p4d.24xlarge": 8, "g5.12xlarge": 4}


def _load(name: str) -> dict:
    return yaml.safe_load((CLUSTERS / name).read_text())


def _kuberay_workers() -> list[dict]:
    return _load("kuberay-gpu.yaml")["spec"]["workerGroupSpecs"]


def _pod_gpus(group: dict) -> int:
    (container,) = [
        c
        for c in group["template"]["spec"]["containers"]
        if "nvidia.com/gpu" in c["resources"]["limits"]
    ]
    return int(container["resources"]["limits"]["nvidia.com/gpu"])


# --------------------------------------------------------------------------------------
# Cluster launcher YAMLs


def test_onprem_lists_machines_and_leaves_node_types_to_ray():
    config = _load("onprem-gpu.yaml")
    provider = config["provider"]
    assert provider["type"] == "local"
    assert provider["head_ip"] and provider["worker_ips"]
    # Ray's local provider aborts on available_node_types: it builds local.cluster.node itself
    # and detects each machine's GPUs (ray/autoscaler/_private/local/config.py).
    assert "available_node_types" not in config and "head_node_type" not in config


def test_aws_node_types_differ_in_link_and_declare_their_gpus():
    config = _load("aws-gpu.yaml")
    assert config["provider"]["type"] == "aws"
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0  # the driver's node, never a rank's
    gpu_types = {k: t for k, t in types.items() if t["resources"].get("GPU", 0) > 0}
    instances = {t["node_config"]["InstanceType"] for t in gpu_types.values()}
    assert instances == set(AWS_GPUS)  # NVSwitch and PCIe-only
    for node_type in gpu_types.values():
        gpus = node_type["resources"]["GPU"]
        assert gpus == AWS_GPUS[node_type["node_config"]["InstanceType"]]
        assert gpus >= 2  # pack with world_size 2 fits on one node


# --------------------------------------------------------------------------------------
# KubeRay


def test_kuberay_manifest_shape():
    doc = _load("kuberay-gpu.yaml")
    assert doc["apiVersion"] == "ray.io/v1"
    assert doc["kind"] == "RayCluster"
    spec = doc["spec"]
    head = spec["headGroupSpec"]
    assert head["template"]["spec"]["containers"]
    assert spec["workerGroupSpecs"]
    launcher_pin = re.search(
        r"ray\[default\]==([\w.]+)", " ".join(_load("aws-gpu.yaml")["setup_commands"])
    )
    assert spec["rayVersion"] == launcher_pin.group(1)
    for params in [head["rayStartParams"]] + [
        g["rayStartParams"] for g in spec["workerGroupSpecs"]
    ]:
        # KubeRay's rayStartParams is map[string]string: a bare YAML number is rejected.
        assert all(isinstance(v, str) for v in params.values()), params


def test_kuberay_gpu_limit_matches_num_gpus_and_fits_pack():
    for group in _kuberay_workers():
        gpus = _pod_gpus(group)
        assert gpus == int(group["rayStartParams"]["num-gpus"]), group["groupName"]
        assert gpus >= 2, "pack with world_size 2 needs 2 GPUs in one pod"
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]


@pytest.mark.parametrize("sweep", SWEEPS or [None], ids=lambda p: p.name if p else "none")
def test_sweeps_fit_the_kuberay_cluster(sweep):
    if sweep is None:
        pytest.skip("no sweeps/*.yaml")
    spec = yaml.safe_load(sweep.read_text()) or {}
    world_size = spec.get("world_size")
    if not isinstance(world_size, int):
        pytest.skip(f"{sweep.name} has no world_size")
    placements = (spec.get("grid") or {}).get("placement", ["pack"])  # the spec's default
    placements = placements if isinstance(placements, list) else [placements]
    groups = _kuberay_workers()
    for placement in placements:
        if placement == "pack":  # all ranks in one pod
            assert max(_pod_gpus(g) for g in groups) >= world_size, (sweep.name, placement)
        elif placement == "spread":  # ranks_per_node ranks (1 GPU each) per pod, default 1
            k = spec.get("ranks_per_node") or 1
            pods = sum(g["replicas"] for g in groups if _pod_gpus(g) >= k)
            assert pods >= world_size // k, (sweep.name, placement, k)
        else:
            pytest.fail(f"{sweep.name}: unknown placement {placement!r}")


METRICS_EXPORT_PORT = "--metrics-export-port=8080"
"""What Prometheus scrapes on every node (docs/metrics.md): KubeRay's pods' port, fixed here too."""


@pytest.mark.parametrize("name", ["aws-gpu.yaml", "onprem-gpu.yaml"])
def test_every_ray_start_of_the_launcher_yamls_fixes_the_metrics_port(name):
    config = _load(name)
    starts = [
        command
        for key in ("head_start_ray_commands", "worker_start_ray_commands")
        for command in config[key]
        if "ray start" in command
    ]
    assert len(starts) == 2, starts  # the head's and the workers'
    assert all(METRICS_EXPORT_PORT in command for command in starts), starts
