"""The database schema, in one place, with its version: tables and views (the migrations:
``migrations.py``). Pure data (SQL text); ``orchestrator/store/db.py`` applies it. Figures are
computed by ``orchestrator/analysis/stats.py`` and stored in ``runs``, ``variant_stats`` and
``sensitivity_stats``; the views select them and add nothing but joins and renames, except
``step_times`` (per-step max over ranks) and ``link_bandwidth`` (the microbenchmark's medians).

The variant key's columns are the catalog's axes (``workloads/catalog.py``), never typed here:
each table keyed by variant (:data:`VARIANT_TABLES`) holds them where its text says ``@key@``,
and a view lists them where its text says ``@key@`` (or matches on them: ``@same a b@``).
``tables()`` and ``views()`` build the text from the catalog as it is when called (:data:`TABLES`
and :data:`VIEWS`: as it was at import, a plugin's axes included); the schema version is the
catalog's (an axis added after ``catalog.BASE_SCHEMA_VERSION`` moves it, and
``migrations.derived`` adds its column).

One job: what the database holds, column by column, at one version: every table and view.

May import: workloads.catalog.
"""

from __future__ import annotations

import re
from typing import Any

from workloads import catalog

SCHEMA_VERSION = catalog.schema_version()

VARIANT_TABLES = ("runs", "variant_stats", "sensitivity_stats", "link_model", "link_model_check")
"""The tables keyed by variant: each holds every column of the variant key (``link_model``: of
the group key), generated from the catalog where its text says ``@key@``."""
GROUP_TABLES = ("link_model",)
"""Keyed by variant group: a variant on every link (the link model fits across links)."""
_KEY = "@key@"


def variant_key() -> tuple[str, ...]:
    """The variant key's columns in the catalog's order (strategy first, link and placement last)."""
    return catalog.variant_key()


def group_key() -> tuple[str, ...]:
    """The variant key without the link: a variant group, one variant on every link."""
    return tuple(k for k in catalog.variant_key() if k != "link")


def key_of(table: str) -> tuple[str, ...]:
    """The key columns a table keyed by variant holds."""
    return group_key() if table in GROUP_TABLES else variant_key()


def _key_columns(table: str) -> str:
    sep = ",\n        "
    return sep.join(f"{k} {catalog.axis(k).sql_type}" for k in key_of(table)) + ","


def sql_literal(value: Any, sql_type: str | None = None) -> str:
    """A catalog value as a SQL literal of the column's type (None: by the value's own type):
    an integer as itself, text quoted, a boolean as ``true``/``false`` text (how a text axis
    stores it). A value the column cannot hold is a ValueError."""
    if sql_type == "INTEGER" or (sql_type is None and type(value) is int):
        if type(value) is not int:
            raise ValueError(f"{value!r} is not an INTEGER")
        return str(value)
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return "'" + text.replace("'", "''") + "'"


def tables() -> dict[str, str]:
    """Every table's column list, the key columns generated from the catalog as it is now."""
    return {
        name: cols.replace(_KEY, _key_columns(name)) if name in VARIANT_TABLES else cols
        for name, cols in _TABLES.items()
    }


