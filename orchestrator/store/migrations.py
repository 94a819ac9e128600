"""Migrations: the SQL that brings a database written by an older linksweep up to
``schema.SCHEMA_VERSION``, one list of statements per version step. Pure data;
``orchestrator/store/db.py`` applies it.

Two parts. The hand-written steps (v2..v12, and any later change no axis makes) stay as they
were written: each says what an older row meant (DDP before v7 all-reduced fp32, so its rows say
fp32). Then the derived steps: an axis the catalog adds after v12 (``Axis.since``) gets, in the
step of its version, its column in every table keyed by variant and a value on every old row:
the axis's default where it applies to the row's strategy (the strategy's own default where it
has one), its placeholder where it does not (:func:`fill_sql`). An axis ``renamed_from`` an
older column reads that column's values through its mapping, then the old column is dropped. So
a database made by an older linksweep opens under a newer one and reads as if each new axis had
its default, and the version still moves one step per change.

May import: schema, workloads.catalog.
"""

from __future__ import annotations

from typing import Any

from orchestrator.store import schema
from orchestrator.store.schema import TABLES, sql_literal
from workloads import catalog

# v3's migration recomputes v2's intervals from the stored run figures (included runs only).
_V2_FIGURES = """SELECT sweep_id, strategy, offload, grad_accum, bucket_mb, link, placement,
                        count(*) AS n, min(median_step_time_s) AS lo,
                        max(median_step_time_s) AS hi
                 FROM runs
                 WHERE status = 'ok' AND NOT coalesce(throttled, false)
                   AND median_step_time_s IS NOT NULL
                 GROUP BY ALL"""
_V2_KEY_MATCH = """{t}.sweep_id = {a}.sweep_id AND {t}.strategy = {a}.strategy
             AND {t}.offload = {a}.offload AND {t}.grad_accum = {a}.grad_accum
             AND {t}.bucket_mb = {a}.bucket_mb AND {t}.link = {a}.link
             AND {t}.placement = {a}.placement"""

# v7's tables keyed by variant besides runs: each gets the ddp_grad_dtype key column.
_V7_KEYED = ("variant_stats", "sensitivity_stats", "link_model", "link_model_check")


