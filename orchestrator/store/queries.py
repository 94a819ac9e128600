"""Every SELECT the driver, the CLI, the report and the benchmarks need, named, with bound
parameters (``$name``, DuckDB's named parameters). Pure data; run them with
``Store.rows(Q.NAME, name=value)`` or ``Reader.rows(...)``.

A query's name says what it returns; its parameters are the ``$`` names in its text. Nothing
here is pasted together from values. The variant key's columns are never typed here: every list
of them (selected, matched, ordered by) is generated from the catalog (``workloads/catalog.py``)
when this module is imported (a plugin's axes included), in the catalog's order; rows sort as the
catalog lists strategies and each axis's values (:func:`key_order`).

May import: schema, workloads.catalog.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.store.schema import group_key, sql_literal, variant_key
from workloads import catalog


# The rule for which runs count in figures, as SQL (orchestrator/analysis/stats.py ``included`` is the
# same rule in Python): finished ok and not throttled. Failed and throttled runs stay stored,
# counted as excluded.
def included_run_sql(alias: str = "") -> str:
    a = f"{alias}." if alias else ""
    return f"{a}status = 'ok' AND NOT coalesce({a}throttled, false)"


@dataclass(frozen=True)
class Query:
    name: str
    sql: str

    @property
    def params(self) -> frozenset[str]:
        return frozenset(re.findall(r"\$([a-z_0-9]+)", self.sql))


def _q(name: str, sql: str) -> Query:
    return Query(name, " ".join(sql.split()))


# --- the variant key, from the catalog -------------------------------------------------------
KEY = variant_key()
"""Every key column (strategy first, link and placement last)."""
GROUP = group_key()
"""The key without the link: a variant group (a variant on every link)."""


def key_columns(key: tuple[str, ...] = KEY, alias: str = "") -> str:
    """``strategy, offload, ...`` (``alias``: each prefixed ``alias.``)."""
    return ", ".join(f"{alias}.{c}" if alias else c for c in key)


def key_labelled(key: tuple[str, ...] = KEY) -> str:
    """The key columns for a printed table: each as its axis's short name (``grad_accum AS
    ga``, ``grad_sync AS sync``)."""
    shorts = (catalog.axis(c).short for c in key)
    return ", ".join(c if s == c else f"{c} AS {s}" for c, s in zip(key, shorts, strict=True))


def key_params(key: tuple[str, ...] = GROUP) -> str:
    """``strategy = $strategy AND ...``: rows of one variant (group), its key bound by name."""
    return " AND ".join(f"{c} = ${c}" for c in key)


def _value_order(name: str) -> tuple:
    """The values of an axis in the catalog's order (strategies: display order); () for an
    open axis (integers), which sorts by value."""
    if name == "strategy":
        return catalog.names()
    a = catalog.axis(name)
    if a.values is None:
        return ()
    extra = (v for s in catalog.STRATEGIES.values() for v in s.values.get(name, ()))
    return tuple(dict.fromkeys([*a.values, *extra]))


def key_order(key: tuple[str, ...] = KEY, alias: str = "") -> str:
    """An ORDER BY list over ``key``: strategies as the catalog lists them, each closed axis's
    values in its order, open axes by value; a value the catalog does not list (``n/a``) after
    those, by itself."""
    out = []
    for c in key:
        col = f"{alias}.{c}" if alias else c
        values = _value_order(c)
        if values:
            whens = " ".join(f"WHEN {sql_literal(v)} THEN {i}" for i, v in enumerate(values))
            out.append(f"CASE {col} {whens} END")
        out.append(col)
    return ", ".join(out)


# --- sweeps ---------------------------------------------------------------------------------
SWEEP = _q("sweep", "SELECT * FROM sweeps WHERE sweep_id = $sweep_id")
LATEST_SWEEPS = _q(
    "latest_sweeps", "SELECT * FROM sweeps ORDER BY started_at DESC NULLS LAST LIMIT $limit"
)
FAILED_RUN_COUNT = _q(
    "failed_run_count",
    """SELECT count(*) AS n FROM runs
       WHERE sweep_id = $sweep_id AND status <> 'ok' AND superseded_by IS NULL""",
)

# --- long sweeps: spool, liveness, resume ---------------------------------------------------
RUN_EXISTS = _q("run_exists", "SELECT count(*) AS n FROM runs WHERE run_id = $run_id")
RUNNING_SWEEPS = _q(
    "running_sweeps",
    """SELECT sweep_id, status, driver_host, driver_pid, heartbeat_at, started_at
       FROM sweeps WHERE status = 'running'""",
)
RUNNING_FLEETS = _q(
    "running_fleets",
    """SELECT fleet_id, status, driver_host, driver_pid, heartbeat_at, started_at
       FROM fleet_checks WHERE status = 'running'""",
)
LATEST_SWEEP_NAMED = _q(
    "latest_sweep_named",
    """SELECT * FROM sweeps WHERE name = $name AND n_runs_planned > 0
       ORDER BY started_at DESC NULLS LAST LIMIT 1""",
)
SWEEP_RUN_SLOTS = _q(
    "sweep_run_slots",
    f"""SELECT run_id, seq, "repeat", {key_columns()}, status,
              coalesce(attempt, 1) AS attempt, superseded_by
       FROM runs WHERE sweep_id = $sweep_id ORDER BY seq, attempt""",
)

# --- statistics (orchestrator/analysis/stats.py reads these, computes, stores variant/sensitivity) ---
# The run rows the figures are computed from carry what orchestrator/analysis/stats.py ``link_measurement``
# reads (link_class, ranks_per_gpu): a one-GPU rehearsal never makes a slowdown or a link model.
VARIANT_GROUP_RUNS = _q(
    "variant_group_runs",
    f"""SELECT {key_columns()}, status,
              coalesce(throttled, false) AS throttled, median_step_time_s, p10_step_time_s,
              p90_step_time_s, samples_per_s, tokens_per_s, comm_bytes_per_step,
              expected_comm_bytes_per_step, predicted_comm_s_per_step, peak_mem_bytes, achieved_tflops_per_gpu, mfu,
              link_class, coalesce(ranks_per_gpu, 1) AS ranks_per_gpu
       FROM runs
       WHERE sweep_id = $sweep_id AND {key_params()} AND superseded_by IS NULL
       ORDER BY seq""",
)
LINK_ALGBW = _q(
    "link_algbw",
    """SELECT collective AS op, msg_bytes, algbw_gbps FROM link_bandwidth
       WHERE sweep_id = $sweep_id AND link = $link AND placement = $placement
         AND source = 'linksweep' AND algbw_gbps > 0""",
)

# --- the link model (orchestrator/analysis/linkmodel.py) --------------------------------------------
SWEEP_MODEL_RUNS = _q(
    "sweep_model_runs",
    f"""SELECT {key_columns()}, status,
              coalesce(throttled, false) AS throttled, median_step_time_s, p10_step_time_s,
              p90_step_time_s, predicted_comm_s_per_step, link_class,
              coalesce(ranks_per_gpu, 1) AS ranks_per_gpu
       FROM runs WHERE sweep_id = $sweep_id ORDER BY seq""",
)
# A link's bus bandwidth as nccl-tests users quote it: all_reduce busbw at the largest measured
# message (small messages can beat a shaped link's rate inside its burst); without an
# all_reduce, the best op at its largest message.
LINK_BUSBW = _q(
    "link_busbw",
    """SELECT link, placement,
              coalesce(max(busbw_gbps) FILTER (WHERE collective = 'all_reduce'),
                       max(busbw_gbps)) AS busbw_gbps
       FROM (SELECT link, placement, collective, busbw_gbps FROM link_bandwidth
             WHERE sweep_id = $sweep_id AND source = 'linksweep' AND busbw_gbps > 0
             QUALIFY row_number() OVER (PARTITION BY link, placement, collective
                                        ORDER BY msg_bytes DESC) = 1)
       GROUP BY link, placement""",
)
LINK_MODEL_EXPOSURE_TABLE = _q(
    "link_model_exposure_table",
    f"""SELECT {key_labelled(GROUP)}, n_links AS links, exposure,
              exposure_ci_low AS ci_low, exposure_ci_high AS ci_high, compute_s, quality AS fit
       FROM link_model WHERE sweep_id = $sweep_id AND n_links >= 2
       ORDER BY {key_order(GROUP)}""",
)
REPORT_LINK_MODEL = _q("report_link_model", "SELECT * FROM link_model WHERE sweep_id = $sweep_id")
REPORT_LINK_MODEL_CHECK = _q(
    "report_link_model_check",
    f"""SELECT * FROM link_model_check WHERE sweep_id = $sweep_id
       ORDER BY {key_order(GROUP)}, predicted_comm_s""",
)

# --- `linksweep run` summary ----------------------------------------------------------------
# Every key column, as its axis's short name: the printing (orchestrator/commands/run.py) leaves
# out the axes that do not vary among the rows.
VARIANT_SUMMARY_TABLE = _q(
    "variant_summary_table",
    f"""SELECT {key_labelled()}, n_runs, n_excluded AS excl, median_step_time_s AS step_s, ci_low_s, ci_high_s,
              interval_kind, samples_per_s, tokens_per_s, comm_bytes_per_step AS comm_B_per_step,
              achieved_tflops_per_gpu AS tflops_per_gpu, mfu
       FROM variant_summary WHERE sweep_id = $sweep_id
       ORDER BY {key_order()}""",
)
SENSITIVITY_TABLE = _q(
    "sensitivity_table",
    f"""SELECT {key_labelled()}, baseline_link, slowdown, ci_low, ci_high, interval_kind
       FROM link_sensitivity WHERE sweep_id = $sweep_id
       ORDER BY {key_order()}""",
)
# The accumulation check of every run, for the end-of-run lines that name the failed ones
# (``report.accumulation.accumulation_lines``: the count of runs checked needs them all).
ACCUM_CHECKS = _q(
    "accum_checks",
    f"""SELECT run_id, seq, {key_columns()}, accum_check,
              non_final_bytes, promised_non_final_bytes
       FROM runs WHERE sweep_id = $sweep_id ORDER BY seq""",
)
LINK_MISMATCHES = _q(
    "link_mismatches",
    """SELECT seq, link, link_class, effective_transport FROM runs
       WHERE sweep_id = $sweep_id AND link_check = 'mismatch' ORDER BY seq""",
)
TELEMETRY_COUNTS = _q(
    "telemetry_counts",
    """SELECT count(*) FILTER (WHERE throttled) AS throttled, count(*) FILTER (WHERE hot) AS hot,
              count(*) FILTER (WHERE telemetry LIKE 'absent%') AS absent, count(*) AS total
       FROM runs WHERE sweep_id = $sweep_id""",
)
BANDWIDTH_TABLE = _q(
    "bandwidth_table",
    """SELECT link, placement, collective, msg_bytes, iterations, time_s, algbw_gbps,
              busbw_gbps
       FROM link_bandwidth WHERE sweep_id = $sweep_id AND source = 'linksweep'
       ORDER BY link, placement, collective, msg_bytes""",
)

# --- the report (orchestrator/report/reading.py) ----------------------------------------------
REPORT_RUNS = _q(
    "report_runs",
    """SELECT * REPLACE (coalesce(n_steps, 0) AS n_steps) FROM runs
       WHERE sweep_id = $sweep_id ORDER BY seq""",
)
# Each variant's figures, and the collectives its included runs sent by op and dtype, largest
# first (``comm_dtypes``: "all_gather bf16 + reduce_scatter bf16"; an (op, dtype) carrying under
# 1% of the largest one's bytes, such as scalar norms, flags and ZeRO-3's index broadcasts, is
# left out), so strategies are compared with what they sent. A key column the variant row leaves
# NULL (a row stored without that column) matches the runs of any value.
REPORT_VARIANTS = _q(
    "report_variants",
    f"""SELECT v.*,
               (SELECT string_agg(op || ' ' || dtype, ' + ' ORDER BY nbytes DESC, op, dtype)
                FROM (SELECT c.op, c.dtype, sum(c.msg_bytes * c.count) AS nbytes
                      FROM comms c JOIN runs r ON r.run_id = c.run_id
                      WHERE r.sweep_id = v.sweep_id
                        AND {" AND ".join(f"(v.{c} IS NULL OR r.{c} = v.{c})" for c in KEY)}
                        AND {included_run_sql("r")} AND r.superseded_by IS NULL
                        AND c.dtype IS NOT NULL
                      GROUP BY c.op, c.dtype
                      QUALIFY nbytes >= 0.01 * max(nbytes) OVER ())) AS comm_dtypes
        FROM variant_summary v WHERE v.sweep_id = $sweep_id""",
)
REPORT_SENSITIVITY = _q(
    "report_sensitivity", "SELECT * FROM link_sensitivity WHERE sweep_id = $sweep_id"
)
REPORT_STEP_TIMES = _q(
    "report_step_times",
    f"""SELECT {key_columns(alias="r")}, r.run_id, st.step, st.step_time_s
        FROM step_times st JOIN runs r ON r.run_id = st.run_id
        WHERE r.sweep_id = $sweep_id AND {included_run_sql("r")}""",
)
REPORT_BANDWIDTH = _q(
    "report_bandwidth",
    "SELECT * FROM link_bandwidth WHERE sweep_id = $sweep_id AND source = 'linksweep'",
)
# nccl-tests' figures imported into the sweep (linksweep import nccl-tests --sweep), shown beside
# linksweep's own per link x collective x size (report/nccltests_view.py).
REPORT_BANDWIDTH_NCCL_TESTS = _q(
    "report_bandwidth_nccl_tests",
    """SELECT link, collective, msg_bytes, in_place, world_size, iterations, busbw_gbps
       FROM link_bandwidth WHERE sweep_id = $sweep_id AND source = 'nccl-tests'
       ORDER BY link, collective, msg_bytes, in_place""",
)
REPORT_BENCH_FAILURES = _q(
    "report_bench_failures",
    """SELECT link, placement, op, status, count(*) AS n_rows, min(error) AS error
       FROM link_bench WHERE sweep_id = $sweep_id AND status <> 'ok'
       GROUP BY ALL ORDER BY link, placement, op""",
)
REPORT_LINK_OVERVIEW = _q(
    "report_link_overview", "SELECT * FROM link_overview WHERE sweep_id = $sweep_id ORDER BY link"
)
REPORT_NODES = _q("report_nodes", "SELECT * FROM nodes WHERE sweep_id = $sweep_id ORDER BY node")
REPORT_GPUS = _q(
    "report_gpus", "SELECT * FROM gpus WHERE sweep_id = $sweep_id ORDER BY node, gpu_index"
)
REPORT_GPU_LINKS = _q(
    "report_gpu_links", "SELECT * FROM gpu_links WHERE sweep_id = $sweep_id ORDER BY node"
)

# --- benchmarks (bench/: one sweep per database) -------------------------------------------
BENCH_RUNS = _q(
    "bench_runs",
    """SELECT status, n_steps, median_step_time_s, p10_step_time_s, startup_s FROM run_summary
       ORDER BY seq""",
)
BENCH_VARIANTS = _q(
    "bench_variants",
    f"""SELECT {key_columns()}, n_runs, n_excluded, median_step_time_s, ci_low_s,
              ci_high_s, comm_bytes_per_step, expected_comm_bytes_per_step, peak_mem_bytes
       FROM variant_summary ORDER BY {key_order()}""",
)
BENCH_OK_RUN_FIGURES = _q(
    "bench_ok_run_figures",
    f"""SELECT {key_columns()}, median_step_time_s FROM run_summary
       WHERE status = 'ok' AND median_step_time_s IS NOT NULL ORDER BY seq""",
)
BENCH_FAULT_RUNS = _q(
    "bench_fault_runs",
    """SELECT r.run_id, r.seq, r.link, r."repeat", r.status, r.superseded_by, r.started_at,
              r.finished_at, r.startup_s, s.status AS sweep_status,
              (SELECT count(*) FROM steps st WHERE st.run_id = r.run_id) AS n_step_rows
       FROM runs r JOIN sweeps s USING (sweep_id) ORDER BY r.seq, r.run_id""",
)
BENCH_FAILED_RUNS = _q(
    "bench_failed_runs",
    "SELECT seq, strategy, grad_accum, error FROM runs WHERE status <> 'ok' ORDER BY seq",
)
# Scale benchmark (bench/bench_scale.py): where a sweep's wall went. Timed seconds of a run = the
# sum over its timed steps of the slowest rank's step (the step_times view).
BENCH_RUN_OVERHEAD = _q(
    "bench_run_overhead",
    """SELECT r.seq, r.status,
              epoch(r.finished_at) - epoch(r.started_at) AS wall_s,
              coalesce(sum(st.step_time_s), 0) AS timed_s
       FROM runs r LEFT JOIN step_times st ON st.run_id = r.run_id
       GROUP BY r.seq, r.status, r.started_at, r.finished_at ORDER BY r.seq""",
)
BENCH_SWEEP_WALL = _q(
    "bench_sweep_wall",
    """SELECT epoch(finished_at) - epoch(started_at) AS wall_s, status, n_runs_planned
       FROM sweeps""",
)
# Where a run's seconds go (run_phases): per phase, the slowest rank's seconds per run (the
# driver's phases have one row per run), then the median over runs and the total over the sweep.
_PHASES_PER_RUN = """SELECT ph.run_id, ph.phase, max(ph.seconds) AS s
                     FROM run_phases ph JOIN runs r ON r.run_id = ph.run_id
                     WHERE {where} GROUP BY ph.run_id, ph.phase"""
REPORT_TRACE_EXPOSURE = _q(
    "report_trace_exposure",
    f"""SELECT * FROM trace_exposure WHERE sweep_id = $sweep_id ORDER BY {key_order()}""",
)
REPORT_TRACE_COLLECTIVES = _q(
    "report_trace_collectives",
    f"""SELECT * FROM trace_collective_exposure WHERE sweep_id = $sweep_id
       ORDER BY {key_order()}, exposed_s DESC""",
)
REPORT_TRACE_WAIT = _q(
    "report_trace_wait",
    f"""SELECT * FROM trace_wait_summary WHERE sweep_id = $sweep_id ORDER BY {key_order()}""",
)
REPORT_TRACE_COLLECTIVE_WAIT = _q(
    "report_trace_collective_wait",
    f"""SELECT * FROM trace_collective_wait WHERE sweep_id = $sweep_id
       ORDER BY {key_order()}, exposed_s DESC""",
)
# Each traced ok run's ranks: lateness and straggler score, the run's verdict and clock offsets.
REPORT_TRACE_LATENESS = _q(
    "report_trace_lateness",
    f"""SELECT l.*, r.seq, r.straggler_rank, r.straggler_why, t.clock_offset_ns,
              t.clock_uncertainty_ns, {key_columns(alias="r")}
       FROM trace_lateness l JOIN runs r USING (run_id)
       LEFT JOIN traces t ON t.run_id = l.run_id AND t.rank = l.rank
       WHERE r.sweep_id = $sweep_id AND r.status = 'ok' AND r.superseded_by IS NULL
       ORDER BY r.seq, l.rank""",
)
# Each traced ok run's rank files, first run of each variant x link first (the timeline draws it).
REPORT_TRACES = _q(
    "report_traces",
    f"""SELECT t.run_id, t.rank, t.path, t.steps, t.rebased_path, t.clock_offset_ns,
              t.clock_uncertainty_ns, r.seq, {key_columns(alias="r")}
       FROM traces t JOIN runs r USING (run_id)
       WHERE r.sweep_id = $sweep_id AND r.status = 'ok' AND r.superseded_by IS NULL
             AND t.path IS NOT NULL
       ORDER BY r.seq, t.rank""",
)
REPORT_PHASES = _q(
    "report_phases",
    f"""SELECT phase, count(*) AS n_runs, median(s) AS median_s, sum(s) AS total_s
        FROM ({_PHASES_PER_RUN.format(where="r.sweep_id = $sweep_id")})
        GROUP BY phase""",
)
BENCH_PHASES = _q(
    "bench_phases",
    f"""SELECT phase, median(s) AS median_s FROM ({_PHASES_PER_RUN.format(where="true")})
        GROUP BY phase""",
)
BENCH_RUN_STEP_PHASES = _q(
    "bench_run_step_phases",
    """SELECT r.seq, epoch(r.finished_at) - epoch(r.started_at) AS wall_s, sum(p.s) AS steps_s
       FROM runs r
       JOIN (SELECT run_id, phase, max(seconds) AS s FROM run_phases
             WHERE phase IN ('warmup', 'timed_steps', 'profiled_pass')
             GROUP BY run_id, phase) p ON p.run_id = r.run_id
       GROUP BY r.seq, r.started_at, r.finished_at ORDER BY r.seq""",
)

# --- compare and baselines (orchestrator/store/snapshot.py, Store.set_baseline) ------------
# The newest sweep that stored a run: what a database file named alone on `compare` stands for.
COMPARE_NEWEST_SWEEP = _q(
    "compare_newest_sweep",
    """SELECT * FROM sweeps s WHERE EXISTS (SELECT 1 FROM runs r WHERE r.sweep_id = s.sweep_id)
       ORDER BY started_at DESC NULLS LAST LIMIT 1""",
)
# Every current run of a sweep (retried failures left out): the variant key, the run figures and
# what the fingerprint reads. Large per-rank JSON columns are left out.
COMPARE_RUNS = _q(
    "compare_runs",
    """SELECT * EXCLUDE (nodes, link_env, ds_config, variant, rank_env, error)
              REPLACE (coalesce(throttled, false) AS throttled,
                       coalesce(ranks_per_gpu, 1) AS ranks_per_gpu,
                       coalesce(ranks_per_node, CASE WHEN placement = 'spread' THEN 1
                                                     ELSE world_size END) AS ranks_per_node)
       FROM runs WHERE sweep_id = $sweep_id AND superseded_by IS NULL ORDER BY seq""",
)
# The microbenchmark's busbw per link x placement x collective x size x source x in-place, every
# timed iteration in a list: compare takes their median (the value link_bandwidth shows) and
# needs their spread, which the view does not keep.
COMPARE_LINKBENCH = _q(
    "compare_linkbench",
    """SELECT link, placement, collective, msg_bytes, source, in_place,
              list(busbw_gbps ORDER BY iteration) AS busbw_gbps
       FROM (SELECT link, placement, op AS collective, msg_bytes,
                    coalesce(source, 'linksweep') AS source, in_place, iteration, busbw_gbps
             FROM link_bench
             WHERE sweep_id = $sweep_id AND status = 'ok' AND busbw_gbps > 0)
       GROUP BY link, placement, collective, msg_bytes, source, in_place
       ORDER BY link, placement, collective, msg_bytes, source, in_place""",
)
COMPARE_LINK_DESCRIPTIONS = _q(
    "compare_link_descriptions",
    "SELECT * FROM link_descriptions WHERE sweep_id = $sweep_id ORDER BY link",
)
BASELINES = _q(
    "baselines",
    """SELECT b.name, b.sweep_id, b.set_at, b.note, s.name AS sweep_name, s.started_at,
              (SELECT count(*) FROM runs r WHERE r.sweep_id = b.sweep_id) AS n_runs
       FROM baselines b LEFT JOIN sweeps s USING (sweep_id) ORDER BY b.name""",
)
BASELINE = _q("baseline", "SELECT * FROM baselines WHERE name = $name")

# --- linksweep import nccl-tests ------------------------------------------------------------
# What an import must not repeat: the ops of a link already imported into a sweep.
IMPORTED_OPS = _q(
    "imported_ops",
    """SELECT DISTINCT op FROM link_bench
       WHERE sweep_id = $sweep_id AND link = $link AND source = 'nccl-tests' ORDER BY op""",
)

# --- linksweep fleet ------------------------------------------------------------------------
FLEET_CHECK = _q("fleet_check", "SELECT * FROM fleet_checks WHERE fleet_id = $fleet_id")
LATEST_FLEET = _q(
    "latest_fleet",
    "SELECT fleet_id FROM fleet_checks ORDER BY started_at DESC, fleet_id DESC LIMIT 1",
)
FLEET_NODES = _q(
    "fleet_nodes",
    "SELECT * FROM fleet_nodes WHERE fleet_id = $fleet_id ORDER BY ip, hostname, node_id",
)
FLEET_PAIRS = _q(
    "fleet_pairs",
    """SELECT * FROM fleet_pairs WHERE fleet_id = $fleet_id
       ORDER BY link, kind, round, node_a, node_b""",
)
FLEET_ROUNDS = _q(
    "fleet_rounds",
    "SELECT * FROM fleet_rounds WHERE fleet_id = $fleet_id ORDER BY link, kind, round",
)
FLEET_SUSPECTS = _q(
    "fleet_suspects",
    "SELECT * FROM fleet_suspects WHERE fleet_id = $fleet_id ORDER BY kind DESC, ip, node_id",
)
# --- sweeps avoiding a fleet check's suspects (linksweep run --exclude-suspects) ------------
RECENT_FLEETS = _q(
    "recent_fleets",
    """SELECT fleet_id, started_at, status, n_suspects FROM fleet_checks
       ORDER BY started_at DESC NULLS LAST, fleet_id DESC LIMIT $limit""",
)
