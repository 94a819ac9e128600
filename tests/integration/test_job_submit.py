"""A sweep submitted with the real `ray job submit` CLI to a `ray start --head` on loopback.

The head runs in its own process group (``ray start --block``) with its own ports and temp dir,
so it never touches the session's test cluster; stopping it terminates only what it started.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.integration.rayports import free_port, head_ports
from tests.integration.test_long_sweeps import SWEEP_BODY, n_runs, pairs, q, wait_for

REPO = str(Path(__file__).resolve().parents[2])
BIN = os.path.dirname(sys.executable)
NO_DRAIN = {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
"""For the head: on SIGTERM, `ray start --block` (Ray 2.60) first asks its GCS to drain the
node and waits up to this long (default 30 s) for the raylet to exit; the GCS got the same
SIGTERM (the whole process group is signalled), so the wait ran out every time and each
teardown took 33 s. Nothing runs on the head by then: stop at once."""


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


@pytest.fixture(scope="module")
def job_head(tmp_path_factory):
    """A `ray start --head` with its job server; yields (job address, env for the job CLI)."""
    gcs_port, dash_port = free_port(), free_port()
    # Every port explicit: other Ray instances on this machine (the session cluster) hold the
    # defaults, e.g. the dashboard agent's 52365.
    ports = head_ports()
    # Ray >= 2.5x enables token auth by default when ~/.ray/auth_token exists; on this loopback-only
    # test cluster it is switched off explicitly for the head, the job CLI and the job's driver.
    # `ray job stop` SIGKILLs the job RAY_JOB_STOP_WAIT_TIME_S after its SIGTERM (Ray's default
    # 3 s): 30 s, as docs/long-sweeps.md tells users, so the driver can stop cleanly.
    env = {**os.environ, "RAY_DISABLE_USAGE_STATS": "1", "RAY_AUTH_MODE": "disabled"}
    env["RAY_JOB_STOP_WAIT_TIME_S"] = "30"
    env.update(NO_DRAIN)
    env.pop("RAY_ADDRESS", None)
    ray_tmp = tempfile.mkdtemp(prefix="lsjob", dir="/tmp")
    log_path = tmp_path_factory.mktemp("head") / "head.log"
    head_log = open(log_path, "w")  # noqa: SIM115 - closed in the finally below
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
        wait_for_dashboard(url, 120, head, log_path)
        yield url, env
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
        head_log.close()
        shutil.rmtree(ray_tmp, ignore_errors=True)


def ray_job(env: dict, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [f"{BIN}/ray", "job", *args], env=env, capture_output=True, text=True, timeout=timeout_s
    )


def linksweep_job(url: str, *args: str, wait: bool = True) -> list[str]:
    """`ray job submit` arguments that run the linksweep CLI from this checkout."""
    head = ["submit", "--address", url, "--working-dir", REPO] + ([] if wait else ["--no-wait"])
    return [*head, "--", sys.executable, "-m", "orchestrator", *args]


def job_status(env: dict, url: str, job_id: str) -> str:
    """STOPPED, SUCCEEDED, FAILED, RUNNING or PENDING, from `ray job status` ("Job 'x' was
    stopped", "... succeeded", "... is currently running")."""
    out = ray_job(env, "status", "--address", url, job_id, timeout_s=60).stdout.lower()
    found = [w for w in ("stopped", "succeeded", "failed", "running", "pending") if w in out]
    return found[0].upper() if found else "UNKNOWN"


@pytest.mark.slow
def test_ray_job_stop_then_resume_through_ray_job_submit(job_head, tmp_path):
    """A sweep submitted with `ray job submit` lands in the database, with the cluster's address
    (not ``embedded``); `ray job stop` mid-sweep: the sweep reads interrupted; a second job with
    --resume runs exactly the missing (variant, repeat) pairs under the same sweep id. (One
    sweep for both: a job's upload and start cost a minute on 2 cores.)"""
    url, env = job_head
    sweep, db = tmp_path / "long.yaml", tmp_path / "r.duckdb"
    sweep.write_text(SWEEP_BODY)  # 4 runs
    out = ray_job(env, *linksweep_job(url, "run", str(sweep), "--db", str(db), wait=False))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    first = re.search(r"raysubmit_\w+", out.stdout + out.stderr)[0]
    wait_for("one stored run", lambda: n_runs(db) >= 1, 600, 0.2)
    t_stop = time.monotonic()
    stop = ray_job(env, "stop", "--address", url, first, timeout_s=120)
    assert stop.returncode == 0, stop.stdout[-2000:] + stop.stderr[-2000:]
    ended = ("STOPPED", "FAILED", "SUCCEEDED")
    wait_for("the job ended", lambda: job_status(env, url, first) in ended, 90, 0.5)
    assert job_status(env, url, first) == "STOPPED"
    print(f"ray job stop -> job STOPPED: {time.monotonic() - t_stop:.1f} s")
    logs = ray_job(env, "logs", "--address", url, first, timeout_s=60).stdout[-3000:]
    ((sweep_id, status),) = q(db, "SELECT sweep_id, status FROM sweeps")
    assert status == "interrupted", logs
    assert 1 <= n_runs(db) < 4, logs

    args = linksweep_job(url, "run", str(sweep), "--db", str(db), "--resume")
    out = ray_job(env, *args)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ((address,),) = q(db, "SELECT ray_address FROM sweeps")
    assert q(db, "SELECT sweep_id, status FROM sweeps") == [(sweep_id, "ok")]
    assert address and address != "embedded"
    assert pairs(db) == [("default", 1, 1), ("default", 2, 1), ("other", 1, 1), ("other", 2, 1)]
