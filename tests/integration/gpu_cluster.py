"""Ray on logical GPUs: a ``ray.cluster_utils.Cluster`` whose nodes advertise GPUs that this
CPU-only machine does not have, with ``linksweep run`` against it, all in a process of its own.

The pytest session already holds one Ray connection (the CPU-only ``ray_cluster``), so this
runs as ``python -m tests.integration.gpu_cluster PLAN.json``: for each phase of the plan it
starts a cluster (head first, then the other nodes), runs each sweep of the phase with
``linksweep run SWEEP --address ADDR --db DB`` (the CLI in this process; it joins and leaves
the cluster itself, inside one held connection) and shuts the cluster down. The exit codes,
and the GPUs Ray counts free after each sweep, go to ``PLAN.json.out``.

A node's ``visible`` sets ``CUDA_VISIBLE_DEVICES`` for the processes that node starts (its
raylet, and through it every worker there): Ray then reports those strings as the GPU ids it
assigns (``get_current_process_visible_accelerator_ids`` in
``ray/_private/accelerators/nvidia_gpu.py``, mapped in ``worker.py``
``get_accelerator_ids_for_accelerator_resource``), as on a node whose ids are UUIDs or MIG
instances. Every port the head would take by default is a free one (``rayports.free_port``),
and ``RAY_TMPDIR`` is the plan's own folder, so neither the session cluster nor another
helper's cluster is touched.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from contextlib import contextmanager

from tests.integration.rayports import free_port

PLAN_TIMEOUT_S = 600  # what a test allows a whole plan (~90 s on 2 quiet cores)
SETTLE_S = 15.0  # Ray's view of available resources lags the raylets by a report or two


@contextmanager
def _env(visible: str | None):
    """``CUDA_VISIBLE_DEVICES`` as the node's processes should inherit it, while it starts."""
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


def _node_args(node: dict, head: bool) -> dict:
    args = {"num_cpus": node["num_cpus"], "num_gpus": node["num_gpus"]}
    args["dashboard_agent_listen_port"] = free_port()
    if head:
        args |= {
            "include_dashboard": False,
            "metrics_export_port": free_port(),
            "metrics_agent_port": free_port(),
            "runtime_env_agent_port": free_port(),
            "gcs_server_port": free_port(),
        }
    return args


def gpus_after_sweep(settle_s: float = SETTLE_S) -> dict[str, float]:
    """The cluster's GPUs, total and available, read by this driver (still connected: its
    launchers kept, its job alive) once the sweep has returned. Ray's available view follows
    the raylets' reports: it is read again until it equals the total, or ``settle_s`` passed
    (then the last reading is what the test sees)."""
    import ray

    deadline = time.monotonic() + settle_s
    while True:
        total = ray.cluster_resources().get("GPU", 0.0)
        available = ray.available_resources().get("GPU", 0.0)
        if available == total or time.monotonic() > deadline:
            return {"total": total, "available": available}
        time.sleep(0.1)


def run_phase(phase: dict) -> tuple[list[int | str], dict[str, dict]]:
    """Start the phase's cluster, run its sweeps, shut it down; each sweep's exit code, or the
    traceback of an exception that escaped ``linksweep run`` (a crash, not a failed run), and
    the GPUs after each sweep (:func:`gpus_after_sweep`), by sweep file. The sweeps of a phase
    run in one Ray job (``session.held``), as a Python caller's would: a later sweep finds the
    launchers an earlier one kept."""
    from ray.cluster_utils import Cluster

    from orchestrator.cli import main
    from orchestrator.raycluster import session

    head, *others = phase["nodes"]
    with _env(head.get("visible")):
        cluster = Cluster(initialize_head=True, head_node_args=_node_args(head, head=True))
    try:
        for node in others:
            with _env(node.get("visible")):
                cluster.add_node(**_node_args(node, head=False))
        cluster.wait_for_nodes()
        codes, gpus = [], {}
        with session.held(cluster.address):
            for sweep in phase["sweeps"]:
                t0 = time.monotonic()
                args = ["run", sweep["file"], "--address", cluster.address, "--db", sweep["db"]]
                try:
                    codes.append(main(args))
                except Exception:  # noqa: BLE001 - a crash is what the tests look for
                    codes.append(traceback.format_exc())
                gpus[sweep["file"]] = gpus_after_sweep()
                print(f"{phase['name']}: {sweep['file']} -> {codes[-1]} in "
                      f"{time.monotonic() - t0:.1f} s", file=sys.stderr)  # fmt: skip
        return codes, gpus
    finally:
        cluster.shutdown()


def main(plan_path: str) -> int:
    with open(plan_path) as f:
        plan = json.load(f)
    out: dict = {"gpus": {}}
    for phase in plan["phases"]:
        out[phase["name"]], gpus = run_phase(phase)
        out["gpus"].update(gpus)
    with open(plan_path + ".out", "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
