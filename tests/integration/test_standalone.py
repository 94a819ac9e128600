"""The bare-torchrun baseline (bench/standalone.py): a real ``torchrun --nproc_per_node 2`` on
gloo, JSON checked. Its flag handling is unit-tested in tests/unit/test_standalone_variant.py."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


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
        str(REPO / "bench" / "standalone.py"),
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
    cfg = doc["cfg"]  # the RunConfig a linksweep rank would get, as a dict
    assert cfg["run_id"].startswith("standalone-") and cfg["strategy"] == "ddp"
    assert (cfg["steps"], cfg["warmup_steps"], cfg["seq_len"]) == (2, 1, 32)
    assert cfg["ds_config"] is None
    ranks = doc["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert r["backend"] == "gloo"
        assert len(r["steps"]) == 3  # 1 warmup + 2 timed
        assert [s["warmup"] for s in r["steps"]] == [True, False, False]
        assert all(math.isfinite(s["loss"]) and s["step_time_s"] > 0 for s in r["steps"])
        assert r["first_step_wall_s"] >= r["process_start_wall"]
    worst = [
        max(ranks[0]["steps"][i]["step_time_s"], ranks[1]["steps"][i]["step_time_s"])
        for i in (1, 2)
    ]
    assert math.isclose(doc["median_step_time_s"], sum(worst) / 2)
    assert doc["startup_s"] > 0
