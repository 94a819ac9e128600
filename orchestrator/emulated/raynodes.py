"""The Ray processes of an emulated cluster: `ray start` argv, starting, finding, stopping.

- `RayNodeOptions` / `ray_start_argv` (pure): the head in the root namespace, one node per
  namespace, each with its own temp dir and the custom resource `emulated_node_<i>`.
- `start_ray`: run `ray start` commands concurrently, in their own sessions.
- `wait_ready`: poll the GCS until the head and every node are alive.
- The state file (`read_state`, `write_state`): what `up` created, so `down` can undo it.
- Process tracking: `cluster_pids` finds every live process of the cluster by env marker,
  namespace, recorded (pid, start time) and process tree, never by name; `terminate`
  stops them (SIGTERM, then SIGKILL).

May import: netns, blueprint, shapes, orchestrator.raycluster.nodes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.emulated.blueprint import EmulatedPlan
from orchestrator.emulated.netns import netns_pids
from orchestrator.emulated.shapes import (
    CLIENT_SERVER_PORT,
    DASHBOARD_AGENT_PORT,
    DASHBOARD_PORT,
    EmulatedError,
    Log,
)

STATE_FILE = "state.json"
STATE_VERSION = 1

# Ray reserves 30% of RAM per node for its object store by default; N nodes on one
# machine would each claim that. Ranks return small records, so 256 MiB is plenty.
OBJECT_STORE_BYTES = 256 * 2**20

READY_TIMEOUT_S = 120.0  # all raylets registered; 2-core CI machines need ~20 s
RAY_START_TIMEOUT_S = 120.0
STOP_GRACE_S = 1.0  # SIGTERM -> SIGKILL. Python processes exit within it; gcs_server, the
# raylets and the runtime-env agents did not within 5 s either (measured: 7 of 24 left after
# 5 s on every `down`), and nothing of an emulated cluster is worth a graceful shutdown: it is
# all removed anyway

MARKER_ENV = "LINKSWEEP_EMULATED_ID"


# ---------------------------------------------------------------------------------------
# `ray start` (pure)


@dataclass(frozen=True)
class RayNodeOptions:
    """Resources each emulated node declares to Ray."""

    cpus_per_node: int = 1
    """Logical CPUs per node; every rank actor takes 1."""
    gpus_per_node: int = 0
    """Logical GPUs per node, so GPU-shaped sweeps schedule on a CPU-only machine."""
    object_store_bytes: int = OBJECT_STORE_BYTES
    include_dashboard: bool = True
    """Dashboard on the head (ls-host:8275): needed for `ray job submit`."""

    def __post_init__(self) -> None:
        if self.cpus_per_node < 1:
            raise ValueError(f"cpus_per_node must be >= 1, got {self.cpus_per_node}")
        if self.gpus_per_node < 0:
            raise ValueError(f"gpus_per_node must be >= 0, got {self.gpus_per_node}")


def ray_start_argv(
    plan: EmulatedPlan,
    opts: RayNodeOptions,
    ray_bin: str,
    temp_root: str,
    node: int | None,
) -> list[str]:
    """`ray start` for the head (node=None, root namespace) or for emulated node `node`.

    Each node gets its own Ray temp dir under temp_root: nodes started at once in one
    session dir race for the same socket names (plasma_store.1, raylet.1, ...).
    """
    label = "head" if node is None else plan.nodes[node].namespace
    common = [
        f"--temp-dir={temp_root}/{label}",
        f"--object-store-memory={opts.object_store_bytes}",
        "--disable-usage-stats",
    ]
    if node is None:
        return [
            ray_bin,
            "start",
            "--head",
            f"--node-ip-address={plan.head_ip}",
            f"--port={plan.port}",
            # No CPUs/GPUs: ranks never land on the head, which has no ls-* links.
            "--num-cpus=0",
            "--num-gpus=0",
            f"--include-dashboard={'true' if opts.include_dashboard else 'false'}",
            f"--dashboard-host={plan.head_ip}",
            f"--dashboard-port={DASHBOARD_PORT}",
            f"--ray-client-server-port={CLIENT_SERVER_PORT}",
            f"--dashboard-agent-listen-port={DASHBOARD_AGENT_PORT}",
            *common,
        ]
    n = plan.nodes[node]
    return [
        "ip",
        "netns",
        "exec",
        n.namespace,
        ray_bin,
        "start",
        f"--address={plan.address}",
        f"--node-ip-address={n.ip}",
        f"--num-cpus={opts.cpus_per_node}",
        f"--num-gpus={opts.gpus_per_node}",
        f"--resources={json.dumps({n.resource: 1})}",
        *common,
    ]


# ---------------------------------------------------------------------------------------
# The state file


def state_path(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / STATE_FILE


def write_state(path: Path, state: dict[str, Any]) -> None:
    # Write-then-rename: a crash leaves the previous state, never half a file.
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, path)


def read_state(state_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    path = state_path(state_dir)
    if not path.exists():
        return None
    try:
        state = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise EmulatedError(f"state file {path} is unreadable: {e}") from None
    if state.get("version") != STATE_VERSION:
        raise EmulatedError(f"state file {path} has version {state.get('version')!r}")
    return state


# ---------------------------------------------------------------------------------------
# Starting Ray


def ray_env(cluster_id: str) -> dict[str, str]:
    env = dict(os.environ)
    # A RAY_ADDRESS from the caller would make `ray start --head` join that cluster.
    for key in ("RAY_ADDRESS", "RAY_NAMESPACE", "RAY_JOB_CONFIG_JSON_ENV_VAR"):
        env.pop(key, None)
    env["RAY_DISABLE_USAGE_STATS"] = "1"
    # Explicit: with RAY_AUTH_MODE unset, `ray start --head` turns token auth on when
    # ~/.ray/auth_token exists (any earlier local ray.init() writes one) while
    # `ray start --address` does not, and the nodes are then refused by their own head.
    env["RAY_AUTH_MODE"] = "disabled"
    env[MARKER_ENV] = cluster_id
    # The venv's bin (unresolved) goes last: its tools are found, but a program also on the
    # system PATH is the system's, as for a sweep on the embedded cluster. Above all `ninja`:
    # DeepSpeed builds its ops with the first ninja on PATH, and two ninja versions (the
    # system's 1.11, the venv's 1.13) hash build commands differently, so each rebuilt the
    # other's op (41-52 s a time) whenever emulated and embedded runs took turns.
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = env.get("PATH", "") + os.pathsep + bin_dir if env.get("PATH") else bin_dir
    return env


def ray_bin() -> str:
    candidate = Path(sys.executable).parent / "ray"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("ray")
    if found is None:
        raise EmulatedError(f"no `ray` executable next to {sys.executable} or on PATH")
    return found


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def start_ray(argvs: dict[str, list[str]], env: dict[str, str], log_dir: Path) -> None:
    """Run `ray start` commands concurrently; raise with the log tail of any failure."""
    procs = {}
    for label, argv in argvs.items():
        log_path = log_dir / f"ray-start-{label}.log"
        with log_path.open("w") as out:
            # Own session: a Ctrl-C at the terminal must not reach the Ray daemons.
            procs[label] = (
                subprocess.Popen(
                    argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                ),
                log_path,
            )
    deadline = time.monotonic() + RAY_START_TIMEOUT_S
    failures = []
    for label, (proc, log_path) in procs.items():
        try:
            rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = "timeout"
        if rc != 0:
            failures.append(f"`ray start` for {label} failed ({rc}):\n{_tail(log_path)}")
    if failures:
        raise EmulatedError("\n".join(failures))


def gcs_nodes(address: str) -> list[dict[str, Any]]:
    """Nodes the GCS at `address` knows ([] when it cannot be reached)."""
    from orchestrator.raycluster.nodes import gcs_nodes as ask_gcs

    return ask_gcs(address) or []


def wait_ready(plan: EmulatedPlan, timeout_s: float) -> list[dict[str, Any]]:
    """Poll the GCS until the head and every node are alive (bounded by timeout_s)."""
    want = {plan.head_ip, *(n.ip for n in plan.nodes)}
    deadline = time.monotonic() + timeout_s
    seen: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        seen = gcs_nodes(plan.address)
        alive = {n["ip"] for n in seen if n["alive"]}
        if want <= alive:
            return seen
        time.sleep(0.5)
    alive = {n["ip"] for n in seen if n["alive"]}
    raise EmulatedError(
        f"Ray nodes {sorted(want - alive)} not alive after {timeout_s:.0f} s "
        f"(alive: {sorted(alive)})"
    )


# ---------------------------------------------------------------------------------------
# Finding and stopping the cluster's processes (through /proc)


def _proc_ids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _ppid_and_state(pid: int) -> tuple[int, str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or ')'.
    rest = stat[stat.rindex(")") + 2 :].split()
    return int(rest[1]), rest[0]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def _start_time(pid: int) -> int | None:
    """Start time in clock ticks since boot (/proc/<pid>/stat field 22): with the pid, it
    names a process uniquely, so a recorded pid that was reused is never signalled."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def _alive(pid: int) -> bool:
    info = _ppid_and_state(pid)
    return info is not None and info[1] not in ("Z", "X")


