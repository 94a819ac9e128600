"""The command line's help texts: the workflow, the views, the exit codes (``linksweep --help``,
``run --help``, ``query --help``). Pure data; kept out of cli.py, which holds no SQL.

May import: nothing (the standard library only).
"""

from __future__ import annotations

DB_HELP = "the results database, a DuckDB file (default: ./results.duckdb)"
ADDRESS_HELP = (
    "Ray cluster address, e.g. 198.18.0.254:6390 or auto (default: $RAY_ADDRESS; without it, "
    "an embedded single-node Ray on this machine)"
)
VIEWS_HELP = """views (one row per ...):
  variant_summary   variant: n_runs, median_step_time_s, ci_low_s/ci_high_s + interval_kind
  link_sensitivity  variant x non-baseline link: slowdown, ci_low/ci_high + interval_kind
  link_overview     link: what it is (tc rate, delay), rated_gbps, measured_busbw_gbps
  run_summary       run: status, median/p10/p90 step time, throughput, bytes per step
  link_bandwidth    link x collective x message size: busbw_gbps, algbw_gbps
  step_times        timed step of a run: step_time_s (slowest rank)
interval_kind: range = min-max of the runs (fewer than 5 runs per variant), bootstrap95 =
95% percentile-bootstrap interval of the median (5 runs or more). Full schema: docs/schema.md"""
EXIT_CODES = """exit codes:
  0    every run finished ok
  1    at least one run failed (every run, failed ones too, is stored)
  2    bad input: sweep file, flag or database; nothing ran, nothing was written
  130  interrupted (Ctrl-C): finished runs are stored"""
QUERY_EPILOG = (
    VIEWS_HELP
    + '\n\nexample:\n  linksweep query "SELECT strategy, grad_accum, link, slowdown, ci_low, '
    'ci_high, interval_kind FROM link_sensitivity ORDER BY slowdown DESC"'
)
SQL_HELP = 'one SQL statement, e.g. "SELECT * FROM variant_summary"'
WORKFLOW = f"""workflow:
  linksweep run sweeps/quickstart.yaml          # measure; prints the headline at the end
  linksweep report                              # ./report/report.html, headline first
  linksweep query "SELECT * FROM link_sensitivity"

{VIEWS_HELP}

{EXIT_CODES}"""