# The hand-written steps: version -> SQL statements that bring a database from version-1 to
# version. (A step that creates a table an older database lacks creates it as TABLES has it now,
# the catalog as it was at import: a derived step after it adds whatever column it lacks.) They
# name strategies as they were when each step was written ('ddp' in v3, v7, v8): what an old
# row meant is history, not something the catalog derives.
_HISTORIC: dict[int, list[str]] = {
    # v2: figures are computed once, in Python (orchestrator/analysis/stats.py), and stored; views select.
    # Databases written by v1 get their figures filled in by v1's own SQL formulas, once.
    2: [
        *(
            f"ALTER TABLE runs ADD COLUMN {col}"
            for col in (
                "n_steps INTEGER",
                "median_step_time_s DOUBLE",
                "p10_step_time_s DOUBLE",
                "p90_step_time_s DOUBLE",
                "samples_per_s DOUBLE",
                "tokens_per_s DOUBLE",
            )
        ),
        """UPDATE runs SET n_steps = f.n, median_step_time_s = f.med, p10_step_time_s = f.p10,
                  p90_step_time_s = f.p90, samples_per_s = f.sps, tokens_per_s = f.tps
           FROM (SELECT run_id, count(*) AS n, median(t) AS med, quantile_cont(t, 0.1) AS p10,
                        quantile_cont(t, 0.9) AS p90, sum(s) / sum(t) AS sps, sum(k) / sum(t) AS tps
                 FROM (SELECT run_id, step, max(step_time_s) AS t, sum(samples) AS s,
                              sum(tokens) AS k
                       FROM steps WHERE NOT warmup GROUP BY run_id, step)
                 GROUP BY run_id) f
           WHERE runs.run_id = f.run_id""",
        *(
            f"ALTER TABLE variant_stats ADD COLUMN {col}"
            for col in (
                "samples_per_s DOUBLE",
                "tokens_per_s DOUBLE",
                "comm_bytes_per_step DOUBLE",
                "expected_comm_bytes_per_step DOUBLE",
                "predicted_comm_s_per_step DOUBLE",
                "peak_mem_bytes BIGINT",
            )
        ),
        """UPDATE variant_stats SET samples_per_s = f.sps, tokens_per_s = f.tps,
                  comm_bytes_per_step = f.cb, expected_comm_bytes_per_step = f.eb,
                  predicted_comm_s_per_step = f.pc, peak_mem_bytes = f.pm
           FROM (SELECT sweep_id, strategy, offload, grad_accum, bucket_mb, link, placement,
                        median(samples_per_s) AS sps, median(tokens_per_s) AS tps,
                        median(comm_bytes_per_step) AS cb,
                        median(expected_comm_bytes_per_step) AS eb,
                        median(predicted_comm_s_per_step) AS pc, max(peak_mem_bytes) AS pm
                 FROM runs WHERE status = 'ok' AND NOT coalesce(throttled, false)
                 GROUP BY ALL) f
           WHERE variant_stats.sweep_id = f.sweep_id AND variant_stats.strategy = f.strategy
             AND variant_stats.offload = f.offload AND variant_stats.grad_accum = f.grad_accum
             AND variant_stats.bucket_mb = f.bucket_mb AND variant_stats.link = f.link
             AND variant_stats.placement = f.placement""",
    ],
    # v3: the overlap_comm axis, the effective DeepSpeed config, compute efficiency.
    # Runs written before v3 pinned overlap_comm false for every ZeRO stage (DDP overlapped as
    # always), so that is what their rows say; their ds_config and FLOP figures stay NULL.
    # v3: intervals say what they are (interval_kind); below 5 runs they are the range of the
    # runs, so rows stored by v2 (a percentile bootstrap at any n) are relabelled or recomputed
    # from the stored run figures. New table link_descriptions (created from TABLES).
    # v3: run_phases (a new table: created by the schema itself); how a run's ranks started.
    # v3: long sweeps: driver liveness, retried runs.
    3: [
        "ALTER TABLE sweeps ADD COLUMN driver_pid INTEGER",
        "ALTER TABLE sweeps ADD COLUMN heartbeat_at TIMESTAMPTZ",
        "ALTER TABLE runs ADD COLUMN attempt INTEGER",
        "ALTER TABLE runs ADD COLUMN superseded_by VARCHAR",
        "ALTER TABLE runs ADD COLUMN launcher VARCHAR",
        *(
            f"ALTER TABLE runs ADD COLUMN {col}"
            for col in (
                "overlap_comm VARCHAR",
                "ds_config JSON",
                "gpu_name VARCHAR",
                "model_flops_per_step DOUBLE",
                "achieved_tflops_per_gpu DOUBLE",
                "peak_tflops DOUBLE",
                "peak_source VARCHAR",
                "mfu DOUBLE",
            )
        ),
        "ALTER TABLE variant_stats ADD COLUMN overlap_comm VARCHAR",
        "ALTER TABLE variant_stats ADD COLUMN achieved_tflops_per_gpu DOUBLE",
        "ALTER TABLE variant_stats ADD COLUMN mfu DOUBLE",
        "ALTER TABLE sensitivity_stats ADD COLUMN overlap_comm VARCHAR",
        *(
            f"UPDATE {table} SET overlap_comm = "
            "CASE WHEN strategy = 'ddp' THEN 'default' ELSE 'false' END"
            for table in ("runs", "variant_stats", "sensitivity_stats")
        ),
        "ALTER TABLE variant_stats ADD COLUMN interval_kind VARCHAR",
        "ALTER TABLE sensitivity_stats ADD COLUMN interval_kind VARCHAR",
        f"""UPDATE variant_stats SET ci_low_s = f.lo, ci_high_s = f.hi, interval_kind = 'range'
           FROM ({_V2_FIGURES}) f
           WHERE {_V2_KEY_MATCH.format(t="variant_stats", a="f")} AND f.n < 5""",
        """UPDATE variant_stats SET interval_kind = 'bootstrap95'
           WHERE interval_kind IS NULL AND ci_low_s IS NOT NULL""",
        f"""UPDATE sensitivity_stats SET ci_low = x.lo, ci_high = x.hi, interval_kind = 'range'
           FROM (SELECT f.sweep_id, f.strategy, f.offload, f.grad_accum, f.bucket_mb,
                        f.placement, f.link, b.link AS baseline_link,
                        f.lo / b.hi AS lo, f.hi / b.lo AS hi
                 FROM ({_V2_FIGURES}) f JOIN ({_V2_FIGURES}) b
                   USING (sweep_id, strategy, offload, grad_accum, bucket_mb, placement)
                 WHERE least(f.n, b.n) < 5 AND b.lo > 0) x
           WHERE {_V2_KEY_MATCH.format(t="sensitivity_stats", a="x")}
             AND sensitivity_stats.baseline_link = x.baseline_link""",
        """UPDATE sensitivity_stats SET interval_kind = 'bootstrap95'
           WHERE interval_kind IS NULL AND ci_low IS NOT NULL""",
    ],
    # v4 (GPU paths): NVLS/CollNet use, every clock reason and why a run is excluded,
    # the env the ranks started with, the one-GPU rehearsal. Older runs keep NULL there, except
    # ranks_per_gpu: every run before v4 had one rank per GPU (or CPU bundle).
    4: [
        *(
            f"ALTER TABLE runs ADD COLUMN {col}"
            for col in (
                "nvls BOOLEAN",
                "collnet BOOLEAN",
                "clock_reasons VARCHAR",
                "throttle_why VARCHAR",
                "rank_env JSON",
                "ranks_per_gpu INTEGER",
            )
        ),
        "UPDATE runs SET ranks_per_gpu = 1",
        # nccl-tests output imported beside linksweep's own microbenchmark
        "ALTER TABLE link_bench ADD COLUMN source VARCHAR",
        "ALTER TABLE link_bench ADD COLUMN in_place BOOLEAN",
        "ALTER TABLE link_bench ADD COLUMN wrong BIGINT",
        "UPDATE link_bench SET source = 'linksweep'",
        # a v2 database has no link_descriptions yet (v3 created it from TABLES, after the
        # migrations): create it as v4 has it, so the statements below hold for both
        f"CREATE TABLE IF NOT EXISTS link_descriptions ({TABLES['link_descriptions']})",
        "ALTER TABLE link_descriptions ADD COLUMN IF NOT EXISTS rated_source VARCHAR",
        "UPDATE link_descriptions SET rated_source = 'tc' WHERE rated_gbps IS NOT NULL",
    ],
    # v5 (fleet check): a sweep records the nodes placement kept off. The fleet
    # tables are new: created from TABLES.
    5: ["ALTER TABLE sweeps ADD COLUMN excluded_nodes JSON"],
    # v6: a fleet check's driver and heartbeat, so a check whose driver died reads interrupted.
    # A v4 database has no fleet_checks yet (v5 created it from TABLES, after the migrations).
    6: [
        f"CREATE TABLE IF NOT EXISTS fleet_checks ({TABLES['fleet_checks']})",
        "ALTER TABLE fleet_checks ADD COLUMN IF NOT EXISTS driver_pid INTEGER",
        "ALTER TABLE fleet_checks ADD COLUMN IF NOT EXISTS heartbeat_at TIMESTAMPTZ",
    ],
    # v7: the dtype of each collective (comms.dtype) and DDP's gradient dtype as a grid axis
    # (ddp_grad_dtype, a variant key; 'n/a' for ZeRO, where it does not apply). Before v7 DDP
    # always all-reduced its gradients in fp32 (torch's allreduce_hook on fp32 gradients, bf16
    # autocast included), so DDP rows say fp32; a ZeRO run's collectives mixed dtypes the
    # comms logger did not record, so their comms.dtype stays NULL. link_model(_check) may
    # not exist yet in an old database: created as v7 has them.
    7: [
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS ddp_grad_dtype VARCHAR",
        "ALTER TABLE comms ADD COLUMN IF NOT EXISTS dtype VARCHAR",
        "ALTER TABLE variant_stats ADD COLUMN IF NOT EXISTS ddp_grad_dtype VARCHAR",
        "ALTER TABLE sensitivity_stats ADD COLUMN IF NOT EXISTS ddp_grad_dtype VARCHAR",
        *(
            stmt
            for table in ("link_model", "link_model_check")
            for stmt in (
                f"CREATE TABLE IF NOT EXISTS {table} ({TABLES[table]})",
                f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS ddp_grad_dtype VARCHAR",
            )
        ),
        *(
            f"UPDATE {table} SET ddp_grad_dtype = "
            "CASE WHEN strategy = 'ddp' THEN 'fp32' ELSE 'n/a' END"
            for table in ("runs", *_V7_KEYED)
        ),
        "UPDATE comms SET dtype = 'fp32' WHERE run_id IN "
        "(SELECT run_id FROM runs WHERE strategy = 'ddp')",
    ],
    # v8: FSDP2 (fsdp, hsdp) beside DDP and ZeRO. Two variant keys: grad_sync, the sync
    # frequency in an accumulation window (before v8 DDP always ran no_sync until the last
    # micro-batch: 'last'; ZeRO has no such axis: 'n/a') and reshard_after_forward (FSDP2's
    # blocks; 'n/a' for every strategy before v8). hsdp_shard_size: NULL (no hsdp before v8).
    # comms.group_size: every collective before v8 ran on the world group.
    8: [
        *(
            f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {col} VARCHAR"
            for table in ("runs", *_V7_KEYED)
            for col in ("grad_sync", "reshard_after_forward")
        ),
        *(
            f"UPDATE {table} SET reshard_after_forward = 'n/a', grad_sync = "
            "CASE WHEN strategy = 'ddp' THEN 'last' ELSE 'n/a' END"
            for table in ("runs", *_V7_KEYED)
        ),
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS hsdp_shard_size INTEGER",
        "ALTER TABLE comms ADD COLUMN IF NOT EXISTS group_size INTEGER",
        "UPDATE comms SET group_size = r.world_size FROM runs r WHERE comms.run_id = r.run_id",
    ],
    # v9: the accumulation check per run. Runs before v9 recorded no micro-batch: NULL.
    9: [
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS non_final_bytes JSON",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS promised_non_final_bytes JSON",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS accum_check VARCHAR",
    ],
    # v10: ranks per node. Before v10 spread put one rank on each node, pack all on one.
    10: [
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS ranks_per_node INTEGER",
        "UPDATE runs SET ranks_per_node = CASE WHEN placement = 'spread' THEN 1 "
        "ELSE world_size END",
    ],
    # v11: traced steps. No run before v11 was traced: NULL. New tables traces and
    # trace_overlap (created from TABLES).
    11: [
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS trace_steps INTEGER",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS traced_step_time_s DOUBLE",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS trace_overhead DOUBLE",
    ],
    # v12: which collective each traced interval was: new table trace_collectives (created
    # from TABLES). Runs traced before v12 have no rows there.
    12: [],
    # v14: which optimizer implementation stepped (fused AdamW as Hugging Face Trainer builds
    # it, DeepSpeedCPUAdam with ZeRO offload). Runs before v14 stepped torch.optim.AdamW with
    # torch's default implementation, but no row said so: NULL, which compare reads as unknown
    # (a different workload from a v14 sweep's).
    # v14 also: what a compiled run's graphs did (the compile axis is derived below); NULL for
    # every run before it, none of which compiled.
    14: [
        f"ALTER TABLE runs ADD COLUMN IF NOT EXISTS {col}"
        for col in (
            "optimizer_impl VARCHAR",
            "compile_backend VARCHAR",
            "compile_cache VARCHAR",
            "recompiles_timed INTEGER",
            "recompiles_profiled INTEGER",
            "graph_calls_timed_step DOUBLE",
            "graph_calls_profiled_step DOUBLE",
        )
    ],
    # v15: every rank's trace on rank 0's clock. Per traced rank its trace's base time, its
    # clock's offset to rank 0's with the uncertainty, and its rebased copy; per run the merged
    # trace and the straggler its traces name; new tables trace_wait_instances, trace_wait and
    # trace_lateness (created from TABLES). Runs traced before v15 measured no offset: NULL
    # (their ranks' traces cannot be put on one clock), and have no rows in the new tables.
    # traces is created first where the database has none (one from before v11).
    15: [
        f"CREATE TABLE IF NOT EXISTS traces ({TABLES['traces']})",
        *(
            f"ALTER TABLE traces ADD COLUMN IF NOT EXISTS {col}"
            for col in (
                "base_time_ns BIGINT",
                "clock_offset_ns BIGINT",
                "clock_uncertainty_ns BIGINT",
                "rebased_path VARCHAR",
            )
        ),
        *(
            f"ALTER TABLE runs ADD COLUMN IF NOT EXISTS {col}"
            for col in (
                "merged_trace_path VARCHAR",
                "straggler_rank INTEGER",
                "straggler_why VARCHAR",
            )
        ),
    ],
    # v16: the leave-one-link-out check says how far each prediction extrapolates, gives its
    # interval (bootstrap joined with monotonicity: analysis/linkmodel.py) and whether the
    # measured step time fell inside. Checks stored before v16: NULL until the group's model is
    # refreshed (a resumed sweep refreshes every group).
    16: [
        f"ALTER TABLE link_model_check ADD COLUMN IF NOT EXISTS {col}"
        for col in (
            "predicted_step_ci_low_s DOUBLE",
            "predicted_step_ci_high_s DOUBLE",
            "extrapolation DOUBLE",
            "covered BOOLEAN",
        )
    ],
}


