"""``linksweep cluster up|down|status|check --emulated`` (and ``python -m orchestrator.emulated``,
which takes the same arguments, defined once here).

Validates the arguments (bad input is reported before anything else, root or not), calls
``emulated.lifecycle`` or ``emulated.check``, prints the status table, and maps the outcome to
the exit codes of ``orchestrator.errors``. Messages go to stderr unprefixed, as they always have
(not through ``errors.err``, which would prefix them with ``linksweep: ``).

May import: orchestrator.emulated, orchestrator.errors.
"""

from __future__ import annotations

import argparse
from typing import Any

from orchestrator.emulated.blueprint import plan_emulated
from orchestrator.emulated.check import measure_link_busbw
from orchestrator.emulated.faults import Fault, parse_slow_node_arg, parse_slow_pair_arg
from orchestrator.emulated.lifecycle import down, status, stderr_log, up
from orchestrator.emulated.netns import netns_available
from orchestrator.emulated.raynodes import RayNodeOptions
from orchestrator.emulated.shapes import (
    DEFAULT_LINKS,
    DEFAULT_STATE_DIR,
    EmulatedError,
    LinkShape,
    parse_link_arg,
)
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, err

ACTIONS = ("up", "down", "status", "check")


def add_parser(sub) -> None:
    c = sub.add_parser(
        "cluster",
        help="manage the emulated multi-node cluster: up, down, status, check",
        description="up: build an emulated cluster (network namespaces, tc-shaped links, Ray "
        "nodes; needs root) and print RAY_ADDRESS; down: remove everything up made; status: "
        "nodes and link shapes; check: one gloo all_reduce through each link against its rate.",
        epilog="exit codes: 0 ok; 1 failed (status: not up); 2 bad input (bad link or fault, "
        "not root)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(c)
    c.set_defaults(func=main)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``cluster``, for ``linksweep cluster`` and ``python -m
    orchestrator.emulated`` alike."""
    p.add_argument("action", choices=ACTIONS, help="what to do")
    p.add_argument(
        "--emulated",
        action="store_true",
        help="required: the cluster is network namespaces + tc on this machine (real fleets: "
        "clusters/README.md)",
    )
    p.add_argument("--nodes", type=int, default=2, help="emulated nodes, for up (default: 2)")
    p.add_argument(
        "--link",
        action="append",
        default=[],
        metavar="NAME=RATE[,DELAY]",
        help="a link, for up; repeatable; RATE a tc bit rate, DELAY one-way, e.g. slow=500mbit "
        "or slow=500mbit,1ms (default: fast, unshaped, and slow=500mbit)",
    )
    p.add_argument(
        "--slow-node",
        action="append",
        default=[],
        metavar="I=RATE[,DELAY]",
        help="plant a slow node, for up; repeatable: every interface of node I (ctl included) "
        "shaped to RATE in both directions, e.g. 2=100mbit (default: none)",
    )
    p.add_argument(
        "--slow-pair",
        action="append",
        default=[],
        metavar="A-B=RATE[,DELAY]",
        help="plant a slow pair, for up; repeatable: only traffic between nodes A and B shaped, "
        "on every link (ctl included), e.g. 0-1=50mbit (default: none)",
    )
    p.add_argument(
        "--state-dir",
        default=DEFAULT_STATE_DIR,
        help=f"where up records the cluster (default: {DEFAULT_STATE_DIR})",
    )
    p.add_argument(
        "--cpus-per-node", type=int, default=1, help="Ray CPUs per node, for up (default: 1)"
    )
    p.add_argument(
        "--gpus-per-node", type=int, default=0, help="Ray GPUs per node, for up (default: 0)"
    )


def main(args: argparse.Namespace) -> int:
    if not args.emulated:
        err(
            "cluster: only --emulated clusters are managed by linksweep; for real fleets see "
            "clusters/README.md (ray up, KubeRay)"
        )
        return EXIT_BAD_INPUT
    return cluster(
        args.action,
        args.nodes,
        args.link,
        args.state_dir,
        args.cpus_per_node,
        args.gpus_per_node,
        slow_nodes=args.slow_node,
        slow_pairs=args.slow_pair,
    )


def _print_status(st: dict[str, Any]) -> None:
    print(f"address    {st['address']}  (head {'alive' if st['head_alive'] else 'DOWN'})")
    print(f"dashboard  {st['dashboard']}")
    for n in st["nodes"]:
        state = "alive" if n["alive"] else ("no namespace" if not n["namespace_exists"] else "DOWN")
        print(f"node       {n['namespace']:8} {n['ip']:15} {n['resource']:18} {state}")
    for link in st["links"]:
        shape = " ".join(x for x in (link["rate"], link["delay"]) if x) or "unshaped"
        qdisc = next(iter(link["qdiscs"].values()), "").splitlines()
        print(f"link       {link['ifname']:10} {link['subnet']:16} {shape:12} {' | '.join(qdisc)}")
    for f in st.get("faults") or []:
        where = "every link, both directions" if f["kind"] == "node" else "every link, between them"
        print(f"fault      {f['describe']} ({', '.join(f['nodes'])}): {where}")
        for dev, qdisc in f.get("qdiscs", {}).items():
            print(f"           {dev:18} {' | '.join(qdisc.splitlines())}")


def _check(st: dict[str, Any]) -> int:
    """One gloo all_reduce per user link between nodes 0 and 1, printed against its rate."""
    if not st.get("up"):
        stderr_log("no emulated cluster is up; run `linksweep cluster up --emulated` first")
        return EXIT_FAILED
    if len(st["nodes"]) < 2:
        stderr_log("check needs at least 2 nodes")
        return EXIT_BAD_INPUT
    for link in st["links"][1:]:
        r = measure_link_busbw(st["address"], link["name"])
        shape = link["rate"] or "unshaped"
        expect = ""
        if link["rate"]:
            rate_gbps = LinkShape(link["name"], link["rate"]).rate_bits_per_s / 8 / 1e9
            expect = f" (tc rate {rate_gbps:.4f} GB/s: {r['busbw_gbps'] / rate_gbps:.0%})"
        print(f"{link['ifname']:10} {shape:10} busbw {r['busbw_gbps']:.4f} GB/s{expect}")
    return EXIT_OK


def cluster(
    action: str,
    nodes: int,
    links: list[str],
    state_dir: str,
    cpus_per_node: int,
    gpus_per_node: int,
    *,
    slow_nodes: list[str] | None = None,
    slow_pairs: list[str] | None = None,
) -> int:
    """`linksweep cluster up|down|status|check --emulated`. Exit codes: 0 ok, 1 failed,
    2 bad input (bad link or fault, not root). `up` ends with the single line
    RAY_ADDRESS=<addr>. `links` empty means DEFAULT_LINKS. `slow_nodes` and `slow_pairs` are
    `--slow-node` and `--slow-pair` arguments (faults planted by `up`)."""
    state_dir = state_dir or DEFAULT_STATE_DIR
    if action not in ("up", "down", "status", "check"):
        stderr_log(f"unknown action {action!r}; use up, down, status or check")
        return EXIT_BAD_INPUT
    shapes: list[LinkShape] = []
    faults: list[Fault] = []
    if action == "up":  # bad input is reported before anything else, root or not
        try:
            shapes = [parse_link_arg(s) for s in (links or DEFAULT_LINKS)]
            faults = [parse_slow_node_arg(s) for s in slow_nodes or []]
            faults += [parse_slow_pair_arg(s) for s in slow_pairs or []]
            plan_emulated(nodes, shapes, faults=faults)
            RayNodeOptions(cpus_per_node, gpus_per_node)
        except ValueError as e:
            stderr_log(str(e))
            return EXIT_BAD_INPUT
    ok, why = netns_available()
    if not ok:
        stderr_log(why)
        return EXIT_BAD_INPUT
    try:
        if action == "up":
            address = up(
                nodes,
                shapes,
                state_dir,
                cpus_per_node=cpus_per_node,
                gpus_per_node=gpus_per_node,
                faults=faults,
            )
            _print_status(status(state_dir))
            print(f"RAY_ADDRESS={address}", flush=True)
            return EXIT_OK
        if action == "down":
            return EXIT_FAILED if down(state_dir) else EXIT_OK
        st = status(state_dir)
        if action == "status":
            if "address" not in st:
                print(f"no emulated cluster (no {st['state_file']})")
                return EXIT_FAILED
            _print_status(st)
            return EXIT_OK if st["up"] else EXIT_FAILED
        return _check(st)
    except EmulatedError as e:
        stderr_log(f"error: {e}")
        return EXIT_FAILED
