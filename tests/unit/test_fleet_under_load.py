"""The fleet's compute probe on an 8-GPU node, as the hardware answers: the probe loads one GPU,
the seven others idle at a lower PCIe generation (``fake_nvml``: an idle GPU reads gen 1, a busy
one the generation its link trained at), and only the loaded GPU may be judged under load.

What runs is linksweep's own: ``FleetRank.compute`` -> ``compute_probe`` (the device decision
against the node's CUDA view, the model, AdamW, warmup and timed steps, the health read from a
background thread during a timed step) -> the fleet's reasons for a node. Faked: CUDA (the
profile's view; tensors asked on ``cuda:0`` are made on the CPU and mark GPU 0 busy in the
node's NVML) and NVML; the probe's workload is shrunk to gpt2-tiny for 2 steps (its figures are
not what is checked here)."""

from __future__ import annotations

import pytest

from orchestrator.fleet import loop as fleet
from tests.unit.hwprofiles import PROFILES, installed
from workloads import fleet_probe

TINY = fleet_probe.ProbeConfig(
    "gpt2-tiny", seq_len=8, micro_batch_size=1, warmup_steps=1, timed_steps=2
)


@pytest.fixture
def probed(monkeypatch, tmp_path):
    """(the node, its idle health, the probe's record) for the h100x8 profile's node, the
    probe's actor given GPU ``ray_gpu`` by Ray."""

    def run(ray_gpu: str):
        monkeypatch.setattr(fleet_probe, "GPU_PROBE", TINY)
        profile = PROFILES["h100x8"]
        with installed(profile, monkeypatch, tmp_path) as cluster:
            node = profile.node("h100-0")
            with cluster.on(node.hostname, node.raylet_cvd):  # the idle read: a Ray task
                idle = fleet_probe.node_health_task(expect_gpus=True)
            with cluster.on(node.hostname, ray_gpu):  # Ray sets it for a GPU actor
                record = fleet_probe.FleetRank().compute([ray_gpu])
            assert cluster.busy[node.hostname] == set()  # the actor is gone: all idle again
        return node, idle, record

    return run


def test_an_8_gpu_node_whose_idle_gpus_lower_their_pcie_generation_is_no_suspect(probed):
    node, idle, record = probed("3")
    loaded = record.health_under_load
    measured = fleet._Measured(compute={node.node_id: record}, health={node.node_id: idle})
    # judged as loaded, the seven idle GPUs read "PCIe at gen1 of gen4 under load": a suspect
    assert fleet._node_reasons([node], measured) == {node.node_id: []}
    assert record.device == "cuda:0" and loaded is not None and loaded.error is None
    gens = [
        (g["index"], g["pcie_gen_current"], g["pcie_gen_max"], g["under_load"]) for g in loaded.gpus
    ]
    # GPU 3 ran the probe (gen 4 of 4); the seven others idled at gen 1 and are not under load
    assert gens == [(i, 4 if i == 3 else 1, 4, i == 3) for i in range(8)]
    assert [g["pcie_gen_current"] for g in idle.gpus] == [1] * 8


def test_the_loaded_gpu_at_a_lower_generation_than_its_maximum_is_still_a_fault(
    probed, monkeypatch
):
    # the same node with GPU 5's link trained at gen 3 of 4: under load it reads 3, a reason
    from tests.unit import hwprofiles

    trained = hwprofiles.Node.nvml_gpus

    def gpus(self):
        out = trained(self)
        out[5]["gen"] = 3
        return out

    monkeypatch.setattr(hwprofiles.Node, "nvml_gpus", gpus)
    node, _, record = probed("5")
    reasons = fleet._node_reasons([node], fleet._Measured(compute={node.node_id: record}))
    assert reasons == {
        node.node_id: [
            "GPU5 on h100-0 PCIe at gen3 of gen4 under load: the link trained at a lower "
            "generation (at idle a lower generation is normal power saving, not under load)"
        ]
    }
