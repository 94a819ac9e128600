"""clusters/: the launcher YAMLs pass Ray's own schema and pin the versions linksweep is tested
with. Needs Ray's config helpers (``import ray``), no Ray session, no cloud.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

CLUSTERS = Path(__file__).resolve().parents[2] / "clusters"
LAUNCHERS = ["onprem-gpu.yaml", "aws-gpu.yaml"]


def _load(name: str) -> dict:
    return yaml.safe_load((CLUSTERS / name).read_text())


@pytest.mark.parametrize("name", LAUNCHERS)
def test_launcher_passes_rays_schema(name):
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = _load(name)
    assert config["cluster_name"] and config["provider"]["type"]
    prepared = prepare_config(config)  # what `ray up` does first, defaults merged in
    validate_config(prepared)
    assert prepared["head_node_type"] in prepared["available_node_types"]


@pytest.mark.parametrize("name", LAUNCHERS)
def test_launcher_installs_pinned_linksweep_and_starts_ray(name):
    import ray
    import torch

    config = _load(name)
    setup = "\n".join(config["setup_commands"])
    # Pins match what linksweep is tested with (this venv).
    assert f'"ray[default]=={ray.__version__}"' in setup
    assert f"torch=={torch.__version__.split('+')[0]}" in setup
    (mount,) = [target for target, source in config["file_mounts"].items() if source == "."]
    assert f"pip install -q -e {mount}" in setup
    head = " ".join(config["head_start_ray_commands"])
    assert "ray start --head --port=6379 --dashboard-host=0.0.0.0" in head
    assert "ray start --address=$RAY_HEAD_IP:6379" in " ".join(config["worker_start_ray_commands"])