def _is_marked(pid: int, cluster_id: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{MARKER_ENV}={cluster_id}".encode() in environ.split(b"\0")


def cluster_pids(state: dict[str, Any], namespaces: Sequence[str]) -> set[int]:
    """Every live process that belongs to this emulated cluster.

    Marked by env; in one of its namespaces; recorded by `up` with the same start time;
    or a descendant of any of these. Ray's Python processes rename themselves with
    setproctitle, which overwrites their environ (and so the marker): while their parent
    lives they are found as descendants, after a crash by their recorded start time.
    """
    cluster_id = state["cluster_id"]
    me = os.getpid()
    pids = {p for p in _proc_ids() if p != me and _is_marked(p, cluster_id)}
    for pid, start in state.get("start_times", {}).items():
        if _start_time(int(pid)) == start:
            pids.add(int(pid))
    for ns in namespaces:
        pids |= netns_pids(ns)
    children: dict[int, list[int]] = {}
    for p in _proc_ids():
        info = _ppid_and_state(p)
        if info is not None:
            children.setdefault(info[0], []).append(p)
    stack = list(pids)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in pids and child != me:
                pids.add(child)
                stack.append(child)
    return {p for p in pids if _alive(p)}


def record_pids(state: dict[str, Any], label: str, pids: set[int]) -> None:
    """Remember `pids` (with their start times) under `label` in the state."""
    starts = {p: _start_time(p) for p in sorted(pids)}
    state["pids"][label] = [p for p, t in starts.items() if t is not None]
    state["start_times"].update({str(p): t for p, t in starts.items() if t is not None})


def terminate(pids: set[int], log: Log) -> set[int]:
    """SIGTERM, wait up to STOP_GRACE_S, then SIGKILL; returns pids still there.

    A process counts as gone only once its /proc entry is (its parent reaped it): a zombie
    raylet still shows in ``pgrep``, so ``down`` waits for that too.
    """
    starts = {p: _start_time(p) for p in pids}

    def signal_all(sig: signal.Signals) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def wait(deadline: float) -> set[int]:
        while True:
            left = {p for p in pids if starts[p] is not None and _start_time(p) == starts[p]}
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.05)

    if not pids:
        return set()
    log(f"stopping {len(pids)} Ray processes")
    signal_all(signal.SIGTERM)
    left = wait(time.monotonic() + STOP_GRACE_S)
    if left:
        names = sorted({_comm(p) for p in left})
        log(f"{len(left)} still running after {STOP_GRACE_S:.0f} s ({', '.join(names)}); SIGKILL")
        pids = left
        signal_all(signal.SIGKILL)
        left = wait(time.monotonic() + 5.0)
    return left


def terminate_all(state: dict[str, Any], namespaces: Sequence[str], log: Log) -> set[int]:
    """Terminate the cluster's processes until a fresh look finds none (a worker can be forked
    while its siblings stop); returns those that would not go."""
    still: set[int] = set()
    for _ in range(5):
        pids = cluster_pids(state, namespaces) - still
        if not pids:
            break
        still |= terminate(pids, log)
    return still
