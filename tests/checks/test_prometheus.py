"""``linksweep run --metrics`` scraped by a real Prometheus (Debian's ``prometheus``; installed
by scripts/checks/prometheus.sh): a ``ray start --head`` with a metrics export port on loopback,
a Prometheus scraping it every second, a two-run sweep run with ``--address``, and the values
read back through Prometheus's HTTP query API (``/api/v1/query``).

The head runs in its own session (``ray start --block``) with its own ports and temp dir; the
teardown signals that session only. ``ray stop`` is not used: it stops every Ray process on the
machine, other users' clusters too. Ray reports every 10 s, so the values are polled with a
deadline, never waited for by a sleep.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from orchestrator.metrics import progress
from orchestrator.store import read_query
from tests.integration.rayports import free_port, head_ports

REPO = Path(__file__).resolve().parents[2]
BIN = os.path.dirname(sys.executable)
REPORT_DEADLINE_S = 60.0
"""Ray's metrics agent gets a process's values every 10 s; Prometheus scrapes every second.
Six reports' time for a value to show."""
TINY = (
    "grid.strategy=[ddp]",
    "grid.grad_accum=[1]",
    "grid.linkbench=false",
    "repeats=1",
    "steps=3",
    "warmup_steps=1",
)
"""sweeps/quickstart.yaml cut to two runs: DDP on each of its two links."""


def _env() -> dict:
    env = {**os.environ, "RAY_DISABLE_USAGE_STATS": "1", "RAY_AUTH_MODE": "disabled"}
    env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = "0"  # tests/integration/test_job_submit.py
    env.pop("RAY_ADDRESS", None)
    return env


def _session_pids(sid: int) -> list[int]:
    """The processes of session ``sid`` (Ray's workers get their own process group in it)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == sid:
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


def _stop_session(proc: subprocess.Popen, wait_s: float = 30) -> None:
    """SIGTERM to the session ``proc`` leads, then SIGKILL to whatever of it is left."""
    for pid in _session_pids(proc.pid):
        os.kill(pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=wait_s)
    end = time.monotonic() + 10
    while (left := _session_pids(proc.pid)) and time.monotonic() < end:
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    proc.wait(timeout=10)


def _get(url: str, timeout_s: float = 5) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return r.read()


def _wait_up(url: str, proc: subprocess.Popen, log: Path, deadline_s: float) -> None:
    end, last = time.monotonic() + deadline_s, None
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(
                f"{proc.args[0]} exited {proc.returncode}: {log.read_text()[-3000:]}"
            )
        try:
            _get(url, 2)
            return
        except (OSError, urllib.error.URLError) as exc:
            last = exc
        time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer in {deadline_s} s: {last}")


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """A `ray start --head` exporting metrics on loopback; yields (GCS address, metrics port)."""
    gcs_port = free_port()
    ports = head_ports()
    metrics_port = ports["--metrics-export-port"]
    ray_tmp = tempfile.mkdtemp(prefix="lsprom", dir="/tmp")  # short: unix socket paths
    log = tmp_path_factory.mktemp("head") / "head.log"
    with open(log, "w") as out:
        head = subprocess.Popen(
            [
                f"{BIN}/ray",
                "start",
                "--head",
                "--block",
                "--node-ip-address=127.0.0.1",
                f"--port={gcs_port}",
                "--num-cpus=2",
                "--num-gpus=0",
                "--include-dashboard=false",
                f"--temp-dir={ray_tmp}",
                *(f"{flag}={port}" for flag, port in ports.items()),
            ],  # fmt: skip
            env=_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_up(f"http://127.0.0.1:{metrics_port}/metrics", head, log, 120)
        yield f"127.0.0.1:{gcs_port}", metrics_port
    finally:
        _stop_session(head)
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def prometheus(ray_head, tmp_path_factory):
    """Prometheus scraping the head's metrics port every second; yields its query function."""
    binary = shutil.which("prometheus")
    assert binary, "no prometheus on PATH: run bash scripts/checks.sh prometheus"
    _, metrics_port = ray_head
    folder = tmp_path_factory.mktemp("prometheus")
    config = folder / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: ray\n    static_configs: [{{targets: ['127.0.0.1:{metrics_port}']}}]\n"
    )
    port = free_port()
    log = folder / "prometheus.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],  # fmt: skip
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_up(f"{base}/-/ready", proc, log, 60)

        def query(promql: str) -> list[dict]:
            url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
            answer = json.loads(_get(url))
            assert answer["status"] == "success", answer
            return answer["data"]["result"]

        yield query
    finally:
        _stop_session(proc)


