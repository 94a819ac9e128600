"""``linksweep project``: what links that were not measured would cost, from the link model.

``project_command(db, sweep_id, bandwidth_gbps, fmt)`` validates its input before reading
anything (exit 2 naming the option), reads one sweep's runs and its links' bus bandwidth
through the named queries, and prints ``orchestrator.linkmodel.project_sweep``'s rows. The
computation is in ``linkmodel`` (pure); this module is arguments -> rows -> text.
"""

from __future__ import annotations

import csv
import json
import os
import sys

from orchestrator.errors import EXIT_BAD_INPUT, EXIT_OK, err
from orchestrator.stats import GROUP_KEY

FORMATS = ("table", "csv", "json")
SHORT = {"grad_accum": "ga", "overlap_comm": "overlap"}
COLUMNS = (
    *((k, SHORT.get(k, k)) for k in GROUP_KEY),
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
    ("quality", "fit"),
)


def project_command(db: str, sweep_id: str | None, bandwidth_gbps: str, fmt: str) -> int:
    """Exit 0 with the projection printed; 2 on bad input or an unreadable database/sweep."""
    from orchestrator.linkmodel import parse_bandwidths, project_sweep

    if fmt not in FORMATS:
        err(f"--format {fmt!r} is not allowed; use one of {', '.join(FORMATS)}")
        return EXIT_BAD_INPUT
    try:
        bandwidths = parse_bandwidths(bandwidth_gbps)
    except ValueError as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    if not os.path.exists(db):
        err(f"--db {db} does not exist; run a sweep first (linksweep run SWEEP.yaml --db {db})")
        return EXIT_BAD_INPUT

    from orchestrator.report.data import ReportError, pick_sweep
    from orchestrator.store import Q, Reader, StoreError, bring_up_to_date

    try:
        bring_up_to_date(db)
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


def _print(rows: list[dict], fmt: str, sweep_id: str) -> None:
    out = [{short: r[name] for name, short in COLUMNS} for r in rows]
    if fmt == "json":
        print(json.dumps(out, indent=1, default=str))
        return
    if fmt == "csv":
        w = csv.writer(sys.stdout, lineterminator="\n")  # csv's default is \r\n
        w.writerow([short for _, short in COLUMNS])
        w.writerows([list(r.values()) for r in out])
        return
    from orchestrator.ui import print_table

    print_table(
        [short for _, short in COLUMNS],
        [tuple(r.values()) for r in out],
        title=f"projected step time per variant (sweep {sweep_id})",
    )
    print(
        "step_s = compute_s + exposure x comm_s; comm_s is scaled from the measured link "
        "`scaled_from` (nearest bus bandwidth: all_reduce busbw at its largest message; each op keeps its efficiency there); "
        "slowdown is against the measured median step time on `vs_link` (fastest measured); "
        "intervals: 95% bootstrap over runs",
        file=sys.stderr,
    )
