"""``linksweep import nccl-tests FILE --link NAME [--sweep ID] [--db PATH] [--op OP]
[--world-size N]``: another tool's link figures into ``link_bench``, beside linksweep's own.

The file (nccl-tests' printed output, or its ``-J`` JSON) is parsed first
(``orchestrator/compare/nccltests.py``); a file it cannot read, a bad argument, an unknown ``--sweep`` or
a link whose op was already imported into that sweep exits 2 naming the problem, with nothing
written. Then one transaction (``Store.import_link_bench``) stores the rows with
``source='nccl-tests'`` and, without ``--sweep``, a new sweeps row named ``import:<file name>``
(status ok, no runs; ``started_at`` NULL so "the newest sweep" still means the newest one that
ran) whose spec JSON says what was imported; with ``--sweep ID`` the rows join that sweep and
its spec's ``imports`` list gains the same record.

May import: shared, orchestrator.cli_help, orchestrator.errors, orchestrator.compare.nccltests,
orchestrator.compare.nccltests_json, orchestrator.sweep.planner, orchestrator.store.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os

from orchestrator.cli_help import DB_HELP, IMPORT_EPILOG
from orchestrator.commands.shared import read_text
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_OK, err


def add_parser(sub) -> None:
    ip = sub.add_parser(
        "import",
        help="import another tool's link figures (nccl-tests) into link_bench",
        description="Import another tool's link measurements beside linksweep's own "
        "microbenchmark (link_bench, source = the tool; view link_bandwidth).",
        epilog=IMPORT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    isub = ip.add_subparsers(
        dest="tool", required=True, metavar="TOOL", help="whose output: nccl-tests"
    )
    nt = isub.add_parser(
        "nccl-tests",
        help="nccl-tests output (*_perf text, or its -J JSON)",
        description="Read an nccl-tests run (all_reduce_perf, all_gather_perf, "
        "reduce_scatter_perf, alltoall_perf, broadcast_perf, reduce_perf: printed output or "
        "-J JSON) into link_bench with source 'nccl-tests': one row per size and placement "
        "(out-of-place, in-place), nccl-tests' own printed time, algbw and busbw.",
        epilog=IMPORT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    nt.add_argument("file", metavar="FILE", help="nccl-tests output: text as printed, or -J JSON")
    nt.add_argument("--link", required=True, help="the link the figures belong to (required)")
    nt.add_argument(
        "--sweep",
        default=None,
        help="attach to this sweep (default: a new sweep named import:<file name>)",
    )
    nt.add_argument("--db", default="results.duckdb", help=DB_HELP)
    nt.add_argument(
        "--op",
        default=None,
        help="the collective, only where the file leaves several possible (no X_perf line, "
        "and its redop/root columns and bus factor fit more than one, e.g. all_gather and "
        "alltoall): all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce "
        "(default: what the file says or allows; one it rules out is refused)",
    )
    nt.add_argument(
        "--world-size",
        type=int,
        default=None,
        help="ranks, when the file has no '#  Rank N ...' banners (default: the banners, else "
        "busbw/algbw where it decides; always checked against busbw/algbw)",
    )
    nt.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from orchestrator.compare.nccltests import NcclTestsError, import_record, link_bench_rows
    from orchestrator.compare.nccltests_json import parse

    if args.world_size is not None and args.world_size < 1:
        err(f"--world-size {args.world_size}: must be a positive number of ranks")
        return EXIT_BAD_INPUT
    link = args.link.strip()
    if not link:
        err("--link: give the link's name (e.g. the sweep file's link it measured)")
        return EXIT_BAD_INPUT
    text = read_text(args.file, "nccl-tests output")
    if text is None:
        return EXIT_BAD_INPUT
    try:
        run = parse(text, op=args.op, world_size=args.world_size)
    except NcclTestsError as exc:
        err(f"{args.file}: {exc}; nothing imported")
        return EXIT_BAD_INPUT
    name = os.path.basename(args.file)
    record = import_record(run, name, hashlib.sha256(text.encode()).hexdigest(), link)
    record["imported_at"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    sweep_id = args.sweep or _new_sweep_id()
    rows = link_bench_rows(run, sweep_id, link)
    if not rows:
        err(f"{args.file}: every row has size 0 (nothing measured); nothing imported")
        return EXIT_BAD_INPUT
    stored = _store(args.db, args.sweep, sweep_id, link, rows, record, name)
    if stored != EXIT_OK:
        return stored
    where = f"sweep {sweep_id}" + ("" if args.sweep else f" (new, named import:{name})")
    avg = f"; # Avg bus bandwidth {run.avg_busbw_gbps:g} GB/s" if run.avg_busbw_gbps else ""
    print(
        f"imported {len(rows)} rows of {name} ({', '.join(run.ops)}, world size "
        f"{run.world_size or 'unknown'}, {run.layout} layout) as link {link} into {where} of "
        f"{args.db}{avg}"
    )
    print(
        'read them: linksweep query "SELECT collective, msg_bytes, in_place, busbw_gbps FROM '
        f"link_bandwidth WHERE sweep_id = '{sweep_id}' AND source = 'nccl-tests'\""
    )
    return EXIT_OK


def _new_sweep_id() -> str:
    from orchestrator.sweep.planner import new_sweep_id

    return new_sweep_id()


def _store(db, sweep, sweep_id, link, rows, record, name) -> int:
    """Check the database, then write in one transaction; exit 2 with nothing written when the
    sweep is unknown or this link's op was already imported into it."""
    from orchestrator.store import Q, Store, StoreError, check_writable

    try:
        check_writable(db)
        if sweep is not None and not os.path.exists(db):
            err(f"--sweep {sweep}: --db {db} does not exist; import without --sweep first")
            return EXIT_BAD_INPUT
        with Store(db) as store:
            if sweep is not None and not store.rows(Q.SWEEP, sweep_id=sweep):
                known = ", ".join(r["sweep_id"] for r in store.rows(Q.LATEST_SWEEPS, limit=5))
                err(f"--sweep {sweep}: no such sweep in {db}; latest: {known or 'none'}")
                return EXIT_BAD_INPUT
            again = set(record["ops"]) & {
                r["op"] for r in store.rows(Q.IMPORTED_OPS, sweep_id=sweep_id, link=link)
            }
            if again:
                err(
                    f"sweep {sweep_id} already holds nccl-tests {', '.join(sorted(again))} for "
                    f"link {link}; import into another sweep (leave out --sweep)"
                )
                return EXIT_BAD_INPUT
            new_sweep = None
            if sweep is None:
                new_sweep = {
                    "sweep_id": sweep_id,
                    "name": f"import:{name}",
                    "spec": json.dumps({"name": f"import:{name}", "imports": [record]}),
                    "started_at": None,
                    "finished_at": dt.datetime.now(dt.timezone.utc),
                    "status": "ok",
                    "n_runs_planned": 0,
                    "versions": json.dumps(
                        {"nccl": record["nccl_version"], "nccl-tests": record["nccl_tests_version"]}
                    ),
                }
            store.import_link_bench(rows, new_sweep, record)
    except StoreError as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    return EXIT_OK