_TABLES: dict[str, str] = {
    "meta": """
        key VARCHAR PRIMARY KEY,
        value VARCHAR
    """,
    "sweeps": """
        sweep_id VARCHAR PRIMARY KEY,
        name VARCHAR,
        spec JSON,
        started_at TIMESTAMPTZ,
        finished_at TIMESTAMPTZ,
        status VARCHAR,              -- running | ok | failed | interrupted
        git_sha VARCHAR,
        git_dirty BOOLEAN,
        versions JSON,
        ray_address VARCHAR,
        n_runs_planned INTEGER,
        driver_host VARCHAR,
        topology_status VARCHAR,
        driver_pid INTEGER,          -- with driver_host: whose sweep this is, while running
        heartbeat_at TIMESTAMPTZ,    -- the driver's last sign of life (store/liveness.py)
        excluded_nodes JSON          -- nodes placement kept off: [{entry, source, node_id, ip,
                                     -- hostname}], node_id NULL when no alive node matched
    """,
    "runs": """
        run_id VARCHAR PRIMARY KEY,
        sweep_id VARCHAR,
        seq INTEGER,                 -- execution order within the sweep (interleaved repeats)
        @key@
        link_env JSON,
        world_size INTEGER,
        model VARCHAR,
        n_params BIGINT,
        precision VARCHAR,
        seq_len INTEGER,
        micro_batch_size INTEGER,
        steps INTEGER,
        warmup_steps INTEGER,
        "repeat" INTEGER,
        backend VARCHAR,
        status VARCHAR,              -- ok | failed
        error VARCHAR,
        started_at TIMESTAMPTZ,
        finished_at TIMESTAMPTZ,
        startup_s DOUBLE,            -- actors created -> first step starts
        nodes JSON,                  -- per rank: node id, hostname, ip, gpu ids
        gpu_visibility VARCHAR,
        data_source VARCHAR,
        tokenizer VARCHAR,
        peak_mem_bytes BIGINT,       -- max over ranks
        comm_bytes_per_step DOUBLE,  -- measured message bytes per optimizer step per rank
        expected_comm_bytes_per_step DOUBLE,
        comm_note VARCHAR,
        nvme_swap_files INTEGER,     -- files DeepSpeed wrote to the ranks' swap folders (nvme)
        predicted_comm_s_per_step DOUBLE,
        link_class VARCHAR,
        effective_transport VARCHAR,
        link_check VARCHAR,          -- ok | mismatch | unknown
        nccl_version VARCHAR,
        telemetry VARCHAR,           -- nvml | absent: <reason>
        max_temp_c DOUBLE,
        mean_power_w DOUBLE,
        min_sm_clock_mhz DOUBLE,
        throttled BOOLEAN,
        hot BOOLEAN,
        variant JSON,
        -- the run's figures (orchestrator/analysis/stats.py run_figures; NULL for a failed run)
        n_steps INTEGER,             -- timed steps
        median_step_time_s DOUBLE,   -- median over timed steps of the max over ranks
        p10_step_time_s DOUBLE,
        p90_step_time_s DOUBLE,
        samples_per_s DOUBLE,        -- samples of all ranks / sum of step times
        tokens_per_s DOUBLE,
        ds_config JSON,              -- ZeRO: the config DeepSpeed parsed, after its defaults
        gpu_name VARCHAR,            -- NVML's name of rank 0's GPU; NULL on CPU
        model_flops_per_step DOUBLE, -- all ranks (orchestrator/analysis/flops.py)
        achieved_tflops_per_gpu DOUBLE,  -- model FLOPs per GPU / median step time / 1e12
        peak_tflops DOUBLE,          -- dense peak per GPU for the run's precision
        peak_source VARCHAR,         -- where peak_tflops comes from, or why there is none
        mfu DOUBLE,                  -- achieved / peak; NULL without a peak (CPU)
        launcher VARCHAR,            -- actors | fork: how the ranks started (v3)
        attempt INTEGER,             -- 1, or 2+ for a failed run retried by --retry-failed
        superseded_by VARCHAR,       -- a failed run retried later: the retry's run_id
        nvls BOOLEAN,                -- NCCL's log shows NVLink SHARP (NVLS) in use (v4)
        collnet BOOLEAN,             -- NCCL's log shows CollNet (in-network reduction) in use
        clock_reasons VARCHAR,       -- every NVML clock event reason seen in the timed steps
        throttle_why VARCHAR,        -- why the run counts as throttled (excluded); NULL if not
        rank_env JSON,               -- env every rank started with on top of its node's (v4)
        ranks_per_gpu INTEGER,       -- 1, or 2: the one-GPU rehearsal (link_class shared-gpu)
        ranks_per_node INTEGER,      -- ranks each node held: pack world_size; spread the
                                     -- sweep's ranks_per_node, else 1 (v10)
        hsdp_shard_size INTEGER,     -- hsdp: ranks per shard group; NULL for the others
        -- the accumulation check (v9): bytes by op the non-final micro-batches sent per step
        non_final_bytes JSON,        -- measured (rank 0, profiled pass)
        promised_non_final_bytes JSON,  -- what the strategy and grad_sync promise
        accum_check VARCHAR,         -- ok | fail: ... | n/a: ... | unchecked: ...
        -- traced steps (trace: {steps: N}, v11; NULL: not traced)
        trace_steps INTEGER,         -- steps traced after the timed ones
        traced_step_time_s DOUBLE,   -- their median (slowest rank per step), under the profiler
        trace_overhead DOUBLE,       -- traced_step_time_s / median_step_time_s
        optimizer_impl VARCHAR,      -- the optimizer that stepped (rank 0's), v14; NULL before
        -- compile: true (v14; NULL for an eager run): workloads/compiling.py
        compile_backend VARCHAR,     -- torch.compile backend (inductor; the suite aot_eager)
        compile_cache VARCHAR,       -- inductor's FX graph cache in the compile step: cold | warm
        recompiles_timed INTEGER,    -- graphs compiled in the timed steps (most of any rank)
        recompiles_profiled INTEGER, -- graphs compiled in the profiled step(s)
        graph_calls_timed_step DOUBLE,     -- compiled-graph calls per timed step (rank 0)
        graph_calls_profiled_step DOUBLE,  -- per profiled step (0: it ran eager, as recorded)
        -- every rank's trace on rank 0's clock (v15; NULL: not traced, or before v15)
        merged_trace_path VARCHAR,   -- <db>.traces/<sweep_id>/<run_id>-merged.json.gz
        straggler_rank INTEGER,      -- the rank the traces name a straggler; NULL: none
        straggler_why VARCHAR        -- the verdict in words (orchestrator/analysis/trace_wait.py)
    """,
    "steps": """
        run_id VARCHAR,
        rank INTEGER,
        step INTEGER,
        warmup BOOLEAN,
        step_time_s DOUBLE,
        samples INTEGER,
        tokens BIGINT,
        loss DOUBLE
    """,
    "ranks": """
        run_id VARCHAR,
        rank INTEGER,
        node_id VARCHAR,
        hostname VARCHAR,
        local_rank INTEGER,
        device VARCHAR,
        peak_mem_bytes BIGINT
    """,
    "comms": """
        run_id VARCHAR,
        rank INTEGER,
        op VARCHAR,
        msg_bytes BIGINT,
        count BIGINT,
        total_time_s DOUBLE,
        algbw_gbps DOUBLE,
        busbw_gbps DOUBLE,
        dtype VARCHAR,               -- the elements' dtype on the link: fp32 | bf16 | ...
        group_size INTEGER           -- ranks of the group it ran on (hsdp: shard or replicate)
    """,
    "nodes": """
        sweep_id VARCHAR,
        node VARCHAR,                -- hostname
        node_id VARCHAR,
        ip VARCHAR,
        cpus DOUBLE,
        gpus DOUBLE,
        topo_text VARCHAR,
        driver_version VARCHAR,
        cuda_version VARCHAR,
        nvml VARCHAR
    """,
    "gpus": """
        sweep_id VARCHAR,
        node VARCHAR,
        gpu_index INTEGER,
        name VARCHAR,
        uuid VARCHAR,
        pci_bus_id VARCHAR,
        memory_total_bytes BIGINT,
        pcie_gen_current INTEGER,
        pcie_gen_max INTEGER,
        pcie_width_current INTEGER,
        pcie_width_max INTEGER,
        power_limit_w DOUBLE,
        power_default_limit_w DOUBLE,
        nvlink_active_count INTEGER
    """,
    "gpu_links": """
        sweep_id VARCHAR,
        node VARCHAR,
        gpu_a VARCHAR,
        gpu_b VARCHAR,
        link VARCHAR
    """,
    "transports": """
        run_id VARCHAR,
        rank INTEGER,
        channel INTEGER,
        peer INTEGER,
        transport VARCHAR,
        detail VARCHAR
    """,
    "nccl_logs": """
        run_id VARCHAR,
        source VARCHAR,              -- 'rank N' (the rank returned it) or 'host:path' (read
                                     -- from the node after a failed or hung run)
        text VARCHAR                 -- NCCL_DEBUG=INFO output, whole (transports parses it)
    """,
    "telemetry": """
        run_id VARCHAR,
        rank INTEGER,
        t_s DOUBLE,
        temp_c DOUBLE,
        power_w DOUBLE,
        sm_clock_mhz DOUBLE,
        reasons BIGINT
    """,
    "link_bench": """
        sweep_id VARCHAR,
        link VARCHAR,
        placement VARCHAR,
        backend VARCHAR,
        world_size INTEGER,
        op VARCHAR,
        msg_bytes BIGINT,
        iteration INTEGER,
        time_s DOUBLE,
        algbw_gbps DOUBLE,
        busbw_gbps DOUBLE,
        status VARCHAR,
        error VARCHAR,
        source VARCHAR,              -- linksweep (our microbenchmark) | nccl-tests (imported) (v4)
        in_place BOOLEAN,            -- nccl-tests: the in-place columns; NULL for linksweep's
        wrong BIGINT                 -- nccl-tests' #wrong (or error) column; NULL: N/A or ours
    """,
    # Traced steps (trace: {steps: N}): each rank's profiler trace, kept as a file beside the
    # database, and what it shows (orchestrator/analysis/trace_overlap.py).
    "traces": """
        run_id VARCHAR,
        rank INTEGER,
        path VARCHAR,                -- <db>.traces/<sweep_id>/<run_id>-rank<r>.json.gz
        bytes BIGINT,                -- compressed
        steps INTEGER,
        -- the rank's clock against rank 0's (workloads/clocks.py; v15, NULL before)
        base_time_ns BIGINT,         -- the trace's baseTimeNanoseconds: ts + base = its wall clock
        clock_offset_ns BIGINT,      -- its clock minus rank 0's; NULL: not measured (one rank)
        clock_uncertainty_ns BIGINT, -- the true offset is within this of clock_offset_ns
        rebased_path VARCHAR         -- <db>.traces/<sweep_id>/<run_id>/rank<r>.json.gz: on rank
                                     -- 0's clock (orchestrator/analysis/trace_merge.py)
    """,
    "trace_overlap": """
        run_id VARCHAR,
        rank INTEGER,
        step INTEGER,                -- the trace's ProfilerStep number; NULL: the whole trace
        rule VARCHAR,                -- cpu (gloo events) | gpu (kernels)
        comm_s DOUBLE,               -- union of communication intervals
        compute_s DOUBLE,            -- union of compute intervals
        overlapped_s DOUBLE,         -- their intersection
        exposed_s DOUBLE,            -- comm_s - overlapped_s: communication nothing hid
        exposed_share DOUBLE         -- exposed_s / comm_s; NULL without communication
    """,
    # Which collective each traced interval was (orchestrator/analysis/trace_collectives.py).
    "trace_collectives": """
        run_id VARCHAR,
        rank INTEGER,
        step INTEGER,                -- the trace's ProfilerStep number; NULL: no step marks
        issued_op VARCHAR,           -- the collective called (c10d); NULL: could not be paired
        ran_as VARCHAR,              -- what the transport ran (gloo's event, NCCL's kernel)
        group_size INTEGER,          -- from the collective recorder; NULL: not laid over
        n INTEGER,                   -- intervals
        msg_bytes BIGINT,            -- summed message bytes (recorder); NULL: not laid over
        busy_s DOUBLE,               -- union of these intervals in the step
        exposed_s DOUBLE             -- of which no compute ran beside
    """,
    # Exposed communication split into waiting for the last rank and moving bytes, from every
    # rank's trace on rank 0's clock (orchestrator/analysis/trace_wait.py; v15): one rank's part
    # in one collective instance (the k-th call of an op in a group within a step).
    "trace_wait_instances": """
        run_id VARCHAR,
        rank INTEGER,
        step INTEGER,                -- the trace's ProfilerStep number; NULL: no step marks
        op VARCHAR,                  -- the collective called (what ran where pairing failed)
        group_ranks VARCHAR,         -- the instance's group's ranks, e.g. 0,1 (hsdp: its subgroup)
        instance INTEGER,            -- k: the k-th call of op in the group within the step
        arrival_s DOUBLE,            -- its interval's start: s after rank 0's base_time_ns
        last_arrival_s DOUBLE,       -- the group's last arrival; NULL: unmatched
        last_rank INTEGER,           -- who arrived last; NULL: unmatched or within uncertainty
        end_s DOUBLE,
        exposed_s DOUBLE,            -- the part of the rank's exposed time this instance owns
        waited_s DOUBLE,             -- of it, before the last arrival
        transfer_s DOUBLE,           -- of it, after: waited_s + transfer_s = exposed_s
        uncertainty_s DOUBLE,        -- how far the split can move with the clocks' uncertainty
        matched BOOLEAN              -- every rank of the group made this call
    """,
    # Per rank and traced step: exposed = waited + transfer (trace_overlap's exposed_s).
    "trace_wait": """
        run_id VARCHAR,
        rank INTEGER,
        step INTEGER,                -- the trace's ProfilerStep number; NULL: no step marks
        exposed_s DOUBLE,
        waited_s DOUBLE,
        transfer_s DOUBLE,
        unmatched_s DOUBLE,          -- of transfer_s, from unmatched instances
        uncertainty_s DOUBLE,
        n_instances INTEGER,
        n_unmatched INTEGER
    """,
    # Per run and rank: how often and by how much it was the last to arrive; the straggler score.
    "trace_lateness": """
        run_id VARCHAR,
        rank INTEGER,
        instances INTEGER,           -- instances it took part in
        times_last INTEGER,          -- of them, those it arrived last at
        share_last DOUBLE,
        mean_lateness_s DOUBLE,      -- its margin over the second-latest, when last
        max_lateness_s DOUBLE,
        lateness_s DOUBLE,           -- total margin when last
        lateness_per_step_s DOUBLE,
        score DOUBLE,                -- lateness per step / median traced step time
        straggler BOOLEAN
    """,
    # Where a run's seconds go (workloads/contract.py PHASES): one row per run x rank x phase
    # for phases timed in the ranks, rank NULL for the driver's (placement, teardown, commit).
    "run_phases": """
        run_id VARCHAR,
        rank INTEGER,                -- NULL: measured by the driver
        phase VARCHAR,
        seconds DOUBLE
    """,
    "variant_stats": """
        sweep_id VARCHAR,
        @key@
        n_runs INTEGER,
        n_excluded INTEGER,
        median_step_time_s DOUBLE,
        ci_low_s DOUBLE,             -- interval of the median; its kind: interval_kind
        ci_high_s DOUBLE,
        interval_kind VARCHAR,       -- range (min-max of the runs, < 5 runs) | bootstrap95
        -- medians over the variant's included runs (peak_mem_bytes: max)
        samples_per_s DOUBLE,
        tokens_per_s DOUBLE,
        comm_bytes_per_step DOUBLE,
        expected_comm_bytes_per_step DOUBLE,
        predicted_comm_s_per_step DOUBLE,
        peak_mem_bytes BIGINT,
        achieved_tflops_per_gpu DOUBLE,
        mfu DOUBLE
    """,
    "sensitivity_stats": """
        sweep_id VARCHAR,
        @key@
        baseline_link VARCHAR,
        slowdown DOUBLE,
        ci_low DOUBLE,               -- interval of the slowdown; its kind: interval_kind
        ci_high DOUBLE,
        interval_kind VARCHAR        -- range (of run-pair ratios, < 5 runs a side) | bootstrap95
    """,
    # What each link of a sweep physically is, recorded when the sweep starts: for the emulated
    # cluster the tc shape `cluster up` recorded; elsewhere what the link's env asks NCCL for.
    # A name for a sweep to compare later ones with (``linksweep baseline set``).
    "baselines": """
        name VARCHAR PRIMARY KEY,
        sweep_id VARCHAR,
        set_at TIMESTAMPTZ,
        note VARCHAR                 -- what the user said of it, or NULL
    """,
    "link_descriptions": """
        sweep_id VARCHAR,
        link VARCHAR,
        kind VARCHAR,                -- emulated | nccl | host
        interface VARCHAR,           -- the interface the env selects (GLOO/NCCL_SOCKET_IFNAME)
        rate VARCHAR,                -- tc rate, e.g. 500mbit; NULL: not shaped or not known
        delay VARCHAR,               -- tc netem delay, e.g. 1ms
        rated_gbps DOUBLE,           -- rate in GB/s (1e9 B/s), comparable with busbw_gbps
        rated_source VARCHAR,        -- where rated_gbps comes from: tc, nvlink, pcie (v4)
        description VARCHAR          -- one line for people
    """,
    # The link model (orchestrator/analysis/linkmodel.py), one row per variant group (all but the link):
    # step_time = compute_s + exposure x predicted_comm_s(link), fitted on the group's links.
    "link_model": """
        sweep_id VARCHAR,
        @key@
        n_links INTEGER,             -- links with included runs (the fit's points)
        n_runs INTEGER,
        n_excluded INTEGER,          -- failed, throttled or without a figure/prediction
        compute_s DOUBLE,            -- step time on an infinitely fast link
        compute_ci_low_s DOUBLE,
        compute_ci_high_s DOUBLE,
        exposure DOUBLE,             -- fraction of predicted communication not hidden
        exposure_ci_low DOUBLE,
        exposure_ci_high DOUBLE,
        residual_s DOUBLE,           -- rms of link medians about the line
        residual_rel DOUBLE,         -- the same relative to the step time
        quality VARCHAR,             -- ok | runs_excluded | poor_fit | no_communication |
                                     -- under_determined | no_prediction
        note VARCHAR
    """,
    # Leave-one-link-out: each link's median step time predicted by the line through the others.
    "link_model_check": """
        sweep_id VARCHAR,
        @key@
        n_runs INTEGER,              -- the link's included runs
        predicted_comm_s DOUBLE,     -- median over them
        measured_step_s DOUBLE,      -- median over them
        predicted_step_s DOUBLE,     -- NULL with fewer than 2 other links
        rel_error DOUBLE,            -- (predicted - measured) / measured
        n_links_fit INTEGER,
        predicted_step_ci_low_s DOUBLE,  -- the prediction's interval: the others' bootstrap
        predicted_step_ci_high_s DOUBLE, -- joined with what monotonicity allows (linkmodel)
        extrapolation DOUBLE,        -- 1 inside the others' range; else how far outside (ratio)
        covered BOOLEAN              -- measured_step_s inside the interval: what the model promises
    """,
    # Where each rank of a run that hit run_timeout_s was stuck, captured before its actors were
    # killed: its Python stack (faulthandler) and, on NCCL, PyTorch's flight-recorder dump.
    "diagnostics": """
        run_id VARCHAR,
        rank INTEGER,
        node_id VARCHAR,
        hostname VARCHAR,
        pid INTEGER,
        kind VARCHAR,                -- timeout
        captured_at TIMESTAMPTZ,
        python_stack VARCHAR,        -- every thread of the rank process (faulthandler)
        nccl_trace VARCHAR,          -- base64 of the NCCL flight recorder's dump, if written
        error VARCHAR                -- why a part could not be captured
    """,
    # The fleet check (linksweep fleet): a row per check, node, measured pair (intra-node: node_b
    # = node_a) and timed stage; suspects are decided in orchestrator/fleet/suspects.py, stored here.
    "fleet_checks": """
        fleet_id VARCHAR PRIMARY KEY,
        started_at TIMESTAMPTZ,
        finished_at TIMESTAMPTZ,
        status VARCHAR,              -- running | ok | failed | interrupted
        ray_address VARCHAR,
        driver_host VARCHAR,
        driver_pid INTEGER,          -- with driver_host, heartbeat_at: as sweeps (liveness.py)
        heartbeat_at TIMESTAMPTZ,
        git_sha VARCHAR,
        git_dirty BOOLEAN,
        versions JSON,
        sweep_file VARCHAR,          -- --sweep: its links were checked; NULL: the default network
        links JSON,                  -- [{name, env}] in the order checked
        pairs_mode VARCHAR,          -- all | ring | sample:K
        max_mb DOUBLE,               -- MiB: the all_reduce size every busbw is measured at
        rule JSON,                   -- the suspect rule's parameters (docs/fleet.md)
        n_nodes INTEGER,
        n_rounds INTEGER,            -- inter-node rounds per link
        skipped_nodes JSON,          -- alive nodes with nothing to run on (a CPU-less head)
        wall_s DOUBLE,
        n_suspects INTEGER,
        notes JSON,                  -- what the rule could not judge, and why
        error VARCHAR
    """,
    "fleet_nodes": """
        fleet_id VARCHAR,
        node_id VARCHAR,
        ip VARCHAR,
        hostname VARCHAR,
        cpus DOUBLE,
        gpus DOUBLE,
        gpu_names VARCHAR,
        compute_tokens_per_s DOUBLE, -- the compute probe: gpt2 on one rank, median timed step
        compute_device VARCHAR,
        compute_model VARCHAR,
        compute_status VARCHAR,      -- ok | failed
        compute_error VARCHAR,
        health JSON,                 -- per GPU: clock reasons, PCIe now/max, ECC, clocks, temp;
                                     -- on a CPU node the CPU facts
        health_note VARCHAR,         -- what applies here ("no GPU: NVML checks do not apply")
        suspect BOOLEAN,
        why VARCHAR                  -- every reason, '; '-joined
    """,
    "fleet_pairs": """
        fleet_id VARCHAR,
        link VARCHAR,                -- the sweep file's link name, or 'default'
        kind VARCHAR,                -- intra (node_b = node_a) | inter
        round INTEGER,               -- inter: the tournament round (0-based); intra: NULL
        node_a VARCHAR,
        node_b VARCHAR,
        world_size INTEGER,
        backend VARCHAR,
        ifname VARCHAR,              -- the interface gloo was bound to (CPU ranks)
        msg_bytes BIGINT,
        time_s DOUBLE,               -- median over timed iterations of the max over ranks
        busbw_gbps DOUBLE,           -- measured again when first slow: the better of the two
        first_busbw_gbps DOUBLE,     -- the first measurement, when it was measured again
        status VARCHAR,              -- ok | failed
        error VARCHAR,
        slow BOOLEAN,                -- below the rule's bound
        suspect BOOLEAN,             -- slow and not explained by a suspect node
        why VARCHAR
    """,
    "fleet_rounds": """
        fleet_id VARCHAR,
        link VARCHAR,
        kind VARCHAR,                -- start | intra | inter | recheck | compute | health
        round INTEGER,
        n_pairs INTEGER,
        wall_s DOUBLE
    """,
}