def _value(query, promql: str) -> float | None:
    result = query(promql)
    return float(result[0]["value"][1]) if result else None


def poll(query, promql: str, want: float, deadline_s: float = REPORT_DEADLINE_S) -> float | None:
    """The query's value once it equals ``want``, else the last one seen at the deadline."""
    end, got = time.monotonic() + deadline_s, None
    while time.monotonic() < end:
        got = _value(query, promql)
        if got == want:
            return got
        time.sleep(1)
    return got


def test_a_sweeps_progress_reaches_prometheus_and_ends_at_the_databases_count(
    ray_head, prometheus, tmp_path
):
    address, metrics_port = ray_head
    query = prometheus
    db = tmp_path / "m.duckdb"
    overrides = [arg for kv in TINY for arg in ("--set", kv)]
    argv = [sys.executable, "-m", "orchestrator", "run", str(REPO / "sweeps" / "quickstart.yaml")]
    argv += ["--db", str(db), "--address", address, "--metrics", *overrides]
    out = subprocess.run(argv, env=_env(), cwd=REPO, capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stderr[-4000:]
    assert "metrics: ray_linksweep_* at http://" in out.stderr and f":{metrics_port}/" in out.stderr

    (sweep_id,), = read_query(str(db), "SELECT sweep_id FROM sweeps")[1]  # fmt: skip
    stored = read_query(str(db), f"SELECT count(*) FROM runs WHERE sweep_id = '{sweep_id}'")
    n_runs = stored[1][0][0]
    assert n_runs == 2
    sel = f'{{sweep_id="{sweep_id}"}}'

    def last(metric: str) -> str:
        """The metric's last scraped value: Ray drops a gauge ~20 s (two reports) after its
        process exits, and Prometheus's instant query then finds the series stale."""
        return f"max(last_over_time({progress.exported_name(metric)}{sel}[15m]))"

    def peak(metric: str) -> str:
        return f"max(max_over_time({progress.exported_name(metric)}{sel}[15m]))"

    done = poll(query, last("linksweep_sweep_runs_done"), n_runs)
    assert done == n_runs  # what the database says at the end
    assert poll(query, last("linksweep_sweep_running"), 0) == 0
    assert _value(query, last("linksweep_sweep_runs_left")) == 0
    assert _value(query, last("linksweep_sweep_runs_failed")) == 0
    # published while the sweep ran, not only at its end: scraped as 1 and with the whole plan
    # left before the end
    assert _value(query, peak("linksweep_sweep_running")) == 1
    assert _value(query, peak("linksweep_sweep_runs_left")) == n_runs
    # the slowdown of the run on no_p2p against the baseline link (default): the stored one
    (slowdown,), = read_query(
        str(db), f"SELECT slowdown FROM sensitivity_stats WHERE sweep_id = '{sweep_id}'"
    )[1]  # fmt: skip
    got = _value(query, last("linksweep_sweep_slowdown_ratio"))
    assert got == pytest.approx(slowdown, rel=1e-6)
    beat = _value(query, last("linksweep_sweep_heartbeat_timestamp_seconds"))
    assert beat is not None and abs(time.time() - beat) < 300


def test_a_fleet_checks_rounds_reach_prometheus_as_the_database_stores_them(
    ray_head, prometheus, tmp_path
):
    address, _ = ray_head
    query = prometheus
    db = tmp_path / "f.duckdb"
    argv = [sys.executable, "-m", "orchestrator", "fleet", "--db", str(db), "--address", address]
    out = subprocess.run(
        [*argv, "--metrics"], env=_env(), cwd=REPO, capture_output=True, text=True, timeout=400
    )
    assert out.returncode in (0, 1), out.stderr[-4000:]  # 1: a suspect named, still stored
    (fleet_id,), = read_query(str(db), "SELECT fleet_id FROM fleet_checks")[1]  # fmt: skip
    stored = read_query(str(db), f"SELECT count(*) FROM fleet_rounds WHERE fleet_id = '{fleet_id}'")
    n_rounds = stored[1][0][0]
    assert n_rounds >= 3  # health, the ranks' start, a node check, the compute probe
    sel = f'{{fleet_id="{fleet_id}"}}'

    def last(metric: str) -> str:
        return f"max(last_over_time({progress.exported_name(metric)}{sel}[15m]))"

    assert poll(query, last("linksweep_fleet_rounds_done"), n_rounds) == n_rounds
    assert poll(query, last("linksweep_fleet_running"), 0) == 0
    assert _value(query, last("linksweep_fleet_rounds_left")) == 0
