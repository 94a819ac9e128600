"""``linksweep fleet``: check every node and link of a Ray cluster; name the slow node or pair.

On every alive Ray node (pinned by node affinity): an intra-node all_reduce among its GPUs (two
CPU ranks where there are none), inter-node all_reduce busbw for node pairs in rounds (no node in
two pairs at once), a compute probe (a fixed short gpt2 run on one rank) and health from NVML.
Suspects are decided by robust statistics (docs/fleet.md); everything lands in ``fleet_*``
tables of ``--db``. Exit 1 when there are suspects (or the check could not finish), 0 when none.

May import: observers, shared, orchestrator.cli_help, orchestrator.errors, orchestrator.fleet.loop,
orchestrator.fleet.pairs, orchestrator.fleet.tables, orchestrator.fleet.summary, orchestrator.raycluster.session,
orchestrator.sweep.spec, orchestrator.sweep.stopping, orchestrator.store, orchestrator.fleet.suspects.
"""

from __future__ import annotations

import argparse
import json
import sys

from orchestrator.cli_help import ADDRESS_HELP, DB_HELP
from orchestrator.commands.observers import add_observer_arguments, observer_problems, observers
from orchestrator.commands.shared import join_cluster
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, err

EPILOG = """\
exit codes: 0 no suspect; 1 suspects named (or the check could not finish); 2 bad input
(nothing run); 130/143/129 stopped (what was measured is stored, marked interrupted)

examples:
  linksweep fleet                                   # the default network of every node
  linksweep fleet --sweep sweeps/emulated.yaml      # each link (env) of the sweep file in turn
  linksweep fleet --pairs ring --max-mb 256         # a large fleet: each node with 2 partners
  linksweep run SWEEP.yaml --exclude-suspects FLEET_ID   # keep a sweep off the suspects
"""


def add_parser(sub) -> None:
    fp = sub.add_parser(
        "fleet",
        help="check every node and link of the cluster; name the slow node or pair",
        description="Intra-node and pairwise inter-node all_reduce busbw, a compute probe and "
        "NVML health on every alive Ray node; suspects by median and MAD (docs/fleet.md); "
        "stored in fleet_checks, fleet_nodes, fleet_pairs, fleet_rounds, fleet_suspects.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    fp.add_argument("--db", default="results.duckdb", help=DB_HELP)
    fp.add_argument("--address", default=None, help=ADDRESS_HELP)
    fp.add_argument(
        "--sweep",
        default=None,
        metavar="SWEEP.yaml",
        help="check each link of this sweep file (its env) in turn; default: the network "
        "each node's Ray IP is on",
    )
    fp.add_argument(
        "--max-mb",
        type=float,
        default=None,
        metavar="N",
        help="all_reduce size in MiB for every busbw, rounded down to a power of two (default: "
        "64 on GPU nodes, 4 on CPU nodes)",
    )
    fp.add_argument(
        "--pairs",
        default="all",
        help="which node pairs: all (a round-robin tournament, N-1 rounds for even N), ring "
        "(each node with its 2 neighbours) or sample:K (K random rounds) (default: all)",
    )
    fp.add_argument(
        "--threshold",
        type=float,
        default=None,
        metavar="REL",
        help="a value is low when below the fleet median by more than REL (and by more than "
        "3 scaled MADs) (default: 0.15 when every node has a GPU, 0.5 when one has none: gloo over "
        "sockets on CPUs scatters by tens of percent)",
    )
    fp.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="stdout: text (tables, heatmap, suspects) or json (every stored row) (default: text)",
    )
    fp.add_argument("--seed", type=int, default=0, help="seed of sample:K (default: 0)")
    add_observer_arguments(fp, "fleet")
    fp.set_defaults(func=main)


def _options(args: argparse.Namespace):
    """The check's options from the flags, or None after saying which flag is wrong."""
    from orchestrator.fleet.loop import FleetOptions
    from orchestrator.fleet.pairs import parse_pairs
    from orchestrator.fleet.suspects import Rule
    from orchestrator.fleet.tables import DEFAULT_LINK
    from orchestrator.sweep.spec import SpecError, load_spec

    try:
        pairs = parse_pairs(args.pairs)
    except ValueError as exc:
        err(str(exc))
        return None
    try:
        rule = None if args.threshold is None else Rule(rel=args.threshold)
    except ValueError as exc:
        err(f"--threshold {args.threshold}: {exc} (a fraction, e.g. 0.15 for 15%)")
        return None
    if args.max_mb is not None and not args.max_mb > 0:
        err(f"--max-mb {args.max_mb}: must be a positive number of MB (e.g. 4, 64, 256)")
        return None
    links = {DEFAULT_LINK: {}}
    if args.sweep is not None:
        try:
            links = dict(load_spec(args.sweep).links)
        except SpecError as exc:
            err(str(exc))
            return None
    return FleetOptions(
        links=links,
        pairs=pairs,
        max_mb=args.max_mb,
        rule=rule,
        sweep_file=args.sweep,
        seed=args.seed,
    )


def _print_result(db: str, fleet_id: str, fmt: str) -> int | None:
    """Print the stored check; its number of suspects (None when it has no verdict)."""
    from orchestrator.fleet.summary import summary_text
    from orchestrator.store.snapshot import load_fleet

    rows = load_fleet(db, fleet_id)
    if fmt == "json":
        print(json.dumps(rows, indent=2, default=str))
    else:
        print(summary_text(**rows))
    return rows["check"]["n_suspects"]


def main(args: argparse.Namespace) -> int:
    from orchestrator.fleet.loop import FleetError, run_fleet
    from orchestrator.raycluster import session
    from orchestrator.store import StoreError, check_writable
    from orchestrator.store.live import LiveStore
    from orchestrator.sweep import stopping

    problems = observer_problems(args)
    for problem in problems:
        err(problem)
    opts = _options(args)
    if opts is None or problems:
        return EXIT_BAD_INPUT
    try:
        check_writable(args.db)
        store = LiveStore(args.db)
        store.recover()
    except StoreError as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    label = join_cluster(args.address)
    if label is None:
        return EXIT_BAD_INPUT
    restore_signals = stopping.install()

    def say(msg: str) -> None:
        print(f"linksweep: {msg}", file=sys.stderr, flush=True)

    fleet_id = None
    watching = observers(args, address=label, db=args.db, command="fleet")

    def tell(callback: str, *progress) -> None:
        """The loop's progress to each observer that has ``callback`` (``loop.Tell``)."""
        for observer in watching:
            if hasattr(observer, callback):
                getattr(observer, callback)(*progress)

    try:
        fleet_id = run_fleet(store, opts, label, say, tell)
    except FleetError as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:  # stopping.SweepStopped
        err(f"{stopping.describe(exc)}; what was measured is stored (fleet_checks: interrupted)")
        return stopping.exit_code(exc)
    except Exception as exc:  # noqa: BLE001 - stored as a failed check by run_fleet
        err(f"the fleet check failed: {type(exc).__name__}: {exc}")
        return EXIT_FAILED
    finally:
        session.disconnect()
        restore_signals()
    n_suspects = _print_result(args.db, fleet_id, args.format)
    print(f"results: {args.db} (fleet {fleet_id})", file=sys.stderr)
    return EXIT_FAILED if n_suspects else EXIT_OK
