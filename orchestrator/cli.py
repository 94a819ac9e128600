"""``linksweep`` command line: builds the parser from the commands (``orchestrator/commands/``,
one module per command, each defining its own arguments) and dispatches to the one named.

Exit codes: 0 success; 1 a run failed (all runs still stored) or a check found a problem;
2 bad input (nothing run, nothing written); 130/143/129 stopped by SIGINT/SIGTERM/SIGHUP
(the sweep is marked ``interrupted``; ``--resume`` continues it).

May import: cli_help, commands, errors, orchestrator.
"""

from __future__ import annotations

import argparse
import sys

from orchestrator.cli_help import WORKFLOW
from orchestrator.commands import (
    baseline,
    cluster,
    compare,
    doctor,
    export,
    fleet,
    importing,
    linkbench,
    project,
    query,
    report,
    run,
    selftest,
    topo,
    transports,
)
from orchestrator.errors import EXIT_OK

COMMANDS = (
    run,
    linkbench,
    query,
    report,
    project,
    compare,
    baseline,
    importing,
    export,
    topo,
    transports,
    doctor,
    selftest,
    fleet,
    cluster,
)
"""In the order ``linksweep --help`` lists them."""


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("linksweep")
    except Exception:  # noqa: BLE001 - not installed: the source tree's own number
        from orchestrator import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="linksweep",
        description="Measure how the GPU interconnect shapes gpt2 training (DDP, ZeRO) on Ray; "
        "every step of every run goes into DuckDB.",
        epilog=WORKFLOW,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"linksweep {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # `linksweep query ... | head`
        sys.stderr.close()
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
