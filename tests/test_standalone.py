"""The bare-torchrun entry point: a real ``torchrun --nproc_per_node 2`` on gloo, JSON checked."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _torchrun() -> list[str]:
    exe = Path(sys.executable).with_name("torchrun")
    if exe.exists():
        return [str(exe)]
    if shutil.which("torchrun"):
        return ["torchrun"]
    return [sys.executable, "-m", "torch.distributed.run"]


def test_standalone_two_ranks_write_json(write_sweep, tmp_path):
    sweep = write_sweep(seq_len=32, steps=2, warmup_steps=1)
    out = tmp_path / "result.json"
    cmd = [
        *_torchrun(),
        "--standalone",  # c10d rendezvous on a free port: other sessions may run torchrun too
        "--nproc_per_node",
        "2",
        "-m",
        "workloads.standalone",
        "--sweep",
        sweep,
        "--strategy",
        "ddp",
        "--grad-accum",
        "1",
        "--out",
        str(out),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-4000:]

    doc = json.loads(out.read_text())
    assert doc["world_size"] == 2
    assert doc["variant"]["strategy"] == "ddp" and doc["variant"]["grad_accum"] == 1
    ranks = doc["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert r["backend"] == "gloo"
        assert len(r["steps"]) == 3  # 1 warmup + 2 timed
        assert [s["warmup"] for s in r["steps"]] == [True, False, False]
        assert all(math.isfinite(s["loss"]) and s["step_time_s"] > 0 for s in r["steps"])
        assert r["first_step_wall"] >= r["process_start_wall"]
    worst = [
        max(ranks[0]["steps"][i]["step_time_s"], ranks[1]["steps"][i]["step_time_s"])
        for i in (1, 2)
    ]
    assert math.isclose(doc["median_step_time_s"], sum(worst) / 2)
    assert doc["startup_s"] > 0


def test_standalone_rejects_unknown_link(write_sweep):
    from orchestrator.spec import SpecError, load_spec
    from workloads.standalone import build_variant, parse_args

    spec = load_spec(write_sweep())
    with pytest.raises(SpecError, match="unknown link 'nope'"):
        build_variant(spec, parse_args(["--sweep", "x", "--link", "nope"]))
    v = build_variant(spec, parse_args(["--sweep", "x"]))
    assert (v.strategy, v.grad_accum, v.link, v.offload) == ("ddp", 1, "default", "none")
