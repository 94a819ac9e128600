"""``linksweep project``: what links that were not measured would cost, from the link model.

Validates its input before reading anything (exit 2 naming the option), reads one sweep's runs
and its links' bus bandwidth through the named queries, and prints
``orchestrator.analysis.linkmodel.project_sweep``'s rows, one per variant group (``stats.GROUP_KEY``) and
bandwidth. The computation is in ``linkmodel`` (pure); this module is arguments -> rows -> text.

Each variant group is fitted with its flavour (``grad_sync``, ``reshard_after_forward``), so two
FSDP2 flavours are two rows. The table names it in the strategy column
(``flavours.flavoured_strategy``: ``fsdp (reshard, sync each)``, ``ddp (sync each)``) in place
of the two key columns; ``csv`` and ``json`` keep every key as stored, one column each.

May import: shared, orchestrator.cli_help, orchestrator.errors, orchestrator.analysis.flavours,
orchestrator.analysis.linkmodel,
orchestrator.report.reading, orchestrator.analysis.stats, orchestrator.store, orchestrator.ui.
"""

from __future__ import annotations

import argparse
import json
import sys

from orchestrator.cli_help import DB_HELP
from orchestrator.commands.shared import ready_to_read
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_OK, err

FORMATS = ("table", "csv", "json")
SHORT = {"grad_accum": "ga", "overlap_comm": "overlap"}
FIGURE_COLUMNS = (
    ("bandwidth_gbps", "busbw_gbps"),
    ("exposure", "exposure"),
    ("reference_link", "scaled_from"),
    ("predicted_comm_s", "comm_s"),
    ("step_s", "step_s"),
    ("step_ci_low_s", "step_ci_low"),
    ("step_ci_high_s", "step_ci_high"),
    ("fastest_link", "vs_link"),
    ("slowdown", "slowdown"),
    ("slowdown_ci_low", "slowdown_ci_low"),
    ("slowdown_ci_high", "slowdown_ci_high"),
    ("extrapolation", "extrapolated_x"),
    ("quality", "fit"),
)


def add_parser(sub) -> None:
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
        help="hypothetical links' bus bandwidth in GB/s (nccl-tests busbw), e.g. 1,10,100 "
        "(required)",
    )
    pj.add_argument("--format", choices=FORMATS, default="table", help="(default: table)")
    pj.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Exit 0 with the projection printed; 2 on bad input or an unreadable database/sweep."""
    from orchestrator.analysis.linkmodel import parse_bandwidths, project_sweep

    db, sweep_id, fmt = args.db, args.sweep, args.format

    if fmt not in FORMATS:
        err(f"--format {fmt!r} is not allowed; use one of {', '.join(FORMATS)}")
        return EXIT_BAD_INPUT
    try:
        bandwidths = parse_bandwidths(args.bandwidth_gbps)
    except ValueError as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    if not ready_to_read(db):
        return EXIT_BAD_INPUT

    from orchestrator.report.reading import ReportError, pick_sweep
    from orchestrator.store import Q, Reader, StoreError

    try:
        with Reader(db) as reader:
            sweep = pick_sweep(reader, sweep_id)
            sid = sweep["sweep_id"]
            runs = reader.rows(Q.SWEEP_MODEL_RUNS, sweep_id=sid)
            busbw = {
                (r["link"], r["placement"]): r["busbw_gbps"]
                for r in reader.rows(Q.LINK_BUSBW, sweep_id=sid)
            }
            spec = json.loads(sweep["spec"]) if isinstance(sweep.get("spec"), str) else {}
    except (StoreError, ReportError) as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    rows = project_sweep(runs, busbw, bandwidths, seed=int((spec or {}).get("seed", 0)))
    _print(rows, fmt, sid)
    return EXIT_OK


def columns() -> tuple[tuple[str, str], ...]:
    """(row key, printed name): the variant group's keys (``stats.GROUP_KEY``), then figures."""
    from orchestrator.analysis.stats import GROUP_KEY  # numpy: imported only when the command runs

    return (*((k, SHORT.get(k, k)) for k in GROUP_KEY), *FIGURE_COLUMNS)


def table_cells(rows: list[dict]) -> tuple[list[str], list[tuple]]:
    """(column names, rows) of the text table: the strategy named with its flavour
    (``flavoured_strategy``), the flavour keys' own columns left out, the rest as ``columns``."""
    from orchestrator.analysis.flavours import FLAVOUR_KEYS, flavoured_strategy

    cols = [(name, short) for name, short in columns() if name not in FLAVOUR_KEYS]
    cells = [
        tuple(flavoured_strategy(r) if name == "strategy" else r[name] for name, _ in cols)
        for r in rows
    ]
    return [short for _, short in cols], cells


def _print(rows: list[dict], fmt: str, sweep_id: str) -> None:
    cols = columns()
    out = [{short: r[name] for name, short in cols} for r in rows]
    if fmt == "json":
        print(json.dumps(out, indent=1, default=str))
        return
    from orchestrator.ui import print_table, write_csv

    if fmt == "csv":
        write_csv([short for _, short in cols], [tuple(r.values()) for r in out])
        return

    names, cells = table_cells(rows)
    print_table(names, cells, title=f"projected step time per variant (sweep {sweep_id})")
    print(
        "step_s = compute_s + exposure x comm_s; comm_s is scaled from the measured link "
        "`scaled_from` (nearest bus bandwidth: all_reduce busbw at its largest message; each op keeps its efficiency there); "
        "slowdown is against the measured median step time on `vs_link` (fastest measured); "
        "intervals: 95% bootstrap over runs, joined with what monotonicity allows "
        "(docs/link-model.md)",
        file=sys.stderr,
    )
    far = [r for r in rows if (r.get("extrapolation") or 1.0) > 1.0]
    if far:
        worst = max(r["extrapolation"] for r in far)
        print(
            f"warning: {len(far)} projection(s) extrapolate beyond the measured links (up to "
            f"{worst:.1f}x outside their communication times, column extrapolated_x): the line "
            "is a secant of the measured range, so read their intervals, not their points",
            file=sys.stderr,
        )
