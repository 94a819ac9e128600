"""What clusters/slurm/linksweep.sbatch asks of Python, one subcommand each; the decisions are
``orchestrator.raycluster.slurm``'s (pure), this file only reads the machine and acts:

    check LINKSWEEP_ARGS...   the linksweep command parsed and, for run and linkbench, its sweep
                              file checked (inside the job: against the allocation's node count)
                              before any Ray starts; exit 2 with linksweep's own error
    head-ip                   the address the other nodes dial the Ray head at
    node head|worker ...      exec `ray start --block` with this node's share (its task's
                              SLURM_CPUS_ON_NODE, SLURM_GPUS_ON_NODE), its Ray folder
                              TEMP_DIR-NODENAME: one task per node
    wait ADDRESS N TIMEOUT_S [PID...]
                              poll the GCS until N nodes are alive; exit 2 on the deadline or
                              when one of the PIDs (the sruns holding the Ray nodes) is gone

Run with the venv's python from the repository root (the batch script does).
"""

from __future__ import annotations

import os
import socket
import sys
import time

from orchestrator.raycluster import slurm
from orchestrator.store.liveness import pid_alive


def say(msg: str) -> None:
    print(f"linksweep.sbatch: {msg}", file=sys.stderr, flush=True)


def check(argv: list[str]) -> int:
    from orchestrator.cli import build_parser
    from orchestrator.commands.sweeping import load_checked

    args = build_parser().parse_args(argv)  # a bad flag: argparse says so and exits 2
    if args.command not in ("run", "linkbench"):
        return 0
    # DeepSpeed's config check waits for linksweep itself: it imports DeepSpeed (seconds)
    return (
        2 if load_checked(args.sweep, args.db, deepspeed=False, overrides=args.set) is None else 0
    )


def head_ip() -> int:
    alloc = slurm.allocation_from_env(os.environ)
    n_nodes = len(alloc.nodes) if alloc else 1
    try:
        resolved = [a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)]
    except socket.gaierror:
        resolved = []
    import psutil  # a Ray dependency

    interfaces = [
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET
    ]
    ip = slurm.pick_head_ip(resolved, interfaces, n_nodes)
    if ip is None:
        say(f"no address of {socket.gethostname()} that other nodes can dial "
            f"(resolved: {resolved}, interfaces: {interfaces}); set LINKSWEEP_RAY_HEAD_IP")  # fmt: skip
        return 2
    print(ip)
    return 0


def node(role: str, rest: list[str]) -> int:
    share = slurm.node_share(os.environ)
    ray = os.path.join(os.path.dirname(sys.executable), "ray")
    if role == "head":
        ip, port, temp_dir, *extra = rest
        argv = [ray, "start", "--head", f"--node-ip-address={ip}", f"--port={port}"]
    else:
        address, temp_dir, *extra = rest
        argv = [ray, "start", f"--address={address}"]
    # one folder per Slurm node: two Slurm nodes may share a machine (multiple slurmd), and two
    # Ray nodes in one folder race for the same socket names
    node_name = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    argv += [f"--temp-dir={temp_dir}-{node_name}", "--disable-usage-stats", "--block"]
    argv += [*slurm.ray_resource_args(share), *extra]
    cpus = "the machine's" if share.cpus is None else share.cpus
    say(f"Ray {role} on {socket.gethostname()}: {cpus} CPUs, {share.gpus} GPUs "
        f"(from {share.gpus_from}): {' '.join(argv[1:])}")  # fmt: skip
    os.execv(ray, argv)
    return 1  # not reached


def wait(address: str, n: int, timeout_s: float, pids: list[int]) -> int:
    from orchestrator.raycluster.nodes import gcs_nodes

    start = time.monotonic()
    alive: list[dict] = []
    while time.monotonic() - start < timeout_s:
        alive = [x for x in gcs_nodes(address) or [] if x["alive"]]
        if len(alive) >= n:
            say(f"Ray at {address}: {len(alive)} of {n} nodes in after "
                f"{time.monotonic() - start:.0f} s ({', '.join(x['ip'] for x in alive)})")  # fmt: skip
            return 0
        gone = [p for p in pids if not pid_alive(p)]
        if gone:
            say(f"Ray at {address}: {len(alive)} of {n} nodes in, and the srun holding Ray "
                f"nodes (pid {gone}) has ended: see the Ray node logs")  # fmt: skip
            return 2
        time.sleep(1.0)  # a poll interval, with the deadline above
    say(
        f"Ray at {address}: {len(alive)} of {n} nodes in after {timeout_s:.0f} s "
        "(LINKSWEEP_RAY_JOIN_TIMEOUT_S); see the Ray node logs"
    )
    return 2


def main(argv: list[str]) -> int:
    if not argv:
        say(__doc__)
        return 2
    cmd, rest = argv[0], argv[1:]
    try:
        if cmd == "check":
            return check(rest)
        if cmd == "head-ip":
            return head_ip()
        if cmd == "node" and rest and rest[0] in ("head", "worker"):
            return node(rest[0], rest[1:])
        if cmd == "wait" and len(rest) >= 3:
            return wait(rest[0], int(rest[1]), float(rest[2]), [int(p) for p in rest[3:]])
    except slurm.SlurmEnvError as exc:
        say(str(exc))
        return 2
    say(f"unknown subcommand {argv}\n{__doc__}")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
