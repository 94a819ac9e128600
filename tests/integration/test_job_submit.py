"""A sweep submitted with the real `ray job submit` CLI to a `ray start --head` on loopback.

The head runs in its own process group (``ray start --block``) with its own ports and temp dir,
so it never touches the session's test cluster; stopping it terminates only what it started.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from orchestrator.store import read_query

REPO = str(Path(__file__).resolve().parents[2])
BIN = os.path.dirname(sys.executable)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_dashboard(url: str, deadline_s: float, head, log_path) -> None:
    """Poll the job API until it answers; a bounded readiness check, not a fixed sleep."""
    import urllib.error
    import urllib.request

    end = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < end:
        if head.poll() is not None:
            raise RuntimeError(
                f"ray start exited {head.returncode}: {log_path.read_text()[-3000:]}"
            )
        try:
            with urllib.request.urlopen(f"{url}/api/version", timeout=2) as r:
                if r.status == 200:
                    return
        except urllib.error.HTTPError as exc:
            if exc.code == 401:  # up, and asking for Ray's auth token (the job CLI sends it)
                return
            last = exc
        except OSError as exc:
            last = exc
        time.sleep(0.5)
    raise TimeoutError(f"Ray dashboard at {url} did not come up: {last}")


@pytest.mark.slow
def test_ray_job_submit_lands_in_db(tmp_path, write_sweep):
    gcs_port, dash_port = free_port(), free_port()
    # Every port explicit: other Ray instances on this machine (the session cluster) hold the
    # defaults, e.g. the dashboard agent's 52365.
    ports = {
        "--dashboard-agent-listen-port": free_port(),
        "--dashboard-agent-grpc-port": free_port(),
        "--metrics-export-port": free_port(),
        "--runtime-env-agent-port": free_port(),
        "--ray-client-server-port": free_port(),
        "--node-manager-port": free_port(),
        "--object-manager-port": free_port(),
    }
    # Ray >= 2.5x enables token auth by default when ~/.ray/auth_token exists; on this loopback-only
    # test cluster it is switched off explicitly for the head, the job CLI and the job's driver.
    env = {**os.environ, "RAY_DISABLE_USAGE_STATS": "1", "RAY_AUTH_MODE": "disabled"}
    ray_tmp = tempfile.mkdtemp(prefix="lsjob", dir="/tmp")
    head_log = open(tmp_path / "head.log", "w")  # noqa: SIM115 - closed in the finally below
    env.pop("RAY_ADDRESS", None)
    head = subprocess.Popen(
        [
            f"{BIN}/ray",
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={gcs_port}",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dash_port}",
            "--num-cpus=2",
            "--include-dashboard=true",
            f"--temp-dir={ray_tmp}",  # short: Ray's unix socket paths must fit 107 bytes
            *(f"{flag}={port}" for flag, port in ports.items()),
        ],
        env=env,
        stdout=head_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{dash_port}"
    try:
        wait_for_dashboard(url, 120, head, tmp_path / "head.log")
        sweep = write_sweep(name="job")
        db = tmp_path / "job.duckdb"  # absolute: the job's working dir is temporary
        out = subprocess.run(
            [
                f"{BIN}/ray",
                "job",
                "submit",
                "--address",
                url,
                "--working-dir",
                REPO,
                "--",
                sys.executable,
                "-m",
                "orchestrator",
                "run",
                sweep,
                "--db",
                str(db),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        cols, rows = read_query(str(db), "SELECT status, ray_address FROM sweeps")
        assert rows == [("ok", rows[0][1])] and rows[0][1] != "embedded"
        _, runs = read_query(str(db), "SELECT status FROM runs")
        assert runs == [("ok",)]
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
        head_log.close()
        shutil.rmtree(ray_tmp, ignore_errors=True)
