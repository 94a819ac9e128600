"""Ray on logical GPUs: sweeps on clusters whose nodes advertise GPUs this CPU-only machine does
not have, checked from the rows they store.

The clusters run in a process of their own (``gpu_cluster.py``; the pytest session keeps its one
CPU-only Ray connection), started once for the whole module:

- ``two_nodes``: a head with GPU ids ``0,1`` (Ray's index form) and a node whose raylet sees
  ``CUDA_VISIBLE_DEVICES=GPU-<uuid>,GPU-<uuid>`` (Ray reports those strings as its GPU ids),
  4 CPUs and 2 GPUs each (2 CPUs per GPU); DDP at world_size 2, pack and spread, one sweep on
  fresh actors and one on forked ranks (``launcher: fork``), in one Ray job.
- ``one_gpu``: one node with 1 GPU (UUID form) and 2 CPUs: a one-rank pack run (the same-node
  path of ``rows.link_class_for`` on a UUID id) and the one-GPU rehearsal (``ranks_per_gpu: 2``),
  on fresh actors and on forked ranks.

torch here is a CPU build, so every rank given a GPU fails with the device choice's clear error
(a CPU-only torch wheel on a GPU node), before any process group: that failure, stored as a
row with everything the run had decided up to then, is what these tests read. What a GPU run
measures is not faked here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from orchestrator.store import read_query
from tests.integration.gpu_cluster import PLAN_TIMEOUT_S

pytestmark = pytest.mark.slow  # multi-node clusters in a subprocess (~85-110 s for the module)

REPO = Path(__file__).resolve().parents[2]
UUIDS = ("GPU-5f1c7a2e-0d3b-4c1e-9a57-1b2c3d4e5f60", "GPU-8e2d6b1f-7a4c-4d2e-8b68-2c3d4e5f6071")
ONE_UUID = "GPU-c4a1e9d2-3b5f-4a6c-9d7e-3d4e5f607182"
CPUS_PER_GPU = 2  # 4 CPUs and 2 GPUs per node: a rank's bundle gets 2 CPUs, and 2 threads

BASE = {
    "model": "gpt2-tiny",
    "dataset": "builtin",
    "precision": "fp32",
    "seq_len": 32,
    "micro_batch_size": 2,
    "steps": 2,
    "warmup_steps": 1,
    "repeats": 1,
    "links": {"default": {}},
}
SWEEPS = {
    "pair": {"name": "pair", "world_size": 2, "grid": {"strategy": ["ddp"], "grad_accum": [1],
             "placement": ["pack", "spread"]}},
    "pair_fork": {"name": "pair-fork", "world_size": 2, "launcher": "fork", "grid": {
                  "strategy": ["ddp"], "grad_accum": [1], "placement": ["pack", "spread"]}},
    "single": {"name": "single", "world_size": 1, "grid": {"strategy": ["ddp"],
               "grad_accum": [1], "placement": ["pack"]}},
    "rehearsal": {"name": "rehearsal", "world_size": 2, "ranks_per_gpu": 2,
                  "grid": {"strategy": ["ddp"], "grad_accum": [1], "placement": ["pack"]}},
    "rehearsal_fork": {"name": "rehearsal-fork", "world_size": 2, "ranks_per_gpu": 2,
                       "launcher": "fork", "grid": {"strategy": ["ddp"], "grad_accum": [1],
                       "placement": ["pack"]}},
}  # fmt: skip


@pytest.fixture(scope="module")
def gpu_sweeps(tmp_path_factory):
    """Run the plan once; yields {sweep name: (exit code or traceback, database path)}."""
    folder = tmp_path_factory.mktemp("logical_gpus")
    dbs = {}
    for name, body in SWEEPS.items():
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(BASE | body, sort_keys=False))
        dbs[name] = folder / f"{name}.duckdb"

    def sweep(name):
        return {"file": str(folder / f"{name}.yaml"), "db": str(dbs[name])}

    node = {"num_cpus": 2 * CPUS_PER_GPU, "num_gpus": 2}
    plan = {
        "phases": [
            {
                "name": "two_nodes",
                "nodes": [node, node | {"visible": ",".join(UUIDS)}],
                "sweeps": [sweep("pair"), sweep("pair_fork")],
            },
            {
                "name": "one_gpu",
                "nodes": [{"num_cpus": CPUS_PER_GPU, "num_gpus": 1, "visible": ONE_UUID}],
                "sweeps": [sweep("single"), sweep("rehearsal"), sweep("rehearsal_fork")],
            },
        ]
    }
    plan_path = folder / "plan.json"
    plan_path.write_text(json.dumps(plan))
    ray_tmp = tempfile.mkdtemp(prefix="lsgpu", dir="/tmp")  # short: unix socket paths <= 107 B
    env = {**os.environ, "RAY_DISABLE_USAGE_STATS": "1", "RAY_TMPDIR": ray_tmp}
    env.pop("RAY_ADDRESS", None)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "tests.integration.gpu_cluster", str(plan_path)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=PLAN_TIMEOUT_S,
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:]
    codes = json.loads(Path(f"{plan_path}.out").read_text())
    names = ["pair", "pair_fork", "single", "rehearsal", "rehearsal_fork"]
    by_name = dict(zip(names, [*codes["two_nodes"], *codes["one_gpu"]], strict=True))
    gpus = {name: codes["gpus"][sweep(name)["file"]] for name in SWEEPS}
    return {name: (by_name[name], dbs[name], gpus[name]) for name in SWEEPS}


def runs(db: Path) -> dict[str, dict]:
    """The stored runs by placement, each a dict of its columns (JSON columns decoded)."""
    cols, rows = read_query(str(db), "SELECT * FROM runs ORDER BY seq")
    out = {}
    for row in rows:
        run = dict(zip(cols, row, strict=True))
        for key in ("nodes", "rank_env"):
            if isinstance(run.get(key), str):
                run[key] = json.loads(run[key])
        # rows.build_rows_safely stores a run whose rows could not be built (e.g. int() of a
        # UUID id) as failed with this text, and without its placements: never here
        assert "building the run's rows failed" not in (run["error"] or ""), run["error"]
        out[run["placement"]] = run
    return out


def completed(gpu_sweeps, name: str) -> Path:
    """The sweep's database, after checking it ended with failed runs (exit 1), not a crash."""
    code, db, _ = gpu_sweeps[name]
    assert code == 1, f"linksweep run {name}: {code}"
    ((status,),) = read_query(str(db), "SELECT status FROM sweeps")[1]
    assert status == "failed"
    return db


