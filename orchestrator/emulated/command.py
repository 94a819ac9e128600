"""`linksweep cluster up|down|status|check --emulated` and `python -m orchestrator.emulated`.

Validates the arguments (bad input is reported before anything else, root or not), calls
`lifecycle` or `check`, prints the status table, and maps the outcome to the exit codes of
`orchestrator.errors`. Messages go to stderr unprefixed, as they always have (not through
`errors.err`, which would prefix them with `linksweep: `).

May import: the standard library, the other modules of this package and
`orchestrator.errors`. Never `ray`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.emulated.check import measure_link_busbw
from orchestrator.emulated.lifecycle import down, status, stderr_log, up
from orchestrator.emulated.netns import netns_available
from orchestrator.emulated.raynodes import RayNodeOptions
from orchestrator.emulated.shapes import (
    DEFAULT_LINKS,
    DEFAULT_STATE_DIR,
    EmulatedError,
    LinkShape,
    parse_link_arg,
    plan_emulated,
)
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK


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


def cluster_command(
    action: str,
    nodes: int,
    links: list[str],
    state_dir: str,
    cpus_per_node: int,
    gpus_per_node: int,
) -> int:
    """`linksweep cluster up|down|status|check --emulated`. Exit codes: 0 ok, 1 failed,
    2 bad input (bad link, not root). `up` ends with the single line RAY_ADDRESS=<addr>.
    `links` empty means DEFAULT_LINKS."""
    state_dir = state_dir or DEFAULT_STATE_DIR
    if action not in ("up", "down", "status", "check"):
        stderr_log(f"unknown action {action!r}; use up, down, status or check")
        return EXIT_BAD_INPUT
    shapes: list[LinkShape] = []
    if action == "up":  # bad input is reported before anything else, root or not
        try:
            shapes = [parse_link_arg(s) for s in (links or DEFAULT_LINKS)]
            plan_emulated(nodes, shapes)
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


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m orchestrator.emulated up --nodes 2 --link fast --link slow=500mbit`;
    the same as `linksweep cluster ... --emulated`, for use without the linksweep CLI."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m orchestrator.emulated")
    p.add_argument("action", choices=["up", "down", "status", "check"])
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--link", action="append", default=[], metavar="NAME=RATE[,DELAY]")
    p.add_argument("--state-dir", default=DEFAULT_STATE_DIR)
    p.add_argument("--cpus-per-node", type=int, default=1)
    p.add_argument("--gpus-per-node", type=int, default=0)
    a = p.parse_args(argv)
    return cluster_command(a.action, a.nodes, a.link, a.state_dir, a.cpus_per_node, a.gpus_per_node)