def _view_key(marker: re.Match) -> str:
    """A view's ``@key@`` (the key columns), ``@key r@`` (each as ``r.column``) or ``@same a
    b@`` (``a`` and ``b`` agree on every column of the group key), from the catalog."""
    word, *names = marker[1].split()
    if word == "same":
        a, b = names
        return " AND ".join(f"{a}.{c} IS NOT DISTINCT FROM {b}.{c}" for c in group_key())
    return ", ".join(f"{names[0]}.{c}" if names else c for c in variant_key())


def views() -> dict[str, str]:
    """Every view's SELECT, the key columns listed from the catalog as it is now."""
    return {
        name: re.sub(r"@((?:key|same)[a-z ]*)@", _view_key, sql) for name, sql in _VIEWS.items()
    }


_VIEWS: dict[str, str] = {
    # Per step: the slowest rank sets the pace (max over ranks), warmup excluded; for plots. The
    # run figures are computed once, by orchestrator/analysis/stats.py, and stored in runs (tested equal).
    "step_times": """
        SELECT run_id, step, max(step_time_s) AS step_time_s,
               sum(samples) AS samples, sum(tokens) AS tokens, avg(loss) AS loss
        FROM steps WHERE NOT warmup GROUP BY run_id, step
    """,
    "run_summary": """
        SELECT run_id, sweep_id, seq, @key@, world_size,
               model, precision, "repeat", backend,
               status, throttled, link_class, effective_transport, link_check,
               coalesce(n_steps, 0) AS n_steps, median_step_time_s, p10_step_time_s,
               p90_step_time_s, samples_per_s, tokens_per_s, comm_bytes_per_step,
               expected_comm_bytes_per_step, predicted_comm_s_per_step, peak_mem_bytes,
               startup_s, comm_note, gpu_name, model_flops_per_step, achieved_tflops_per_gpu,
               peak_tflops, peak_source, mfu, accum_check
        FROM runs
    """,
    "variant_summary": """
        SELECT sweep_id, @key@, n_runs, n_excluded, median_step_time_s, ci_low_s, ci_high_s,
               interval_kind, samples_per_s, tokens_per_s, comm_bytes_per_step,
               expected_comm_bytes_per_step, predicted_comm_s_per_step, peak_mem_bytes,
               achieved_tflops_per_gpu, mfu
        FROM variant_stats
    """,
    "link_sensitivity": """
        SELECT sweep_id, @key@, baseline_link, slowdown, ci_low, ci_high, interval_kind
        FROM sensitivity_stats
    """,
    # The link microbenchmark's figure per (link, placement, collective, size, source,
    # in-place): medians over iterations. Computed here only; the driver prices communication
    # from this view (linksweep's own rows only). source: linksweep (our microbenchmark) or
    # nccl-tests (imported: its own printed figures, one row per size, or per repeat of a size);
    # in_place: nccl-tests' in-place columns (NULL for linksweep's rows). The two sources and the
    # two nccl-tests placements never pool: each is its own group.
    "link_bandwidth": """
        SELECT sweep_id, link, placement, backend, world_size, op AS collective, msg_bytes,
               coalesce(source, 'linksweep') AS source, in_place,
               count(*) AS iterations,
               median(time_s) AS time_s,
               median(algbw_gbps) AS algbw_gbps,
               median(busbw_gbps) AS busbw_gbps
        FROM link_bench WHERE status = 'ok'
        GROUP BY ALL
    """,
    # Every link of a sweep described: its recorded shape, its measured all_reduce busbw at the
    # largest message the microbenchmark sent, that busbw as a share of the rated rate (both
    # GB/s one way), and the topology class and transport its runs saw.
    "link_overview": """
        SELECT d.sweep_id, d.link, d.kind, d.interface, d.rate, d.delay, d.rated_gbps,
               d.rated_source, d.description, bw.msg_bytes AS measured_msg_bytes,
               bw.busbw_gbps AS measured_busbw_gbps,
               bw.busbw_gbps / nullif(d.rated_gbps, 0) AS busbw_share,
               r.link_classes, r.transports
        FROM link_descriptions d
        LEFT JOIN (SELECT sweep_id, link, max(msg_bytes) AS msg_bytes,
                          arg_max(busbw_gbps, msg_bytes) AS busbw_gbps
                   FROM link_bandwidth
                   WHERE collective = 'all_reduce' AND source = 'linksweep'
                   GROUP BY sweep_id, link) bw USING (sweep_id, link)
        LEFT JOIN (SELECT sweep_id, link,
                          string_agg(DISTINCT link_class, ', ') AS link_classes,
                          string_agg(DISTINCT effective_transport, ', ') AS transports
                   FROM runs GROUP BY sweep_id, link) r USING (sweep_id, link)
    """,
    # Measured against fitted: per variant and link, the exposed communication seconds per
    # step its traces measured (per traced step the slowest rank's, median over steps, then
    # median and range over runs) beside the link model's fitted exposure x the communication
    # time it predicts on that link (and that product at the exposure's interval ends).
    "trace_exposure": """
        WITH per_step AS (
            SELECT run_id, step, max(exposed_s) AS exposed_s, max(comm_s) AS comm_s
            FROM trace_overlap WHERE step IS NOT NULL GROUP BY run_id, step
        ), per_run AS (
            SELECT r.sweep_id, @key r@, r.run_id,
                   median(p.exposed_s) AS exposed_s, median(p.comm_s) AS comm_s
            FROM per_step p JOIN runs r USING (run_id)
            WHERE r.status = 'ok' AND r.superseded_by IS NULL
            GROUP BY ALL
        ), m AS (
            SELECT sweep_id, @key@, count(*) AS n_runs,
                   median(exposed_s) AS measured_exposed_s, min(exposed_s) AS measured_low_s,
                   max(exposed_s) AS measured_high_s, median(comm_s) AS measured_comm_s
            FROM per_run GROUP BY ALL
        )
        SELECT m.*, c.predicted_comm_s, lm.exposure AS fitted_exposure,
               lm.exposure * c.predicted_comm_s AS fitted_exposed_s,
               lm.exposure_ci_low * c.predicted_comm_s AS fitted_low_s,
               lm.exposure_ci_high * c.predicted_comm_s AS fitted_high_s,
               m.measured_exposed_s - lm.exposure * c.predicted_comm_s AS diff_s,
               lm.quality AS fit_quality
        FROM m
        LEFT JOIN link_model_check c
            ON c.sweep_id = m.sweep_id AND c.link = m.link AND @same c m@
        LEFT JOIN link_model lm ON lm.sweep_id = m.sweep_id AND @same lm m@
    """,
    # Which collectives the traces show exposed: per variant, link and collective (called,
    # run as, group size), per traced step the slowest rank's figures, median over steps, then
    # median and range over runs (as trace_exposure does for the whole step).
    "trace_collective_exposure": """
        WITH per_step AS (
            SELECT run_id, step, issued_op, ran_as, group_size, max(n) AS n,
                   max(msg_bytes) AS msg_bytes, max(busy_s) AS busy_s, max(exposed_s) AS exposed_s
            FROM trace_collectives WHERE step IS NOT NULL GROUP BY ALL
        ), per_run AS (
            SELECT r.sweep_id, @key r@, r.run_id,
                   p.issued_op, p.ran_as, p.group_size, median(p.n) AS n,
                   median(p.msg_bytes) AS msg_bytes, median(p.busy_s) AS busy_s,
                   median(p.exposed_s) AS exposed_s
            FROM per_step p JOIN runs r USING (run_id)
            WHERE r.status = 'ok' AND r.superseded_by IS NULL
            GROUP BY ALL
        )
        SELECT sweep_id, @key@, issued_op, ran_as, group_size, count(*) AS n_runs,
               median(n) AS per_step_n, median(msg_bytes) AS per_step_msg_bytes,
               median(busy_s) AS busy_s, median(exposed_s) AS exposed_s,
               min(exposed_s) AS exposed_low_s, max(exposed_s) AS exposed_high_s
        FROM per_run GROUP BY ALL
    """,
    # Waiting against moving: per variant and link, per traced step the rank that exposed the
    # most communication (its waited and transfer parts, so they add up to its exposed), median
    # over steps, then median over runs; beside the link model's predicted communication time,
    # and which runs' traces named a straggler (trace_wait, runs.straggler_rank; v15).
    "trace_wait_summary": """
        WITH per_step AS (
            SELECT run_id, step, max(exposed_s) AS exposed_s,
                   arg_max(waited_s, exposed_s) AS waited_s,
                   arg_max(transfer_s, exposed_s) AS transfer_s,
                   max(uncertainty_s) AS uncertainty_s
            FROM trace_wait WHERE step IS NOT NULL GROUP BY run_id, step
        ), per_run AS (
            SELECT r.sweep_id, @key r@, r.run_id, r.straggler_rank, r.straggler_why,
                   median(p.exposed_s) AS exposed_s, median(p.waited_s) AS waited_s,
                   median(p.transfer_s) AS transfer_s, median(p.uncertainty_s) AS uncertainty_s
            FROM per_step p JOIN runs r USING (run_id)
            WHERE r.status = 'ok' AND r.superseded_by IS NULL
            GROUP BY ALL
        ), m AS (
            SELECT sweep_id, @key@, count(*) AS n_runs,
                   median(exposed_s) AS exposed_s, median(waited_s) AS waited_s,
                   median(transfer_s) AS transfer_s, median(uncertainty_s) AS uncertainty_s,
                   min(waited_s) AS waited_low_s, max(waited_s) AS waited_high_s,
                   count(straggler_rank) AS n_straggler_runs,
                   string_agg(DISTINCT straggler_rank::VARCHAR, ', ') AS straggler_ranks,
                   arg_min(straggler_why, run_id) AS straggler_why
            FROM per_run GROUP BY ALL
        )
        SELECT m.*, c.predicted_comm_s
        FROM m
        LEFT JOIN link_model_check c
            ON c.sweep_id = m.sweep_id AND c.link = m.link AND @same c m@
    """,
    # Waiting against moving per collective: per variant, link and op, each rank's instances of
    # the op summed per step, the rank exposing the most of it, median over steps and runs.
    "trace_collective_wait": """
        WITH per_rank AS (
            SELECT run_id, step, rank, op, count(*) AS n, sum(exposed_s) AS exposed_s,
                   sum(waited_s) AS waited_s, sum(transfer_s) AS transfer_s
            FROM trace_wait_instances WHERE step IS NOT NULL GROUP BY ALL
        ), per_step AS (
            SELECT run_id, step, op, max(n) AS n, max(exposed_s) AS exposed_s,
                   arg_max(waited_s, exposed_s) AS waited_s,
                   arg_max(transfer_s, exposed_s) AS transfer_s
            FROM per_rank GROUP BY ALL
        ), per_run AS (
            SELECT r.sweep_id, @key r@, r.run_id, p.op, median(p.n) AS n,
                   median(p.exposed_s) AS exposed_s, median(p.waited_s) AS waited_s,
                   median(p.transfer_s) AS transfer_s
            FROM per_step p JOIN runs r USING (run_id)
            WHERE r.status = 'ok' AND r.superseded_by IS NULL
            GROUP BY ALL
        )
        SELECT sweep_id, @key@, op, count(*) AS n_runs, median(n) AS per_step_n,
               median(exposed_s) AS exposed_s, median(waited_s) AS waited_s,
               median(transfer_s) AS transfer_s
        FROM per_run GROUP BY ALL
    """,
    # Every suspect of a fleet check, node or pair, with the addresses to exclude it by
    # (sweep key exclude_nodes, or linksweep run --exclude-suspects FLEET_ID).
    "fleet_suspects": """
        SELECT n.fleet_id, 'node' AS kind, n.node_id, n.ip, n.hostname,
               NULL::VARCHAR AS partner_id, NULL::VARCHAR AS partner_ip,
               NULL::VARCHAR AS link, n.why
        FROM fleet_nodes n WHERE n.suspect
        UNION ALL
        SELECT p.fleet_id, 'pair' AS kind, p.node_a, a.ip, a.hostname, p.node_b, b.ip, p.link,
               p.why
        FROM fleet_pairs p
        LEFT JOIN fleet_nodes a ON a.fleet_id = p.fleet_id AND a.node_id = p.node_a
        LEFT JOIN fleet_nodes b ON b.fleet_id = p.fleet_id AND b.node_id = p.node_b
        WHERE p.suspect
    """,
}


TABLES: dict[str, str] = tables()
VIEWS: dict[str, str] = views()