def test_gpu_ranks_fail_with_the_cpu_torch_error_on_the_actors_launcher(gpu_sweeps):
    import torch

    stored = runs(completed(gpu_sweeps, "pair"))
    assert sorted(stored) == ["pack", "spread"]
    for run in stored.values():
        assert run["status"] == "failed"
        assert run["launcher"] == "actors"  # auto: fresh actors where ranks get GPUs
        assert "sees no CUDA" in run["error"], run["error"]
        assert f"torch {torch.__version__}" in run["error"]  # names the build: 2.13.0+cpu
        assert "init_process_group" not in run["error"]  # failed before any process group


def test_pack_puts_both_ranks_on_one_node_each_seeing_the_runs_gpus_there(gpu_sweeps):
    run = runs(completed(gpu_sweeps, "pair"))["pack"]
    ranks = run["nodes"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert len({r["node_id"] for r in ranks}) == 1
    ids = [g for r in ranks for g in r["gpu_ids"]]
    assert len(ids) == 2 and len(set(ids)) == 2  # one GPU each, two distinct GPUs
    assert set(ids) in ({"0", "1"}, set(UUIDS))  # Ray's ids, in the form that node has
    for r in ranks:  # the visibility policy: every GPU of the run on the rank's node
        assert sorted(r["visible_gpus"]) == sorted(ids)
        assert [r["local_rank"] for r in ranks] == [0, 1]


def test_spread_puts_the_ranks_on_two_nodes_each_seeing_its_own_gpu(gpu_sweeps):
    run = runs(completed(gpu_sweeps, "pair"))["spread"]
    ranks = run["nodes"]
    assert len({r["node_id"] for r in ranks}) == 2
    for r in ranks:
        assert len(r["gpu_ids"]) == 1 and r["visible_gpus"] == r["gpu_ids"]
        assert r["local_rank"] == 0
    ids = {r["gpu_ids"][0] for r in ranks}
    assert len(ids & set(UUIDS)) == 1 and len(ids & {"0", "1"}) == 1  # both forms, one run
    assert run["link_class"] == "NET"


def test_rank_env_orders_gpus_by_pci_bus_and_threads_by_the_bundles_cpus(gpu_sweeps):
    stored = runs(completed(gpu_sweeps, "pair"))
    for run in stored.values():
        env = run["rank_env"]
        assert env, "runs.rank_env is empty"
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert env["OMP_NUM_THREADS"] == str(CPUS_PER_GPU)  # the CPUs per GPU, not 1


def test_uuid_gpu_ids_on_one_node_are_stored_not_parsed(gpu_sweeps):
    """A one-rank run on a node whose Ray GPU id is a UUID: ``build_rows`` works out the run's
    link class on that node (the path that called int() on the id) and the run is stored."""
    run = runs(completed(gpu_sweeps, "single"))["pack"]
    assert run["status"] == "failed" and "sees no CUDA" in run["error"]
    (rank,) = run["nodes"]
    assert rank["gpu_ids"] == [ONE_UUID] and rank["visible_gpus"] == [ONE_UUID]
    assert run["link_class"] == "unknown"  # no nvidia-smi topology here; and no int() of it


def test_rehearsal_puts_two_ranks_on_one_gpu_as_two_nccl_hosts(gpu_sweeps):
    from orchestrator.sweep.planner import rank_env_for

    run = runs(completed(gpu_sweeps, "rehearsal"))["pack"]
    assert run["ranks_per_gpu"] == 2
    assert run["link_class"] == "shared-gpu"
    assert run["status"] == "failed" and "sees no CUDA" in run["error"]
    ranks = run["nodes"]
    assert len(ranks) == 2 and len({r["node_id"] for r in ranks}) == 1
    assert [r["gpu_ids"] for r in ranks] == [[ONE_UUID], [ONE_UUID]]  # the same GPU
    assert all(set(r["visible_gpus"]) == {ONE_UUID} for r in ranks)
    env = run["rank_env"]  # stored in its {rank} form, filled in per rank by execute_run
    assert "{rank}" in env["NCCL_HOSTID"]
    hostids = {rank_env_for(env, r["rank"])["NCCL_HOSTID"] for r in ranks}
    assert len(hostids) == 2, env  # each rank its own NCCL host: NCCL treats them as two
    assert env["OMP_NUM_THREADS"] == str(CPUS_PER_GPU // 2)  # the GPU's CPUs, shared by two


def test_forked_gpu_ranks_fail_with_the_cpu_torch_error_on_the_fork_launcher(gpu_sweeps):
    stored = runs(completed(gpu_sweeps, "pair_fork"))
    assert sorted(stored) == ["pack", "spread"]
    for run in stored.values():
        assert run["status"] == "failed"
        assert run["launcher"] == "fork"  # accepted on GPUs, not refused
        assert "sees no CUDA" in run["error"], run["error"]  # the rank got GPUs: not a CPU rank
        assert "fork-server launcher" not in run["error"]  # raised, not a dead child


def test_forked_ranks_get_exactly_the_gpus_ray_fixed_for_their_bundles(gpu_sweeps):
    """Spread: one rank a node, each sees its bundle's one GPU, never the raylet's two the
    launcher inherited (on the UUID node: ``GPU-a,GPU-b``); pack: the run's two GPUs there."""
    stored = runs(completed(gpu_sweeps, "pair_fork"))
    spread = stored["spread"]
    ids = [r["gpu_ids"] for r in spread["nodes"]]
    assert all(len(i) == 1 for i in ids) and len({r["node_id"] for r in spread["nodes"]}) == 2
    assert {i[0] for i in ids} & set(UUIDS) and {i[0] for i in ids} & {"0", "1"}
    for r in spread["nodes"]:
        assert r["visible_gpus"] == r["gpu_ids"]
        # what the rank set and failed with: its bundle's id, as Ray named it
        assert f"CUDA_VISIBLE_DEVICES={r['gpu_ids'][0]})" in spread["error"], spread["error"]
    assert f"CUDA_VISIBLE_DEVICES={','.join(UUIDS)}" not in spread["error"]
    pack = [r["gpu_ids"] for r in stored["pack"]["nodes"]]
    assert len({g for i in pack for g in i}) == 2  # two bundles, two distinct GPUs


def test_a_later_run_of_the_sweep_reuses_the_nodes_launcher(gpu_sweeps):
    """A forked rank's placement carries its launcher's pid: the node that ran pack's ranks
    forked spread's rank there from the same launcher process."""
    stored = runs(completed(gpu_sweeps, "pair_fork"))
    pack = {r["node_id"]: r["pid"] for r in stored["pack"]["nodes"]}
    (node,) = pack
    spread = {r["node_id"]: r["pid"] for r in stored["spread"]["nodes"]}
    assert spread[node] == pack[node]
    other = next(n for n in spread if n != node)
    assert spread[other] != pack[node]  # a launcher per node


def test_the_sweeps_gpu_bundles_are_released_at_its_end(gpu_sweeps):
    """Read by the still-connected driver after the sweep, its launchers kept: every GPU is
    free again (the groups removed after their ranks were gone; a launcher holds no GPU)."""
    for name in ("pair", "pair_fork"):
        gpus = gpu_sweeps[name][2]
        assert gpus == {"total": 4.0, "available": 4.0}, (name, gpus)


def test_two_forked_ranks_share_the_one_gpu_their_half_bundles_hold(gpu_sweeps):
    """``ranks_per_gpu: 2`` forked: each rank's bundle holds half the GPU, and Ray names that
    GPU for both; they fail as the actors' rehearsal does, and the GPU is free after."""
    run = runs(completed(gpu_sweeps, "rehearsal_fork"))["pack"]
    assert run["launcher"] == "fork" and run["link_class"] == "shared-gpu"
    assert [r["gpu_ids"] for r in run["nodes"]] == [[ONE_UUID], [ONE_UUID]]
    assert f"CUDA_VISIBLE_DEVICES={ONE_UUID})" in run["error"], run["error"]
    assert gpu_sweeps["rehearsal_fork"][2] == {"total": 1.0, "available": 1.0}
