"""``linksweep transports --parse LOG``: the NCCL version and the transport of every channel
an ``NCCL_DEBUG=INFO`` log shows. ``--json`` prints exactly the stored form
(``nccl_log.to_json_dict``).

May import: shared, text, orchestrator.errors, orchestrator.nccl_log.
"""

from __future__ import annotations

import argparse
import json

from orchestrator import nccl_log
from orchestrator.commands.shared import read_text
from orchestrator.commands.text import grid
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_OK, err


def add_parser(sub) -> None:
    tr = sub.add_parser("transports", help="parse an NCCL_DEBUG=INFO log: version, transports")
    tr.add_argument(
        "--parse", metavar="LOGFILE", required=True, help="an NCCL_DEBUG=INFO log (required)"
    )
    tr.add_argument("--json", action="store_true", help="print JSON (default: a table)")
    tr.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Exit 0 with the transports printed; 2 when the file cannot be read or holds no NCCL
    log lines."""
    parse_file, as_json = args.parse, args.json
    text = read_text(parse_file, "transports --parse")
    if text is None:
        return EXIT_BAD_INPUT
    log = nccl_log.parse_nccl_log(text)
    if log.nccl_version is None and not log.channels and not log.env_echo:
        err(
            f"transports --parse {parse_file}: no NCCL log lines found (no 'NCCL version', "
            "'Channel NN : a -> b via ...' or 'set by environment' line); was the run started "
            "with NCCL_DEBUG=INFO?"
        )
        return EXIT_BAD_INPUT
    if as_json:
        print(json.dumps(nccl_log.to_json_dict(log)))
        return EXIT_OK
    families = nccl_log.transport_families(log)
    print(f"NCCL version: {log.nccl_version or 'not in log'}")
    for name, value in log.env_echo.items():
        print(f"env: {name}={value}")
    if not log.channels:
        print(
            "no channel connection lines (NCCL prints them at communicator init with "
            "NCCL_DEBUG=INFO; this excerpt has none)"
        )
        return EXIT_OK
    print(
        f"transports: {', '.join(families)} (run label "
        f"{nccl_log.effective_transport(families)}), {len(log.channels)} channel line(s)"
    )
    rows = [[c.rank, c.peer, c.channel, c.direction, c.transport, c.detail] for c in log.channels]
    print(grid(["rank", "peer", "channel", "direction", "transport", "detail"], rows))
    return EXIT_OK
