"""On the session Ray cluster: a hung run's NCCL log is kept as data of the
failed run, and no run leaves files in /tmp.

The run is gloo on CPU, so no NCCL writes a log: while rank 0 hangs (``LINKSWEEP_INJECT_FAULT``),
the test plants, at the path ``NCCL_DEBUG_FILE`` names, a log in NCCL's line format, and a
flight-recorder trigger pipe, as a GPU rank would leave them. The hang makes the timing certain:
the run cannot end before its timeout, whenever the files land. The sweep's id is fixed
beforehand, so the planter picks its own run's stack file, never another test's run (the other
lane's runs arm stack files in /tmp too).
"""

from __future__ import annotations

import glob
import os
import threading
import time

import duckdb
import pytest

from orchestrator.cli import main
from orchestrator.sweep import planner
from workloads.contract import NCCL_TRACE_PREFIX, STACK_FILE_PREFIX
from workloads.nccl_files import NCCL_LOG_PREFIX

# quiet lane (tests/lanes.py): the hung run must reach its hang before its 12 s timeout
pytestmark = pytest.mark.quiet

FAKE_LOG = (
    "testhost:999:1000 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
    "testhost:999:1000 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/Socket/0\n"
    "testhost:999:1000 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0\n"
    "testhost:999:1000 [0] NCCL INFO NVLS comm 0x55a7be5601c0 headRank 0 nHeads 2 buffSize 4194304\n"
)


def _plant_when_run_starts(sweep_id: str, planted: dict, done: threading.Event) -> None:
    """Wait for the sweep's first stack file (rank 0 of its first run armed), then plant that
    run's NCCL files."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not done.is_set():
        new = set(glob.glob(f"{STACK_FILE_PREFIX}{sweep_id}-*-r0.txt"))
        if new:
            path = new.pop()
            run_id = path[len(STACK_FILE_PREFIX) : -len("-r0.txt")]
            log = f"{NCCL_LOG_PREFIX}{run_id}-testhost-999.log"
            with open(log, "w") as f:
                f.write(FAKE_LOG)
            pipe = f"{NCCL_TRACE_PREFIX}{run_id}-1.pipe"
            os.mkfifo(pipe)
            planted.update(run_id=run_id, log=log, pipe=pipe)
            return
        done.wait(0.05)  # polling for a file another process creates; no fixed sleep


def _left_in_tmp(run_id: str) -> list[str]:
    return [p for p in glob.glob("/tmp/linksweep-*") if run_id in os.path.basename(p)]


def test_hung_run_keeps_its_nccl_log_and_leaves_no_files(
    ray_cluster, write_sweep, tmp_path, monkeypatch
):
    sweep_id = planner.new_sweep_id()
    monkeypatch.setattr(planner, "new_sweep_id", lambda now=None: sweep_id)
    planted: dict = {}
    done = threading.Event()
    planter = threading.Thread(target=_plant_when_run_starts, args=(sweep_id, planted, done))
    planter.start()
    path = write_sweep(
        links={"hang": {"LINKSWEEP_INJECT_FAULT": "0:1:hang"}, "default": {}},
        grid={
            "strategy": ["ddp"],
            "grad_accum": [1],
            "placement": ["pack"],
            "link": ["hang", "default"],
        },
        run_timeout_s=12,
    )
    db = tmp_path / "r.duckdb"
    try:
        assert main(["run", path, "--db", str(db)]) == 1
    finally:
        done.set()
        planter.join()
    assert planted, "the hung run never armed rank 0"
    run_id = planted["run_id"]
    con = duckdb.connect(str(db), read_only=True)
    status, transport, nvls, version = con.execute(
        "SELECT status, effective_transport, nvls, nccl_version FROM runs WHERE run_id = ?",
        [run_id],
    ).fetchone()
    assert status == "failed"
    assert (transport, nvls, version) == ("NET/Socket", True, "2.21.5")
    rows = con.execute(
        "SELECT rank, peer, transport FROM transports WHERE run_id = ? ORDER BY rank", [run_id]
    ).fetchall()
    assert rows == [(0, 1, "NET/Socket"), (0, 1, "NET/Socket")]  # both printed by rank 0
    logs = con.execute("SELECT source, text FROM nccl_logs WHERE run_id = ?", [run_id]).fetchall()
    assert [src.endswith(planted["log"]) for src, _ in logs] == [True]  # kept whole, host:path
    assert "NCCL version 2.21.5" in logs[0][1]
    ok_runs = [r[0] for r in con.execute("SELECT run_id FROM runs WHERE status = 'ok'").fetchall()]
    con.close()
    assert len(ok_runs) == 1
    # nothing of either run is left: logs, pipes, dumps, stack and pid files
    assert not os.path.exists(planted["log"]) and not os.path.exists(planted["pipe"])
    assert _left_in_tmp(run_id) == []
    assert _left_in_tmp(ok_runs[0]) == []
