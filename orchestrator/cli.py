"""``linksweep`` command line. Thin: parse arguments, call the modules that do the work.

Exit codes: 0 success; 1 a run failed (all runs still stored) or a check found a problem;
2 bad input (nothing run, nothing written); 130/143/129 stopped by SIGINT/SIGTERM/SIGHUP
(the sweep is marked ``interrupted``; ``--resume`` continues it).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys

from orchestrator.cli_help import (
    ADDRESS_HELP,
    DB_HELP,
    EXIT_CODES,
    QUERY_EPILOG,
    SQL_HELP,
    WORKFLOW,
)
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, err


def cmd_run(args: argparse.Namespace) -> int:
    return _run(args, train=True)


def cmd_linkbench(args: argparse.Namespace) -> int:
    return _run(args, train=False)


def _run(args: argparse.Namespace, train: bool) -> int:
    from orchestrator.spec import SpecError, load_spec
    from orchestrator.store import StoreError, check_writable

    try:
        spec = load_spec(args.sweep)
        if train and any(s != "ddp" for s in spec.grid.strategy):
            from orchestrator.ds_check import check_deepspeed

            if problems := check_deepspeed(spec):  # DeepSpeed's own models, before any work
                raise SpecError(problems, args.sweep)
        check_writable(args.db)
    except (SpecError, StoreError) as exc:
        err(str(exc))
        return EXIT_BAD_INPUT

    from orchestrator import stopping
    from orchestrator.raycluster import session
    from orchestrator.raycluster.reach import ClusterUnreachable
    from orchestrator.store.live import LiveStore

    store = LiveStore(args.db)
    try:
        store.recover()  # what an earlier driver left spooled; its sweep marked interrupted
    except StoreError as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    resume = None
    if train and (getattr(args, "resume", None) or getattr(args, "retry_failed", False)):
        from orchestrator.longsweep import resume_plan
        from orchestrator.resume import ResumeError

        sweep_arg = args.resume if isinstance(args.resume, str) else None
        try:
            resume = resume_plan(store, spec, sweep_arg, args.retry_failed)
        except (ResumeError, StoreError) as exc:
            err(str(exc))
            return EXIT_BAD_INPUT
        print(f"resuming sweep {resume[0]}: {len(resume[1])} run(s) left", file=sys.stderr)

    try:
        address = session.connect(args.address)
    except ClusterUnreachable as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    restore_signals = stopping.install()  # after ray.init, which sets its own SIGTERM handler
    try:
        return _run_connected(args, spec, store, address, train, resume)
    except KeyboardInterrupt as exc:  # stopping.SweepStopped: SIGINT, SIGTERM, SIGHUP
        err(
            f"{stopping.describe(exc)}; finished runs are stored (resume: linksweep run "
            f"{args.sweep} --resume --db {args.db})"
        )
        return stopping.exit_code(exc)
    finally:
        session.disconnect()
        restore_signals()


def _run_connected(args, spec, store, address: str, train: bool, resume) -> int:
    from orchestrator import preflight
    from orchestrator.spec import SpecError
    from orchestrator.store import Q
    from orchestrator.store.db import StoreLocked
    from orchestrator.sweep import execute_sweep
    from orchestrator.ui import SweepUI

    if address == "embedded":
        print(
            "Ray: embedded single-node cluster on this machine (no --address, no RAY_ADDRESS); "
            "every link variant shares this machine's loopback",
            file=sys.stderr,
        )
    try:
        preflight.preflight(spec)
        bundle = preflight.check_cluster(spec)
    except SpecError as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    ui = SweepUI()
    try:
        sweep_id = execute_sweep(spec, store, address, bundle, ui, train=train, resume=resume)
    except StoreLocked as exc:  # busy from the start (runs that finished are spooled)
        err(str(exc))
        return EXIT_BAD_INPUT
    try:
        if train:
            _print_summary(store, sweep_id)
        else:
            _print_table(store, Q.BANDWIDTH_TABLE, sweep_id, f"link_bandwidth (sweep {sweep_id})")
        failed = store.rows(Q.FAILED_RUN_COUNT, sweep_id=sweep_id)[0]["n"]
    except StoreLocked:
        err(f"{args.db} is busy: no summary; every run is stored or spooled (linksweep query)")
        failed = ui.failed
    print(f"results: {args.db} (sweep {sweep_id})", file=sys.stderr)
    return EXIT_FAILED if failed else EXIT_OK


def _print_table(store, query, sweep_id: str, title: str, if_empty: bool = True) -> None:
    from orchestrator.ui import print_table

    cols, rows = store.table(query, sweep_id=sweep_id)
    if rows or if_empty:
        print_table(cols, rows, title=title, digits=4)


def _print_summary(store, sweep_id: str) -> None:
    from orchestrator.store import Q

    _print_table(store, Q.VARIANT_SUMMARY_TABLE, sweep_id, f"variant_summary (sweep {sweep_id})")
    _print_table(
        store,
        Q.SENSITIVITY_TABLE,
        sweep_id,
        "link_sensitivity (variant median / baseline median)",
        if_empty=False,
    )
    _print_table(
        store,
        Q.LINK_MODEL_EXPOSURE_TABLE,
        sweep_id,
        "link model: step = compute_s + exposure x predicted comm (exposure: share of "
        "communication the step does not hide; 95% bootstrap interval)",
        if_empty=False,
    )
    for r in store.rows(Q.LINK_MISMATCHES, sweep_id=sweep_id):
        print(
            f"LINK MISMATCH run #{r['seq']}: link {r['link']!r} on a {r['link_class']} pair but "
            f"NCCL used {r['effective_transport']}: this run does not measure what its link "
            "name says",
            file=sys.stderr,
        )
    (c,) = store.rows(Q.TELEMETRY_COUNTS, sweep_id=sweep_id)
    if c["absent"] == c["total"]:
        throttling = "throttling not checked (no GPU telemetry on any run)"
    else:
        throttling = (
            f"{c['throttled']} throttled and {c['hot']} hot run(s) of {c['total']} (kept, "
            f"flagged, excluded from figures); throttling not checked on {c['absent']} run(s) "
            "without GPU telemetry"
        )
    print(f"telemetry: {throttling}", file=sys.stderr)
    _print_headline(store, sweep_id)


def _print_headline(store, sweep_id: str) -> None:
    """The links as described and measured, then the headline (orchestrator/headline.py)."""
    from orchestrator.headline import build_headline
    from orchestrator.links import link_label
    from orchestrator.store import Q
    from orchestrator.ui import print_headline

    overview = store.rows(Q.REPORT_LINK_OVERVIEW, sweep_id=sweep_id)
    for o in overview:
        print(f"link {link_label(o['link'], o)}: {o['description']}")
    headline = build_headline(
        store.rows(Q.REPORT_SENSITIVITY, sweep_id=sweep_id),
        store.rows(Q.REPORT_VARIANTS, sweep_id=sweep_id),
        overview,
    )
    print_headline(headline)


def cmd_query(args: argparse.Namespace) -> int:
    from orchestrator.store import StoreError, bring_up_to_date, read_query

    try:
        bring_up_to_date(args.db)
        cols, rows = read_query(args.db, args.sql)
    except StoreError as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    if args.format == "json":
        print(json.dumps([dict(zip(cols, r, strict=True)) for r in rows], default=str, indent=1))
    elif args.format == "csv":
        w = csv.writer(sys.stdout)
        w.writerow(cols)
        w.writerows(rows)
    else:
        from orchestrator.ui import print_table

        print_table(cols, rows)
    return EXIT_OK


def cmd_topo(args: argparse.Namespace) -> int:
    from orchestrator.inspect_cmds import topo_command

    return topo_command(args.address, args.parse, args.json)


def cmd_transports(args: argparse.Namespace) -> int:
    from orchestrator.inspect_cmds import transports_command

    return transports_command(args.parse, args.json)


def cmd_doctor(args: argparse.Namespace) -> int:
    from orchestrator.inspect_cmds import doctor_command

    return doctor_command(args.address)


def cmd_report(args: argparse.Namespace) -> int:
    from orchestrator.report import report_command

    return report_command(args.db, args.sweep, args.out)


def cmd_project(args: argparse.Namespace) -> int:
    from orchestrator.project_cmd import project_command

    return project_command(args.db, args.sweep, args.bandwidth_gbps, args.format)


def cmd_export(args: argparse.Namespace) -> int:
    from orchestrator.report import export_command

    return export_command(args.db, args.format, args.outdir)


def cmd_cluster(args: argparse.Namespace) -> int:
    if not args.emulated:
        err(
            "cluster: only --emulated clusters are managed by linksweep; for real fleets see "
            "clusters/README.md (ray up, KubeRay)"
        )
        return EXIT_BAD_INPUT
    from orchestrator.emulated import cluster_command

    return cluster_command(
        args.action, args.nodes, args.link, args.state_dir, args.cpus_per_node, args.gpus_per_node
    )


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("linksweep")
    except Exception:  # noqa: BLE001 - not installed: the source tree's own number
        from orchestrator import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(
        prog="linksweep",
        description="Measure how the GPU interconnect shapes gpt2 training (DDP, ZeRO) on Ray; "
        "every step of every run goes into DuckDB.",
        epilog=WORKFLOW,
        formatter_class=raw,
    )
    p.add_argument("--version", action="version", version=f"linksweep {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser(
        "run",
        help="run a sweep file and store every run in DuckDB",
        description="Run every variant of a sweep file, repeats interleaved, storing each run "
        "as it ends; print the variant and slowdown tables, the links and the headline.",
        epilog=f"{EXIT_CODES}\n\nthen: linksweep report [--db PATH]",
        formatter_class=raw,
    )
    r.add_argument("sweep", help="sweep file (YAML), e.g. sweeps/quickstart.yaml")
    r.add_argument("--db", default="results.duckdb", help=DB_HELP)
    r.add_argument("--address", default=None, help=ADDRESS_HELP)
    r.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=None,
        metavar="SWEEP_ID",
        help="continue an interrupted sweep (default: the latest with this file's name): same "
        "sweep id, only the runs not stored yet, in the original order",
    )
    r.add_argument(
        "--retry-failed",
        action="store_true",
        help="with --resume (implied): also re-run failed runs (kept, marked superseded); "
        "default: off",
    )
    r.set_defaults(func=cmd_run)

    lb = sub.add_parser(
        "linkbench",
        help="run only the link microbenchmark of a sweep file (each link x placement)",
        description="all_reduce, all_gather and reduce_scatter over each link of a sweep file, "
        "from 1 KiB to linkbench_max_mb; stored in link_bench, read through link_bandwidth.",
        epilog=EXIT_CODES,
        formatter_class=raw,
    )
    lb.add_argument("sweep", help="sweep file (YAML); its links and placements are measured")
    lb.add_argument("--db", default="results.duckdb", help=DB_HELP)
    lb.add_argument("--address", default=None, help=ADDRESS_HELP)
    lb.set_defaults(func=cmd_linkbench)

    q = sub.add_parser(
        "query",
        help="run read-only SQL against the results database",
        description="Run one SQL statement, read-only (refused with a clear message while a "
        "sweep is writing the database). Numbers are printed in full, never abbreviated; use "
        "--format csv or json for other programs.",
        epilog=QUERY_EPILOG,
        formatter_class=raw,
    )
    q.add_argument("sql", help=SQL_HELP)
    q.add_argument("--db", default="results.duckdb", help=DB_HELP)
    q.add_argument(
        "--format",
        choices=["table", "csv", "json"],
        default="table",
        help="table: aligned, numbers in full; csv or json: for other programs (default: table)",
    )
    q.set_defaults(func=cmd_query)

    t = sub.add_parser("topo", help="print each node's nvidia-smi topo -m matrix and inventory")
    t.add_argument("--address", default=None, help=ADDRESS_HELP)
    t.add_argument(
        "--parse",
        metavar="FILE",
        default=None,
        help="parse a saved `nvidia-smi topo -m` output instead of asking the nodes "
        "(default: ask the nodes)",
    )
    t.add_argument(
        "--json", action="store_true", help="with --parse: print JSON (default: a table)"
    )
    t.set_defaults(func=cmd_topo)

    tr = sub.add_parser("transports", help="parse an NCCL_DEBUG=INFO log: version, transports")
    tr.add_argument(
        "--parse", metavar="LOGFILE", required=True, help="an NCCL_DEBUG=INFO log (required)"
    )
    tr.add_argument("--json", action="store_true", help="print JSON (default: a table)")
    tr.set_defaults(func=cmd_transports)

    d = sub.add_parser(
        "doctor",
        help="preflight: what would invalidate a link comparison",
        description="Per node: GPUs and topology, P2P access, PCIe links below their max, power "
        "limits, temperatures, NCCL/CUDA/driver versions. On a CPU-only machine it says so.",
        epilog="exit codes: 0 nothing found (or no GPUs); 1 something would invalidate a link "
        "comparison; 2 bad input",
        formatter_class=raw,
    )
    d.add_argument("--address", default=None, help=ADDRESS_HELP)
    d.set_defaults(func=cmd_doctor)

    rp = sub.add_parser(
        "report",
        help="write a self-contained report.html (headline first) and PNG figures",
        description="One sweep's report: the headline, caveats, links, the classic table, "
        "figures, the views, runs needing attention and provenance, in one offline HTML file.",
        epilog="exit codes: 0 written; 2 no such database or sweep, or --out not writable",
        formatter_class=raw,
    )
    rp.add_argument("--db", default="results.duckdb", help=DB_HELP)
    rp.add_argument(
        "--sweep", default=None, help="sweep id, as `run` printed it (default: the latest sweep)"
    )
    rp.add_argument(
        "--out", default="report", help="output folder, created if missing (default: ./report)"
    )
    rp.set_defaults(func=cmd_report)

    pj = sub.add_parser(
        "project",
        help="predicted step time and slowdown per variant on links of a given bus bandwidth",
    )
    pj.add_argument("--db", default="results.duckdb", help=DB_HELP)
    pj.add_argument("--sweep", default=None, help="sweep id (default: the latest sweep)")
    pj.add_argument(
        "--bandwidth-gbps",
        required=True,
        metavar="GBPS[,GBPS...]",
        help="hypothetical links' bus bandwidth in GB/s (nccl-tests busbw), e.g. 1,10,100 (required)",
    )
    pj.add_argument(
        "--format", choices=["table", "csv", "json"], default="table", help="(default: table)"
    )
    pj.set_defaults(func=cmd_project)

    ex = sub.add_parser("export", help="write every table and view as parquet or csv")
    ex.add_argument("outdir", help="output folder, created if missing; one file per table/view")
    ex.add_argument(
        "--format",
        choices=["parquet", "csv"],
        default="parquet",
        help="file format (default: parquet)",
    )
    ex.add_argument("--db", default="results.duckdb", help=DB_HELP)
    ex.set_defaults(func=cmd_export)

    c = sub.add_parser(
        "cluster",
        help="manage the emulated multi-node cluster: up, down, status, check",
        description="up: build an emulated cluster (network namespaces, tc-shaped links, Ray "
        "nodes; needs root) and print RAY_ADDRESS; down: remove everything up made; status: "
        "nodes and link shapes; check: one gloo all_reduce through each link against its rate.",
        epilog="exit codes: 0 ok; 1 failed (status: not up); 2 bad input (bad link, not root)",
        formatter_class=raw,
    )
    c.add_argument("action", choices=["up", "down", "status", "check"], help="what to do")
    c.add_argument(
        "--emulated",
        action="store_true",
        help="required: the cluster is network namespaces + tc on this machine (real fleets: "
        "clusters/README.md)",
    )
    c.add_argument("--nodes", type=int, default=2, help="emulated nodes, for up (default: 2)")
    c.add_argument(
        "--link",
        action="append",
        default=[],
        metavar="NAME=RATE[,DELAY]",
        help="a link, for up; repeatable; RATE a tc bit rate, DELAY one-way, e.g. slow=500mbit "
        "or slow=500mbit,1ms (default: fast, unshaped, and slow=500mbit)",
    )
    c.add_argument(
        "--state-dir",
        default="/tmp/linksweep-emulated",
        help="where up records the cluster (default: /tmp/linksweep-emulated)",
    )
    c.add_argument(
        "--cpus-per-node", type=int, default=1, help="Ray CPUs per node, for up (default: 1)"
    )
    c.add_argument(
        "--gpus-per-node", type=int, default=0, help="Ray GPUs per node, for up (default: 0)"
    )
    c.set_defaults(func=cmd_cluster)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # `linksweep query ... | head`
        sys.stderr.close()
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
