"""The rank's NCCL log reader and the after-run cleanup, on planted files (no NCCL needed)."""

from __future__ import annotations

import os

import pytest

from workloads import nccl_files
from workloads.nccl_files import collect_run_files, expand_debug_file, nccl_hostname


@pytest.mark.parametrize(
    ("hostname", "short"),
    [
        ("ip-10-0-0-1.ec2.internal", "ip-10-0-0-1"),
        ("node7", "node7"),
        ("a%b/c.d", "a-b-c"),
    ],
)
def test_nccl_hostname_cuts_at_the_first_dot(hostname, short):
    # NVIDIA/nccl src/debug.cc getHostNameForLog(hostname, 1024, '.'): cut at '.', '%' '/' -> '-'
    assert nccl_hostname(hostname) == short


def test_expand_debug_file_like_nccl():
    pattern = "/tmp/linksweep-nccl-s-r0001-%h-%p.log"
    assert (
        expand_debug_file(pattern, "ip-10-0-0-1.ec2.internal", 4242)
        == "/tmp/linksweep-nccl-s-r0001-ip-10-0-0-1-4242.log"
    )
    assert expand_debug_file("a%%h-%x-%", "h.d", 1) == "a%h-%x-%"


def test_read_nccl_log_finds_the_file_on_a_dotted_host(tmp_path, monkeypatch):
    monkeypatch.setattr(nccl_files.socket, "gethostname", lambda: "ip-10-0-0-1.ec2.internal")
    monkeypatch.setenv("NCCL_DEBUG_FILE", str(tmp_path / "nccl-%h-%p.log"))
    written = tmp_path / f"nccl-ip-10-0-0-1-{os.getpid()}.log"  # what NCCL itself writes
    written.write_text("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n")
    assert "via P2P/IPC" in nccl_files.read_nccl_log()
    assert not written.exists()


def test_collect_run_files_reads_logs_and_removes_every_file_of_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(nccl_files, "NCCL_LOG_PREFIX", str(tmp_path / "linksweep-nccl-"))
    monkeypatch.setattr(nccl_files, "NCCL_TRACE_PREFIX", str(tmp_path / "linksweep-nccl-trace-"))
    monkeypatch.setattr(nccl_files, "STACK_FILE_PREFIX", str(tmp_path / "linksweep-stack-"))
    run = "sw-r0001"
    log = tmp_path / f"linksweep-nccl-{run}-host-77.log"
    log.write_text("h:77:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n")
    mine = [
        log,
        tmp_path / f"linksweep-nccl-trace-{run}-0",
        tmp_path / f"linksweep-stack-{run}-r0.txt",
        tmp_path / f"linksweep-stack-{run}-r0.txt.pid",
    ]
    for p in mine[1:]:
        p.write_text("x")
    pipe = tmp_path / f"linksweep-nccl-trace-{run}-1.pipe"
    os.mkfifo(pipe)
    other = tmp_path / "linksweep-nccl-sw-r00010-host-78.log"  # another run: left alone
    other.write_text("keep")
    got = collect_run_files(run)
    assert got.nccl_logs == {str(log): "h:77:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"}
    assert sorted(got.removed) == sorted(str(p) for p in [*mine, pipe])
    assert not any(p.exists() for p in [*mine, pipe])
    assert other.exists()
    assert got.errors == ()
