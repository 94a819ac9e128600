"""``linksweep topo``: each node's ``nvidia-smi topo -m`` matrix and NVML inventory, or a saved
matrix parsed (``--parse FILE``). Changes nothing. ``--json`` prints exactly the stored form
(``matrix.to_json_dict``), one line, so scripts can rely on it.

May import: shared, text, orchestrator.cli_help, orchestrator.topology.discovery, orchestrator.errors,
orchestrator.topology.matrix.
"""

from __future__ import annotations

import argparse
import json

from orchestrator.cli_help import ADDRESS_HELP
from orchestrator.commands.shared import join_cluster, read_text
from orchestrator.commands.text import print_node, topo_table
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_OK, err
from orchestrator.topology import matrix
from orchestrator.topology.discovery import discover_nodes, parse_report_topo


def add_parser(sub) -> None:
    t = sub.add_parser("topo", help="print each node's nvidia-smi topo -m matrix and inventory")
    t.add_argument("--address", default=None, help=ADDRESS_HELP)
    t.add_argument(
        "--parse",
        metavar="FILE",
        default=None,
        help="parse a saved `nvidia-smi topo -m` output instead of asking the nodes "
        "(default: ask the nodes)",
    )
    t.add_argument("--json", action="store_true", help="print JSON (default: a table)")
    t.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Exit 0 with the matrix printed; 2 when the file cannot be read or parsed, or the
    cluster cannot be joined."""
    address, parse_file, as_json = args.address, args.parse, args.json
    if parse_file is not None:
        text = read_text(parse_file, "topo --parse")
        if text is None:
            return EXIT_BAD_INPUT
        try:
            parsed = matrix.parse_topo(text)
        except matrix.TopoParseError as exc:
            err(f"topo --parse {parse_file}: not readable as nvidia-smi topo -m output: {exc}")
            return EXIT_BAD_INPUT
        if as_json:
            print(json.dumps(matrix.to_json_dict(parsed)))
        else:
            print(f"{parse_file}: {len(parsed.gpus)} GPU(s), {len(parsed.nics)} NIC(s)")
            print(topo_table(parsed))
            print(f"fingerprint {matrix.topology_fingerprint(parsed)}")
        return EXIT_OK

    if not join_cluster(address):
        return EXIT_BAD_INPUT
    reports = discover_nodes()
    if as_json:
        out = []
        for r in reports:
            t = parse_report_topo(r)
            out.append(
                {
                    "node": r.hostname,
                    "node_id": r.node_id,
                    "ip": r.ip,
                    "topo": None if t is None else matrix.to_json_dict(t),
                    "topo_status": r.topo_status,
                    "nvml": "ok" if r.nvml_ok else f"absent: {r.nvml_status}",
                    "gpus": r.inventory,
                    "error": r.error,
                }
            )
        print(json.dumps(out))
        return EXIT_OK
    for r in reports:
        print_node(r)
        print()
    return EXIT_OK
