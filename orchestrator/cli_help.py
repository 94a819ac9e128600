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
  link_overview     link: what it is, rated_gbps (tc/NVLink/PCIe), measured_busbw_gbps,
                    busbw_share (busbw / rated)
  run_summary       run: status, median/p10/p90 step time, throughput, bytes per step
  link_bandwidth    link x collective x message size x source: busbw_gbps, algbw_gbps
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
  linksweep fleet                               # check every node and link first (exit 1: suspects)
  linksweep run sweeps/quickstart.yaml          # measure; prints the headline at the end
  linksweep report                              # ./report/report.html, headline first
  linksweep query "SELECT * FROM link_sensitivity"
  linksweep baseline set nightly                # name this sweep; later sweeps compare with it
  linksweep compare --baseline nightly results.duckdb   # exit 1 on a regression (compare -h)

{VIEWS_HELP}

{EXIT_CODES}"""
COMPARE_EPILOG = """examples:
  linksweep compare 20261122-112240-60a55f 20261123-090000-abcdef      # two sweeps in --db
  linksweep compare old.duckdb new.duckdb --threshold 10%             # newest sweep of each file
  linksweep compare old.duckdb:SWEEP_ID new.duckdb --link-map slow=ib  # a link renamed
  linksweep compare --baseline nightly results.duckdb --format markdown
verdicts: slower / faster only when the ratio is beyond --threshold AND the runs differ beyond
their noise (Mann-Whitney U, alpha 0.05, with 5+ runs a side; else the ranges of the runs must
not overlap); else no change; not comparable when a side has no figure. docs/compare.md
exit codes:
  0    no regression beyond the threshold
  1    a regression: a variant slower, or a slowdown (link / baseline link) grown
  2    bad input: unknown sweep or baseline, bad --threshold or --link-map, unreadable file,
       or the workloads differ (model, precision, seq_len, micro_batch_size, world_size)
       without --force"""
BASELINE_EPILOG = """examples:
  linksweep baseline set nightly                   # the newest sweep with runs in --db
  linksweep baseline set a100-ref --sweep 20261122-112240-60a55f --note "before NCCL 2.21"
  linksweep baseline list
  linksweep compare --baseline nightly results.duckdb
exit codes: 0 done; 2 bad input (no such sweep, unreadable database)"""
IMPORT_EPILOG = """what the file must contain: an nccl-tests table (its '#  size  count  type ...'
header line and rows; launcher prefixes such as '[1,0]<stdout>:' or '0: ' are fine) or -J JSON;
which collective it measured ('# Collective test starting: all_reduce_perf', a command line
naming all_reduce_perf, the JSON's args), else --op; the world size from its '#  Rank N ...'
banners, else --world-size, else busbw/algbw where that decides it.
examples:
  linksweep import nccl-tests all_reduce.txt --link nvlink --sweep 20261122-112240-60a55f
  linksweep import nccl-tests slurm-1790.out --link ib --op all_gather --world-size 16
  linksweep query "SELECT link, collective, msg_bytes, source, in_place, busbw_gbps
                   FROM link_bandwidth ORDER BY ALL"
exit codes: 0 imported; 2 bad input (unreadable file, unknown --sweep, already imported),
nothing written"""