def _in(column: str, values: Any, sql_type: str | None = None) -> str:
    return f"{column} IN ({', '.join(sql_literal(v, sql_type) for v in values)})"


def fill_sql(axis: catalog.Axis) -> str:
    """A SQL expression of a row's strategy (and of the axes it requires): the value a run of
    that strategy had before ``axis`` existed, as :func:`workloads.catalog.filled` reads it. Per
    strategy ``catalog.default`` (a strategy's own default shows); where the axis does not apply
    (another family or strategy, or ``requires`` not met) its placeholder ``axis.na``; a
    strategy the catalog does not know takes the axis's default where the axis applies to every
    strategy."""
    universal = axis.families is None and axis.strategies is None
    fallback = axis.default if universal else axis.na
    clauses = []
    if axis.requires is not None:
        other, values = axis.requires
        met = _in(other, values, catalog.axis(other).sql_type)
        clauses.append(
            f"WHEN NOT coalesce({met}, false) THEN {sql_literal(axis.na, axis.sql_type)}"
        )
    by_value: dict[Any, list[str]] = {}
    for name in catalog.names():
        by_value.setdefault(catalog.default(axis.name, name), []).append(name)
    for value, names in by_value.items():
        if value != fallback:
            clauses.append(
                f"WHEN {_in('strategy', names)} THEN {sql_literal(value, axis.sql_type)}"
            )
    fallback_sql = sql_literal(fallback, axis.sql_type)
    return f"CASE {' '.join(clauses)} ELSE {fallback_sql} END" if clauses else fallback_sql


