"""Bringing an emulated cluster up, taking it down, and reporting its status.

`up` plans, runs the preflight, then creates the network (`netns`) and starts Ray
(`raynodes`), writing the state file before each step so that `down`, also after a crash
or Ctrl-C midway, undoes exactly what was started and nothing else. `plant_faults` replaces
the planted faults of a running cluster (tc only: Ray and the links stay up). `status`
reads the state file, the GCS and tc, and changes nothing.

May import: faults, netns, blueprint, raynodes, shapes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from orchestrator.emulated import netns, raynodes
from orchestrator.emulated.blueprint import EmulatedPlan, plan_emulated
from orchestrator.emulated.faults import Fault, planted_faults
from orchestrator.emulated.raynodes import READY_TIMEOUT_S, STATE_VERSION, RayNodeOptions
from orchestrator.emulated.shapes import (
    DASHBOARD_PORT,
    DEFAULT_STATE_DIR,
    IFACE_PREFIX,
    EmulatedError,
    LinkShape,
    Log,
    link_subnet,
)


def stderr_log(msg: str) -> None:
    """The default Log: one line on stderr, unprefixed."""
    print(msg, file=sys.stderr, flush=True)


def up(
    nodes: int,
    links: Sequence[LinkShape],
    state_dir: str | os.PathLike[str] = DEFAULT_STATE_DIR,
    *,
    cpus_per_node: int = 1,
    gpus_per_node: int = 0,
    prefix: str = "ls",
    include_dashboard: bool = True,
    ready_timeout_s: float = READY_TIMEOUT_S,
    log: Log = stderr_log,
    faults: Sequence[Fault] = (),
) -> str:
    """Create namespaces, links and Ray nodes; return the Ray address `<head_ip>:<port>`.

    `faults` (slow nodes, slow pairs; see `faults`) are shaped into the links and recorded
    in the state file (`plan.faults`, and `faults` with the nodes' IPs, `planted_faults`).
    On any failure (Ctrl-C included) everything created so far is removed again.
    """
    netns.require_root()
    plan = plan_emulated(nodes, links, prefix, faults)
    opts = RayNodeOptions(cpus_per_node, gpus_per_node, include_dashboard=include_dashboard)
    state_dir = Path(state_dir)
    path = raynodes.state_path(state_dir)
    if path.exists():
        raise EmulatedError(
            f"an emulated cluster is already recorded in {path}; "
            "run `linksweep cluster down --emulated` first"
        )
    netns.preflight(plan, state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    state = _new_state(plan, state_dir)
    raynodes.write_state(path, state)
    try:
        _create_network(plan, state, path, log)
        _start_ray_nodes(plan, opts, state, path, log)
        raynodes.wait_ready(plan, ready_timeout_s)
        state["address"] = plan.address
        raynodes.write_state(path, state)
    except BaseException:
        log("emulated cluster: up failed; removing what was created")
        down(state_dir, log=log, keep_logs=True)
        log(
            f"Ray logs of the failed attempt: {state['ray_temp_dir']}/<node>/session_*/logs "
            f"and {state_dir / 'logs'}"
        )
        raise
    return plan.address


def _new_state(plan: EmulatedPlan, state_dir: Path) -> dict[str, Any]:
    """The state file of a cluster about to be created: its plan and steps, nothing started."""
    state: dict[str, Any] = {
        "version": STATE_VERSION,
        "cluster_id": uuid.uuid4().hex,
        "created_at": time.time(),
        "plan": plan.to_dict(),
        "steps": [asdict(step) for step in plan.steps],
        "steps_started": 0,
        "ray_temp_dir": str(state_dir / "ray"),
        "ray_started": False,
        "pids": {},
        "start_times": {},
        "address": None,
    }
    state["faults"] = planted_faults(state)  # for readers of the JSON: IPs, not indices
    return state


def _create_network(plan: EmulatedPlan, state: dict[str, Any], path: Path, log: Log) -> None:
    """Namespaces, bridges, veths and qdiscs, recording before each step how far it got."""

    def before_step(started: int) -> None:
        state["steps_started"] = started
        raynodes.write_state(path, state)

    log(f"creating {len(plan.namespaces)} namespaces and {len(plan.links)} links")
    netns.apply_steps(plan, before_step)


def _start_ray_nodes(
    plan: EmulatedPlan, opts: RayNodeOptions, state: dict[str, Any], path: Path, log: Log
) -> None:
    """The Ray head in the root namespace, then one Ray node per namespace, each process
    recorded (pid and start time) as soon as it runs, so `down` finds it after a crash."""
    temp_dir, log_dir = Path(state["ray_temp_dir"]), path.parent / "logs"
    env = raynodes.ray_env(state["cluster_id"])
    ray_bin = raynodes.ray_bin()
    temp_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    state["ray_started"] = True
    raynodes.write_state(path, state)

    log(f"starting the Ray head on {plan.address} (root namespace, no CPUs/GPUs)")
    head_argv = raynodes.ray_start_argv(plan, opts, ray_bin, str(temp_dir), None)
    raynodes.start_ray({"head": head_argv}, env, log_dir)
    raynodes.record_pids(state, "head", raynodes.cluster_pids(state, []))
    raynodes.write_state(path, state)

    each = f"{opts.cpus_per_node} CPU, {opts.gpus_per_node} GPU each"
    log(f"starting {len(plan.nodes)} Ray nodes ({each})")
    argvs = {
        n.namespace: raynodes.ray_start_argv(plan, opts, ray_bin, str(temp_dir), n.index)
        for n in plan.nodes
    }
    raynodes.start_ray(argvs, env, log_dir)
    for n in plan.nodes:
        raynodes.record_pids(state, n.namespace, netns.netns_pids(n.namespace))
    raynodes.write_state(path, state)


def down(
    state_dir: str | os.PathLike[str] = DEFAULT_STATE_DIR,
    *,
    log: Log = stderr_log,
    keep_logs: bool = False,
) -> list[str]:
    """Stop the Ray processes and remove everything `up` started; return leftovers.

    Tolerates things already gone and a state file from an `up` that crashed midway.
    keep_logs leaves Ray's temp dir and the `ray start` logs (for a failed `up`).
    """
    netns.require_root()
    state = raynodes.read_state(state_dir)
    if state is None:
        log(f"no emulated cluster recorded in {raynodes.state_path(state_dir)}; nothing to do")
        return []
    started = list(state["steps"][: state["steps_started"]])
    namespaces = [s["namespace"] for s in started if s["kind"] == "netns"]

    leftovers: list[str] = []
    still = raynodes.terminate_all(state, namespaces, log)
    leftovers += [f"process {p} did not exit" for p in sorted(still)]

    if started:
        log(f"removing {len(started)} network steps")
    netns.undo_steps(started)
    leftovers += netns.wait_removed(started, state["plan"]["host_iface"])

    state_dir = Path(state_dir)
    if not keep_logs:
        shutil.rmtree(state["ray_temp_dir"], ignore_errors=True)
        shutil.rmtree(state_dir / "logs", ignore_errors=True)
    if leftovers:
        for item in leftovers:
            log(f"left over: {item}")
        log(f"keeping {raynodes.state_path(state_dir)} so `down` can be retried")
        return leftovers
    raynodes.state_path(state_dir).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not empty: something else lives there
        state_dir.rmdir()
    log("emulated cluster removed")
    return []


def plant_faults(
    faults: Sequence[Fault],
    state_dir: str | os.PathLike[str] = DEFAULT_STATE_DIR,
    *,
    log: Log = stderr_log,
) -> list[str]:
    """Replace the faults planted in the running cluster recorded in `state_dir` by `faults`
    (none: every device back to its link's own shape); return the devices reshaped.

    The qdiscs are what `up` with these faults would have created (the same plan, computed
    again), so a fault planted here is the same tc as one planted at `up`; Ray, the
    namespaces and the links are left alone. The state file records the new faults and
    steps, so `status` lists them and `down` removes them.
    """
    netns.require_root()
    state = raynodes.read_state(state_dir)
    if state is None or state["address"] is None:
        raise EmulatedError(f"no emulated cluster is up in {raynodes.state_path(state_dir)}")
    recorded = state["plan"]
    links = [LinkShape(x["name"], x["rate"], x["delay"]) for x in recorded["links"][1:]]
    plan = plan_emulated(len(recorded["nodes"]), links, recorded["prefix"], faults)
    changed = netns.replace_qdiscs(state["steps"], plan.steps)
    state["plan"] = plan.to_dict()
    state["steps"] = [asdict(step) for step in plan.steps]
    state["steps_started"] = len(plan.steps)
    state["faults"] = planted_faults(state)
    raynodes.write_state(raynodes.state_path(state_dir), state)
    what = ", ".join(f.describe() for f in faults) or "no fault"
    log(f"planted {what}: {len(changed)} devices reshaped")
    return changed


def status(state_dir: str | os.PathLike[str] = DEFAULT_STATE_DIR) -> dict[str, Any]:
    """Nodes (namespace, ip, alive), link shapes and planted faults as tc reports them (for a
    fault, on its nodes' ctl interfaces: node egress and, for a slow node, the switch-side
    peer), and the address."""
    state = raynodes.read_state(state_dir)
    if state is None:
        return {"up": False, "state_file": str(raynodes.state_path(state_dir))}
    plan = state["plan"]
    address = plan["address"]
    alive_ips = {n["ip"] for n in raynodes.gcs_nodes(address) if n["alive"]}
    namespaces = netns.netns_list()
    nodes = [
        {
            "namespace": n["namespace"],
            "ip": n["ip"],
            "resource": n["resource"],
            "namespace_exists": n["namespace"] in namespaces,
            "alive": n["ip"] in alive_ips,
        }
        for n in plan["nodes"]
    ]
    link_names = [x["name"] for x in plan["links"]]
    links = []
    faults = planted_faults(state)
    by_index = {n["index"]: n for n in plan["nodes"]}
    for fault in faults:  # what tc reports on each faulty node's ctl interface, both ends
        fault["qdiscs"] = {}
        for i in fault["node_indices"]:
            node = by_index[i]
            ns, sw, ctl = node["namespace"], plan["switch_namespace"], node["ports"][0]
            if ns in namespaces:  # keys as the plan's step names: <namespace>/<device>
                fault["qdiscs"][f"{ns}/{ctl['ifname']}"] = netns.qdisc_show(ns, ctl["ifname"])
            if fault["kind"] == "node" and sw in namespaces:
                fault["qdiscs"][f"{sw}/{ctl['peer']}"] = netns.qdisc_show(sw, ctl["peer"])
    for link in plan["links"]:
        ifname = IFACE_PREFIX + link["name"]
        qdiscs = {
            n["namespace"]: netns.qdisc_show(n["namespace"], ifname)
            for n in plan["nodes"]
            if n["namespace"] in namespaces
        }
        links.append(
            {
                "name": link["name"],
                "ifname": ifname,
                "rate": link["rate"],
                "delay": link["delay"],
                "subnet": str(link_subnet(link_names.index(link["name"]))),
                "qdiscs": qdiscs,
            }
        )
    return {
        "up": state["address"] is not None and all(n["alive"] for n in nodes),
        "address": address,
        "head_ip": plan["head_ip"],
        "head_alive": plan["head_ip"] in alive_ips,
        "dashboard": f"http://{plan['head_ip']}:{DASHBOARD_PORT}",
        "nodes": nodes,
        "links": links,
        "faults": faults,
        "pids": state["pids"],
        "state_file": str(raynodes.state_path(state_dir)),
    }
