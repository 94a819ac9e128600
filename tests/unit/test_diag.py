"""workloads.diag.capture's flight-recorder step on planted files (no rank, no NCCL)."""

from __future__ import annotations

import os
import time

from workloads import diag


def _prefixes(tmp_path, monkeypatch):
    monkeypatch.setattr(diag, "NCCL_TRACE_PREFIX", str(tmp_path / "trace-"))
    monkeypatch.setattr(diag, "STACK_FILE_PREFIX", str(tmp_path / "stack-"))


def test_a_pipe_nobody_reads_costs_no_wait(tmp_path, monkeypatch):
    """A trigger pipe left by a process group that is gone: no dump can come, so capture does
    not wait wait_s for one (it did: 5 s per rank of every hung run)."""
    _prefixes(tmp_path, monkeypatch)
    os.mkfifo(tmp_path / "trace-run-0.pipe")
    t0 = time.monotonic()
    got = diag.capture("run", 0, pid=os.getpid(), wait_s=3.0)
    assert time.monotonic() - t0 < 1.0
    assert got.nccl_trace is None
    assert "never armed" in got.error  # no stack file: the rank never started


def test_an_existing_dump_is_read_and_removed(tmp_path, monkeypatch):
    _prefixes(tmp_path, monkeypatch)
    dump = tmp_path / "trace-run-1"
    dump.write_bytes(b"\x80trace")
    got = diag.capture("run", 1, pid=os.getpid(), wait_s=3.0)
    assert got.nccl_trace == b"\x80trace"
    assert not dump.exists()
