"""``linksweep doctor``: everything on the cluster that could make link variants measure
something other than the link (``discovery.doctor_findings``), node by node; exit 1 if a finding
invalidates a link comparison. On a CPU-only cluster it says so and exits 0.

May import: shared, text, orchestrator.cli_help, orchestrator.topology.discovery, orchestrator.errors.
"""

from __future__ import annotations

import argparse

from orchestrator.cli_help import ADDRESS_HELP
from orchestrator.commands.shared import join_cluster
from orchestrator.commands.text import p2p_table, print_node
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from orchestrator.topology.discovery import Finding, discover_nodes, doctor_findings


def add_parser(sub) -> None:
    d = sub.add_parser(
        "doctor",
        help="preflight: what would invalidate a link comparison",
        description="Per node: GPUs and topology, P2P access, PCIe links below their max, power "
        "limits, temperatures, NCCL/CUDA/driver versions. On a CPU-only machine it says so.",
        epilog="exit codes: 0 nothing found (or no GPUs); 1 something would invalidate a link "
        "comparison; 2 bad input",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d.add_argument("--address", default=None, help=ADDRESS_HELP)
    d.set_defaults(func=main)


def _print_findings(findings: list[Finding]) -> None:
    for f in findings:
        mark = "INVALIDATES" if f.invalidates else "note"
        print(f"  [{mark}] {f.code}: {f.message}")


def main(args: argparse.Namespace) -> int:
    """Can this cluster's link variants be trusted? Exit 1 if not, 2 if it cannot be joined."""
    if not join_cluster(args.address):
        return EXIT_BAD_INPUT
    reports = discover_nodes()
    findings = doctor_findings(reports)

    for r in reports:
        if print_node(r):
            if r.p2p is not None:
                print("P2P access (torch.cuda.can_device_access_peer, row -> column):")
                print(p2p_table(r.p2p))
            elif r.inventory or r.cuda_device_count:
                print(f"P2P access: unknown ({r.cuda_status})")
            print(
                "versions: "
                f"driver {r.driver_version or '-'}, CUDA (driver) {r.cuda_version or '-'}, "
                f"NCCL {r.nccl_version or '-'}, torch {r.torch_version or '-'}"
                f" (CUDA build {r.torch_cuda or '-'})"
            )
        mine = [f for f in findings if f.node_id == r.node_id and f.node != "*"]
        if mine:
            print("findings:")
            _print_findings(mine)
        print()

    cluster = [f for f in findings if f.node == "*"]
    for f in cluster:
        if f.code == "cpu_only":
            print(f.message)
    rest = [f for f in cluster if f.code != "cpu_only"]
    if rest:
        print("cluster:")
        _print_findings(rest)

    bad = [f for f in findings if f.invalidates]
    if bad:
        print(
            f"doctor: {len(bad)} problem(s) would invalidate link comparisons "
            "(marked INVALIDATES above); fix them or read results with that in mind"
        )
        return EXIT_FAILED
    notes = sum(f.code != "cpu_only" for f in findings)
    print(f"doctor: nothing invalidates link comparisons ({notes} note(s))")
    return EXIT_OK
