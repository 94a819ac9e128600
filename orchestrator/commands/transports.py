"""``linksweep transports --parse LOG``: the NCCL version, the transport of every channel and
whether NVLS / CollNet were set up, as an ``NCCL_DEBUG=INFO`` log shows them. ``--json`` prints exactly the stored form
(``nccl_log.to_json_dict``).

May import: shared, text, orchestrator.errors, orchestrator.topology.nccl_log.
"""

from __future__ import annotations

import argparse
import json

from orchestrator.commands.shared import read_text
from orchestrator.commands.text import grid
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_OK, err
from orchestrator.topology import nccl_log


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
    if log.nccl_version is None and not log.channels and not log.env_echo and not _extras(log):
        err(
            f"transports --parse {parse_file}: no NCCL log lines found (no 'NCCL version', "
            "'Channel NN : a -> b via ...', 'set by environment', NVLS or CollNet line); was "
            "the run started with NCCL_DEBUG=INFO?"
        )
        return EXIT_BAD_INPUT
    if as_json:
        print(json.dumps(nccl_log.to_json_dict(log)))
        return EXIT_OK
    families = nccl_log.transport_families(log)
    print(f"NCCL version: {log.nccl_version or 'not in log'}")
    for name, value in log.env_echo.items():
        print(f"env: {name}={value}")
    print(f"NVLS: {_said(nccl_log.nvls_used(log))}, CollNet: {_said(nccl_log.collnet_used(log))}")
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


def _extras(log: nccl_log.NcclLog) -> bool:
    """Whether the log said anything about NVLS or CollNet."""
    return nccl_log.nvls_used(log) is not None or nccl_log.collnet_used(log) is not None


def _said(used: bool | None) -> str:
    return {True: "set up", False: "not used"}.get(used, "not in log")
