"""linksweep's real rank path, one process per rank, on a simulated 8-GPU node
(``tests/integration/profile_rank.py`` says what is real and what is faked): two DDP ranks the
driver placed on GPUs 0 and 1 of ``h100x8``, each in its own Python process with the node's
fakes installed, decide their device against a CUDA view that fixes ``CUDA_VISIBLE_DEVICES`` at
the process's first CUDA call, then train gpt2-tiny for a warmup and 2 timed steps on a gloo
group, sampling the node's NVML for the GPU each decided on.

The placement is the driver's own (``Rank.node_info`` per rank actor under Ray's GPU ids, then
``planner.place_ranks``), made here in the test's process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.integration.rayports import free_port
from tests.unit.hwprofiles import PROFILES, installed

REPO = Path(__file__).resolve().parents[2]
PROFILE, HOST = "h100x8", "h100-0"


def placed(monkeypatch, tmp_path, world_size: int) -> list:
    """Each rank's placement, one GPU per rank (Ray's ids 0..world_size-1), as the driver
    places them."""
    from orchestrator.sweep.planner import place_ranks
    from workloads.rank import Rank

    with installed(PROFILES[PROFILE], monkeypatch, tmp_path / "driver") as cluster:
        node = cluster.profile.node(HOST)
        infos = []
        for r in range(world_size):
            with cluster.on(HOST, str(r)):
                cluster.ray_worker(node, (str(r),))
                infos.append(Rank().node_info())
    return place_ranks(infos)


def test_two_ddp_ranks_decide_on_the_frozen_cuda_view_then_train_on_gloo(monkeypatch, tmp_path):
    placements = placed(monkeypatch, tmp_path, 2)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env |= {"GLOO_SOCKET_IFNAME": "lo"}
    procs, outs = [], []
    for p in placements:
        out = tmp_path / f"rank{p.rank}.json"
        spec = {
            "profile": PROFILE,
            "host": HOST,
            "rank": p.rank,
            "local_rank": p.local_rank,
            "world_size": 2,
            "strategy": "ddp",
            "port": port,
            "ray_gpu_ids": [str(p.rank)],
            "node_gpu_ids": list(p.visible_gpus),
            "out": str(out),
        }
        spec_path = tmp_path / f"spec{p.rank}.json"
        spec_path.write_text(json.dumps(spec))
        cmd = [sys.executable, "-m", "tests.integration.profile_rank", str(spec_path)]
        procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True))
        outs.append(out)
    try:
        errors = [proc.communicate(timeout=240)[1] for proc in procs]
    finally:
        for proc in procs:  # a rank left waiting for a dead peer must not outlive the test
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [proc.returncode for proc in procs] == [0, 0], "\n".join(e[-3000:] for e in errors)
    got = [json.loads(o.read_text()) for o in outs]
    for r, g in enumerate(got):
        # the driver gave both ranks GPUs 0 and 1; each exported them before touching CUDA, so
        # CUDA started with both visible (not Ray's one-GPU value) and rank r took cuda:r
        assert g["cuda_started_with"] == "0,1"
        assert g["decision"] == {
            "backend": "nccl",
            "device": f"cuda:{r}",
            "cuda_visible_devices": "0,1",
            "nvml_id": str(r),
        }
        assert g["busy_while_running"] == [r]
        assert (g["backend"], g["device"]) == ("gloo", "cpu")  # the seam: tensors on CPU
        assert g["steps"] == [[0, True], [1, False], [2, False]]
        assert g["telemetry_status"].startswith("nvml") and g["telemetry_samples"] >= 2
        assert g["telemetry_temps"] and set(g["telemetry_temps"]) <= {40.0, 41.0, 42.0}
        assert {"pg_init", "rank_teardown"} <= set(g["phases"])
    # DDP all-reduced the same gradient bytes on both ranks, over the gloo group
    assert got[0]["all_reduce_bytes"] == got[1]["all_reduce_bytes"] > 0
