"""The link check: a gloo all_reduce between two emulated nodes through one link.

`measure_link_busbw` places one `workloads.linkcheck.GlooRank` actor on each of two
emulated nodes (pinned by their `emulated_node_<i>` resources) with
`GLOO_SOCKET_IFNAME=ls-<link>`, times an all_reduce and reports its bus bandwidth
(`comm_model.busbw_gbps`, nccl-tests convention), so `cluster check` can compare each link
with its tc rate.

May import: shapes, orchestrator.analysis.comm_model, orchestrator.raycluster.nodes,
orchestrator.raycluster.session, workloads.linkcheck.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.analysis import comm_model
from orchestrator.emulated.shapes import IFACE_PREFIX, EmulatedError


def measure_link_busbw(
    address: str,
    link: str,
    *,
    nodes: Sequence[int] = (0, 1),
    msg_bytes: int = 16 * 2**20,
    warmup: int = 1,
    iters: int = 3,
    rendezvous_port: int = 29511,
    timeout_s: float = 180.0,
) -> dict[str, Any]:
    """Time a gloo all_reduce between emulated nodes through `ls-<link>`.

    One Ray actor per node, pinned by its `emulated_node_<i>` resource, started with
    `GLOO_SOCKET_IFNAME=ls-<link>` (a fresh process per link: the env is read at
    process-group creation). Rendezvous goes over ctl; gloo's data then flows through
    the link. Each iteration: barrier, all_reduce, max over ranks; the median is
    reported. Also reports bytes each rank sent through the link (its tx counter), so
    the path is verified, not assumed. Joins the cluster at `address` with
    `raycluster.session.connect` unless this process is already connected to Ray: run
    it in a process that may hold a Ray connection.
    """
    from orchestrator.raycluster.nodes import alive_nodes, run_pinned_actors
    from orchestrator.raycluster.session import connect
    from workloads.linkcheck import GlooRank

    connect(address)
    ifname = IFACE_PREFIX + link
    world = len(nodes)
    alive = alive_nodes()
    node_ips = []
    for i in nodes:
        match = [n["ip"] for n in alive if f"emulated_node_{i}" in n["resources"]]
        if not match:
            raise EmulatedError(f"no alive Ray node with resource emulated_node_{i}")
        node_ips.append(match[0])

    init_method = f"tcp://{node_ips[0]}:{rendezvous_port}"
    numel = msg_bytes // 4
    try:
        results = run_pinned_actors(
            GlooRank,
            pins=[{f"emulated_node_{i}": 0.01} for i in nodes],
            env={"GLOO_SOCKET_IFNAME": ifname},
            args=[
                (rank, world, init_method, ifname, numel, warmup, iters) for rank in range(world)
            ],
            timeout_s=timeout_s,
        )
    except TimeoutError:
        raise EmulatedError(
            f"gloo all_reduce over {ifname} did not finish in {timeout_s} s"
        ) from None
    per_iter = [max(r["times_s"][k] for r in results) for k in range(iters)]
    step_time_s = sorted(per_iter)[len(per_iter) // 2]
    return {
        "link": link,
        "ifname": ifname,
        "world_size": world,
        "msg_bytes": msg_bytes,
        "iters": iters,
        "time_s": per_iter,
        "median_time_s": step_time_s,
        "busbw_gbps": comm_model.busbw_gbps("all_reduce", world, msg_bytes, step_time_s),
        "link_tx_bytes_per_rank": [r["link_tx_bytes"] for r in results],
    }
