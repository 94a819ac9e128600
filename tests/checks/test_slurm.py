"""clusters/slurm/linksweep.sbatch under a real Slurm: Debian's slurmctld, slurmd and munged,
configured by scripts/checks/slurm.sh as two Slurm nodes on this one machine (two slurmd, each
with all its CPUs, no GPUs), are started here and stopped at the end. Four jobs, each followed
in ``scontrol show job`` (no ``sacct``: that needs slurmdbd and a database server):

- a small sweep (one DDP run of gpt2-tiny on two CPU ranks) runs to completion: the job is
  COMPLETED with exit code 0, the database where ``--db`` said holds the run, linksweep named
  the allocation's node and the Ray node it joined, Ray got the node's CPUs and no GPU, and no
  Ray process of the job is left;
- a sweep whose spread placement needs two nodes is refused by the one-node allocation before
  any Ray starts: exit code 2 with the reason;
- on two nodes, a sweep whose two ranks go on different nodes (``spread``) runs to completion:
  the script started a Ray worker on the second node beside the head on the first;
- a sweep that passes that check but not the cluster's (two ranks sharing a GPU, on a node
  without one) exits 2 from linksweep after Ray started: the exit code passes through and Ray
  is stopped.

About 110 s on 2 cores (the four jobs about 38, 51, 2 and 15 s; Slurm started and stopped in
about 1 s); scripts/checks/slurm.sh adds about 5 s where Slurm is not installed yet (8
packages, 3.5 MB), under 1 s where it is.
Run as root: ``bash scripts/checks.sh slurm``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.rayports import free_port

REPO = Path(__file__).resolve().parents[2]
SBATCH = REPO / "clusters" / "slurm" / "linksweep.sbatch"
SLURM_DIR = Path(os.environ.get("LINKSWEEP_SLURM_DIR", "/tmp/linksweep-slurm"))
CONF = SLURM_DIR / "slurm.conf"
MUNGE_PID = Path("/run/munge/munged.pid")
JOB_TIMEOUT_S = 420.0
"""A job's bound: the sweep's job took 28-46 s on 2 cores."""

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="slurmd and munged need root")


def _pid(path: Path) -> int | None:
    try:
        pid = int(path.read_text().split()[0])
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError, IndexError):
        return None


def _stop(path: Path, deadline_s: float = 20.0) -> None:
    """Stop the daemon whose pid file is ``path`` (if it runs), waiting until it is gone."""
    pid = _pid(path)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + deadline_s
    while time.monotonic() < end and _pid(path) == pid:
        time.sleep(0.2)  # polling the daemon's exit, with the deadline above
    if _pid(path) == pid:
        os.kill(pid, signal.SIGKILL)


def _run(*argv: str, env: dict, check: bool = True) -> str:
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    if check and out.returncode != 0:
        raise AssertionError(f"{argv} exited {out.returncode}: {out.stderr}")
    return out.stdout


def _slurm_nodes() -> list[str]:
    return re.findall(r"^NodeName=(\S+)", CONF.read_text(), flags=re.M)


def _slurmd_pid(node: str) -> Path:
    return SLURM_DIR / f"slurmd-{node}.pid"


def _stop_all(env: dict) -> None:
    if shutil.which("scancel") and _pid(SLURM_DIR / "slurmctld.pid"):
        _run("scancel", "--full", "--user=root", env=env, check=False)
    for node in _slurm_nodes():
        _stop(_slurmd_pid(node))
    _stop(SLURM_DIR / "slurmctld.pid")
    _stop(MUNGE_PID)


@pytest.fixture(scope="module")
def slurm_env():
    """Slurm (two nodes on this machine) with munge, up for this module, every daemon stopped
    after it."""
    if not CONF.exists() or not shutil.which("slurmctld"):
        pytest.fail(f"no {CONF} or slurmctld: run `bash scripts/checks/slurm.sh` first")
    env = {**os.environ, "SLURM_CONF": str(CONF)}
    for k in [k for k in env if k.startswith("SLURM_") and k != "SLURM_CONF"]:
        del env[k]  # a check run from inside a job: its variables are not this cluster's
    _stop_all(env)  # what an interrupted earlier run left
    try:
        subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], check=True)
        subprocess.run(["/usr/sbin/slurmctld", "-c", "-f", str(CONF)], env=env, check=True)
        for node in _slurm_nodes():
            subprocess.run(["/usr/sbin/slurmd", "-f", str(CONF), "-N", node], env=env, check=True)
        end = time.monotonic() + 60
        states: list[str] = []
        while time.monotonic() < end:
            states = _run("sinfo", "-h", "-N", "-o", "%T", env=env, check=False).split()
            if states and set(states) == {"idle"}:
                break
            time.sleep(0.5)  # polling the nodes' state, with the deadline above
        assert set(states) == {"idle"}, f"nodes {states} after 60 s; see {SLURM_DIR}/log"
        yield env
    finally:
        _stop_all(env)
        daemons = [_slurmd_pid(n) for n in _slurm_nodes()] + [
            SLURM_DIR / "slurmctld.pid",
            MUNGE_PID,
        ]
        assert [d for d in daemons if _pid(d) is not None] == []


def submit(env: dict, workdir: Path, *linksweep_args: str, nodes: int = 1) -> tuple[dict, str]:
    """sbatch the script on ``nodes`` nodes, wait for the job to end; its ``scontrol show
    job`` fields and its output."""
    ray_args = " ".join(
        f"--{flag}={free_port()}"  # other Ray clusters may run on this machine
        for flag in ("dashboard-port", "ray-client-server-port", "dashboard-agent-listen-port")
    )
    job_env = {
        **env,
        "LINKSWEEP_HOME": str(REPO),
        "LINKSWEEP_RAY_PORT": str(free_port()),
        "LINKSWEEP_RAY_START_ARGS": ray_args,
        "LINKSWEEP_RAY_JOIN_TIMEOUT_S": "120",
    }
    out = _run(
        "sbatch", "--parsable", f"--nodes={nodes}", f"--chdir={workdir}",
        f"--output={workdir}/job-%j.out", str(SBATCH), *linksweep_args, env=job_env,
    )  # fmt: skip
    job_id = out.strip().split(";")[0]
    end = time.monotonic() + JOB_TIMEOUT_S
    fields: dict = {}
    while time.monotonic() < end:
        text = _run("scontrol", "show", "job", job_id, env=env, check=False)
        fields = dict(re.findall(r"(\w+)=(\S*)", text))
        if fields.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
            break
        time.sleep(1.0)  # polling the job's state, with the deadline above
    else:
        _run("scancel", job_id, env=env, check=False)
        raise AssertionError(f"job {job_id} still {fields.get('JobState')} after {JOB_TIMEOUT_S} s")
    fields["JobId"] = job_id
    return fields, (workdir / f"job-{job_id}.out").read_text()


def sweep_file(path: Path, **over) -> Path:
    body = {
        "name": "slurm-check", "model": "gpt2-tiny", "dataset": "builtin", "precision": "fp32",
        "seq_len": 64, "micro_batch_size": 2, "steps": 4, "warmup_steps": 1, "repeats": 1,
        "world_size": 2, "links": "{default: {}}",
        "grid": "{strategy: [ddp], grad_accum: [1], placement: [pack]}",
    } | over  # fmt: skip
    path.write_text("".join(f"{k}: {v}\n" for k, v in body.items()))
    return path


def ray_processes(job_id: str) -> list[str]:
    # the job's Ray folders, /tmp/ray-JOBID-NODE, are in the command line of each of its processes
    out = subprocess.run(["pgrep", "-af", f"/tmp/ray-{job_id}-"], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if "pgrep" not in line]


def test_sweep_runs_to_completion_on_the_allocation(slurm_env, tmp_path):
    sweep = sweep_file(tmp_path / "small.yaml")
    db = tmp_path / "results" / "r.duckdb"
    db.parent.mkdir()
    fields, output = submit(slurm_env, tmp_path, "run", str(sweep), "--db", str(db))
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), output
    host, node = socket.gethostname().split(".")[0], _slurm_nodes()[0]
    assert f"Slurm job {fields['JobId']}: 1 node allocated ({node}); Ray: 1 node joined" in output
    node_log = (tmp_path / f"linksweep-{fields['JobId']}-ray" / f"{host}.log").read_text()
    assert f"--num-cpus={os.cpu_count()} --num-gpus=0" in node_log
    assert "Ray stopped" in output and "Killed" not in output  # stopped by SIGTERM, not KILL
    assert ray_processes(fields["JobId"]) == []
    runs = subprocess.run(
        [str(REPO / ".venv/bin/linksweep"), "query", "--db", str(db), "--format", "csv",
         "SELECT status, count(*) AS n FROM runs GROUP BY status"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert runs.split() == ["status,n", "ok,1"], runs


def test_two_nodes_run_a_spread_sweep(slurm_env, tmp_path):
    sweep = sweep_file(tmp_path / "spread.yaml", grid="{strategy: [ddp], placement: [spread]}")
    db = tmp_path / "r.duckdb"
    fields, output = submit(slurm_env, tmp_path, "run", str(sweep), "--db", str(db), nodes=2)
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), output
    n1, n2 = _slurm_nodes()
    assert f"2 nodes allocated ({n1}, {n2}); Ray: 2 nodes joined" in output
    assert "2 of 2 nodes in" in output and "r1: ok" in output
    assert "Killed" not in output and ray_processes(fields["JobId"]) == []


def test_allocation_with_too_few_nodes_is_refused_before_ray(slurm_env, tmp_path):
    sweep = sweep_file(tmp_path / "spread.yaml", grid="{strategy: [ddp], placement: [spread]}")
    fields, output = submit(slurm_env, tmp_path, "run", str(sweep), "--db", str(tmp_path / "r.db"))
    assert (fields["JobState"], fields["ExitCode"]) == ("FAILED", "2:0"), output
    assert f"Slurm job {fields['JobId']} has 1 node ({_slurm_nodes()[0]})" in output
    assert "sbatch --nodes=2" in output
    assert "Ray head on" not in output  # nothing started
    assert not (tmp_path / f"linksweep-{fields['JobId']}-ray").exists()


def test_exit_code_of_linksweep_passes_through_and_ray_stops(slurm_env, tmp_path):
    sweep = sweep_file(tmp_path / "shared-gpu.yaml", ranks_per_gpu=2)  # the node has no GPU
    fields, output = submit(slurm_env, tmp_path, "run", str(sweep), "--db", str(tmp_path / "r.db"))
    assert (fields["JobState"], fields["ExitCode"]) == ("FAILED", "2:0"), output
    assert "Ray: 1 node joined" in output  # refused by linksweep's check on the cluster:
    assert "ranks_per_gpu: 2 (two ranks sharing one GPU) needs a GPU" in output
    assert "linksweep run exited 2" in output and "Ray stopped" in output
    assert "Killed" not in output
    assert ray_processes(fields["JobId"]) == []
