"""bench_ddp_overlap's per-step summary: which gradient bytes were ready only at the end."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "bench_ddp_overlap.py"
_spec = importlib.util.spec_from_file_location("bench_ddp_overlap", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_a_big_last_bucket_leaves_little_to_overlap():
    # Two early small buckets, then the tied embedding at the end of the backward pass.
    s = bench.summarize_step([(0.090, 950), (0.010, 25), (0.050, 25)], backward_s=0.1)
    assert s["n_buckets"] == 3 and s["grad_bytes"] == 1000
    assert s["bytes_at_end_share"] == pytest.approx(0.95)
    assert s["window_s"] == pytest.approx(0.08)


def test_one_bucket_has_no_window():
    s = bench.summarize_step([(0.2, 100)], backward_s=0.2)
    assert s["bytes_at_end_share"] == 1.0 and s["window_s"] == 0.0


def test_no_bucket_is_an_error_naming_the_cause():
    with pytest.raises(ValueError, match="DDP"):
        bench.summarize_step([], backward_s=0.1)
