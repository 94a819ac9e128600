"""``{rank}`` in a link's env reaches each rank as its own number, for fresh actors and for
forked ranks (``planner.rank_env_for`` in ``raycluster.runs.execute_run``), and a CPU rank
starts with every GPU hidden; checked from the stored rows of a CPU sweep.

The probe is the fault hook: ``LINKSWEEP_INJECT_FAULT: "{rank}:1"`` makes rank r raise at step 1
only when its value reads ``r:1``; left unfilled, ``{rank}`` is not a number and every rank
fails parsing it instead."""

from __future__ import annotations

import json

import pytest

from orchestrator.store import read_query


@pytest.mark.parametrize("launcher", ["fork", "actors"])
def test_each_rank_gets_its_own_number_and_hides_the_gpus(run_sweep, tmp_path, launcher):
    spec = {
        "name": f"rank-form-{launcher}",
        "model": "gpt2-tiny",
        "dataset": "builtin",
        "seq_len": 32,
        "micro_batch_size": 2,
        "steps": 2,
        "warmup_steps": 1,
        "repeats": 1,
        "world_size": 2,
        "launcher": launcher,
        "run_timeout_s": 240,
        "links": {"per_rank": {"LINKSWEEP_INJECT_FAULT": "{rank}:1"}},
        "grid": {"strategy": ["ddp"], "grad_accum": [1], "placement": ["pack"]},
    }
    code, db = run_sweep(tmp_path, spec)
    assert code == 1
    ((status, error, rank_env, nodes),) = read_query(
        str(db), "SELECT status, error, rank_env, nodes FROM runs"
    )[1]
    assert status == "failed"
    assert "injected fault on rank 0 at step 1" in error, error
    assert "rank 1: RuntimeError: injected fault on rank 1 at step 1" in error, error
    assert "invalid literal" not in error
    rank_env = json.loads(rank_env) if isinstance(rank_env, str) else rank_env
    assert rank_env["LINKSWEEP_INJECT_FAULT"] == "{rank}:1"  # stored in its {rank} form
    assert rank_env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    # the failed ranks chose their device first: the stored error names the decision
    assert "rank 0 device: backend=gloo device=cpu CUDA_VISIBLE_DEVICES=''" in error, error
    nodes = json.loads(nodes) if isinstance(nodes, str) else nodes
    # no rank returned a record, yet each one's decision reaches runs.nodes from its error note
    cpu = {"backend": "gloo", "device": "cpu", "cuda_visible_devices": "", "nvml_id": None}
    assert [n["device_decision"] for n in nodes] == [cpu, cpu]
