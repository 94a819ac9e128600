"""`linksweep run --address` against a cluster it cannot join: exit 2, one line naming the
address and the cause, no traceback, within a bound (Ray alone waits 20 s to minutes).

Uses no session cluster: the CLI runs in a subprocess. The token case starts its own
`ray start --head --block` with RAY_AUTH_MODE=token, in its own process group, temp HOME, temp
dir and ports (as test_job_submit.py), and stops it by signalling that group only: never
`ray stop`, which would stop every Ray on the machine. The wording itself is unit-tested:
tests/unit/test_join_error.py.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from orchestrator.raycluster.reach import tcp_probe
from tests.integration.rayports import free_port, head_ports

# quiet lane (tests/lanes.py): a failed join must end within a bound
pytestmark = pytest.mark.quiet

REPO = str(Path(__file__).resolve().parents[2])
BIN = os.path.dirname(sys.executable)
JOIN_BOUND_S = 45.0  # interpreter and Ray imports on a busy 2-core machine, plus the join
AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS")
NO_DRAIN = {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
"""The head stops at once on SIGTERM, without Ray's 30 s drain wait (test_job_submit.py)."""


def _env(home: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in AUTH_ENV}
    return {**env, "HOME": home, "RAY_DISABLE_USAGE_STATS": "1", **extra}


def _linksweep_run(sweep: str, db: str, address: str, env: dict) -> tuple:
    """(completed process, seconds it took)."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "run", sweep, "--db", db, "--address", address],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc, time.monotonic() - start


def _one_line(proc) -> str:
    """The CLI's only stderr line, after checking it exited 2 without a traceback."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


def test_nothing_listening_is_one_line_and_exit_2_at_once(tmp_path, write_sweep):
    port = free_port()  # bound for a moment, then released: nobody listens there
    env = _env(str(tmp_path))
    proc, took_s = _linksweep_run(
        write_sweep(), str(tmp_path / "r.duckdb"), f"127.0.0.1:{port}", env
    )
    line = _one_line(proc)
    assert line.startswith(f"linksweep: cannot join the Ray cluster at 127.0.0.1:{port}")
    assert "nothing accepts connections on" in line and f"--port {port}" in line
    assert took_s < JOIN_BOUND_S


@pytest.fixture(scope="module")
def token_head(tmp_path_factory):
    """A `ray start --head` requiring a token; yields (GCS address, its token)."""
    token = secrets.token_hex(32)
    home = str(tmp_path_factory.mktemp("token-home"))
    port = free_port()
    ports = head_ports()
    ray_tmp = tempfile.mkdtemp(prefix="lsauth", dir="/tmp")  # Ray's socket paths: 107 bytes
    log_path = tmp_path_factory.mktemp("token-head") / "head.log"
    head_log = open(log_path, "w")  # noqa: SIM115 - closed in the finally below
    head = subprocess.Popen(
        [
            f"{BIN}/ray",
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--num-cpus=1",
            "--include-dashboard=false",
            f"--temp-dir={ray_tmp}",
            *(f"{flag}={p}" for flag, p in ports.items()),
        ],
        env=_env(home, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token, **NO_DRAIN),
        stdout=head_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while "Ray runtime started" not in log_path.read_text():
            if head.poll() is not None:
                raise RuntimeError(f"ray start exited {head.returncode}: {log_path.read_text()}")
            assert time.monotonic() < deadline, f"head not up: {log_path.read_text()[-3000:]}"
            time.sleep(0.5)
        assert tcp_probe("127.0.0.1", port) is None
        yield f"127.0.0.1:{port}", token
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
        head_log.close()
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("auth", "says"),
    [
        ({}, "this process sends no token (RAY_AUTH_MODE is unset here"),
        ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64}, "refused this process's token"),
    ],
    ids=["no-token", "wrong-token"],
)
def test_a_refused_token_is_one_line_and_exit_2(token_head, tmp_path, write_sweep, auth, says):
    address, _ = token_head
    env = _env(str(tmp_path), **auth)  # a HOME without ~/.ray/auth_token
    proc, took_s = _linksweep_run(write_sweep(), str(tmp_path / "r.duckdb"), address, env)
    line = _one_line(proc)
    assert line.startswith(f"linksweep: cannot join the Ray cluster at {address}")
    assert says in line and "RAY_AUTH_MODE=disabled" in line
    assert took_s < JOIN_BOUND_S


@pytest.mark.slow
def test_the_right_token_joins(token_head, tmp_path):
    """The bounded, quiet join still joins: connect, list the node, let go."""
    address, token = token_head
    code = (
        "import sys\n"
        "from orchestrator.raycluster import nodes, session\n"
        "print(session.connect(sys.argv[1]), len(nodes.alive_nodes()))\n"
        "session.disconnect()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, address],
        env=_env(str(tmp_path), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == [address, "1"]