def axis_statements(axis: catalog.Axis) -> list[str]:
    """The derived step of one axis: per table keyed by variant whose key holds it, add its
    column, set every old row (:func:`fill_sql`; an axis ``renamed_from`` an old column maps the
    old column's values first), and drop the old column. The old column is a key column of
    every such table (every axis's column is, since the step that added it), so it is there to
    read; views name it until ``db.py`` recreates them after the migrations, which DuckDB
    allows (a view is bound when read)."""
    fill = fill_sql(axis)
    if axis.renamed_from is not None:
        old, mapping = axis.renamed_from
        whens = " ".join(
            f"WHEN {sql_literal(k)} THEN {sql_literal(v, axis.sql_type)}"
            for k, v in mapping.items()
        )
        fill = f"CASE {old} {whens} ELSE {fill} END"
    out = []
    for table in (t for t in schema.VARIANT_TABLES if axis.name in schema.key_of(t)):
        out += [
            f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {axis.name} {axis.sql_type}",
            f"UPDATE {table} SET {axis.name} = {fill} WHERE {axis.name} IS NULL",
        ]
        if axis.renamed_from is not None:
            out.append(f"ALTER TABLE {table} DROP COLUMN IF EXISTS {axis.renamed_from[0]}")
    return out


AXES_BY_HAND_UNTIL = 12
"""The last version whose axes the hand-written steps migrate (v7 ``ddp_grad_dtype``, v8
``grad_sync`` and ``reshard_after_forward``); every axis with a later ``since`` is derived. Fixed:
``catalog.BASE_SCHEMA_VERSION`` (raised to 14 by v14's runs column, 15 by v15's clocks, 16 by v16's link model check) rises with a hand-written
step that no axis makes, and an axis added before that rise keeps its derived step."""


def derived() -> dict[int, list[str]]:
    """version -> the statements of the axes the catalog adds after the hand-written ones (in
    the catalog's order, so an axis another requires is filled first)."""
    out: dict[int, list[str]] = {}
    for axis in catalog.AXES.values():
        if axis.since > AXES_BY_HAND_UNTIL:
            out.setdefault(axis.since, []).extend(axis_statements(axis))
    return out


def migrations() -> dict[int, list[str]]:
    """version -> every statement of that step, hand-written first, then derived; one entry per
    version from 2 to the catalog's schema version (an empty list where nothing changed)."""
    historic, extra = _HISTORIC, derived()
    return {
        v: [*historic.get(v, []), *extra.get(v, [])] for v in range(2, catalog.schema_version() + 1)
    }


MIGRATIONS: dict[int, list[str]] = migrations()
"""version -> SQL statements that bring a database from version-1 to version (the catalog as it
was at import, a plugin's axes included)."""
