"""bench/standalone.py's pure parts: flags -> variant, and rank 0's JSON summary.

The script is not a package module (it is run as ``torchrun ... bench/standalone.py``), so it is
loaded from its path. The real torchrun run: tests/integration/test_standalone.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from orchestrator.sweep.planner import run_config
from orchestrator.sweep.spec import SpecError, load_spec

STANDALONE = Path(__file__).resolve().parents[2] / "bench" / "standalone.py"


@pytest.fixture(scope="module")
def standalone():
    spec = importlib.util.spec_from_file_location("linksweep_bench_standalone", STANDALONE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_standalone_rejects_unknown_link(standalone, write_sweep):
    spec = load_spec(write_sweep())
    with pytest.raises(SpecError, match="unknown link 'nope'"):
        standalone.build_variant(spec, standalone.parse_args(["--sweep", "x", "--link", "nope"]))
    v = standalone.build_variant(spec, standalone.parse_args(["--sweep", "x"]))
    assert (v.strategy, v.grad_accum, v.link, v.offload) == ("ddp", 1, "default", "none")


def test_standalone_applies_the_offload_rule(standalone, write_sweep):
    spec = load_spec(write_sweep())
    args = standalone.parse_args(["--sweep", "x", "--strategy", "zero1", "--offload", "nvme"])
    with pytest.raises(SpecError, match="'nvme' needs zero3"):
        standalone.build_variant(spec, args)
    args = standalone.parse_args(["--sweep", "x", "--strategy", "zero3", "--offload", "nvme"])
    assert standalone.build_variant(spec, args).offload == "nvme"
    with pytest.raises(SystemExit):
        standalone.parse_args(["--sweep", "x", "--grad-accum", "0"])


def test_standalone_summary_is_the_run_figure(standalone, write_sweep):
    spec = load_spec(write_sweep())
    v = standalone.build_variant(spec, standalone.parse_args(["--sweep", "x"]))
    cfg = run_config(spec, v, "standalone-x")

    def rec(rank, times, start, first):
        steps = [{"warmup": i == 0, "step_time_s": t} for i, t in enumerate(times)]
        return {
            "rank": rank,
            "steps": steps,
            "process_start_wall": start,
            "first_step_wall_s": first,
        }

    doc = standalone.summarize(
        v,
        cfg,
        [rec(1, [9.0, 1.0, 5.0, 2.0], 100.0, 104.0), rec(0, [9.0, 3.0, 4.0, 1.0], 101.0, 103.0)],
    )
    # per timed step, the slowest rank: [3, 5, 2] -> median 3
    assert doc["median_step_time_s"] == 3.0
    assert doc["startup_s"] == 4.0  # last first step (104) - earliest process start (100)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1] and doc["world_size"] == 2
    assert doc["cfg"]["run_id"] == "standalone-x" and doc["variant"]["link"] == "default"
