"""The database schema, in one place, with its version: tables, views and migrations.

Pure data (SQL text); ``orchestrator/store/db.py`` applies it. Figures (run, variant, slowdown)
are computed by ``orchestrator/stats.py`` and stored in ``runs``, ``variant_stats`` and
``sensitivity_stats``; the views select them and add nothing but joins and renames, except
``step_times`` (per-step max over ranks, for reading step distributions) and ``link_bandwidth``
(the microbenchmark's medians, the one place they are computed).
"""

from __future__ import annotations

SCHEMA_VERSION = 3

TABLES: dict[str, str] = {
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
        heartbeat_at TIMESTAMPTZ     -- the driver's last sign of life (store/liveness.py)
    """,
    "runs": """
        run_id VARCHAR PRIMARY KEY,
        sweep_id VARCHAR,
        seq INTEGER,                 -- execution order within the sweep (interleaved repeats)
        strategy VARCHAR,
        offload VARCHAR,
        grad_accum INTEGER,
        bucket_mb INTEGER,
        link VARCHAR,
        link_env JSON,
        placement VARCHAR,
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
        nvme_swap_files INTEGER,     -- files DeepSpeed had written under nvme_path (offload nvme)
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
        -- the run's figures (orchestrator/stats.py run_figures; NULL for a failed run)
        n_steps INTEGER,             -- timed steps
        median_step_time_s DOUBLE,   -- median over timed steps of the max over ranks
        p10_step_time_s DOUBLE,
        p90_step_time_s DOUBLE,
        samples_per_s DOUBLE,        -- samples of all ranks / sum of step times
        tokens_per_s DOUBLE,
        attempt INTEGER,             -- 1, or 2+ for a failed run retried by --retry-failed
        superseded_by VARCHAR        -- a failed run retried later: the retry's run_id
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
        busbw_gbps DOUBLE
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
        error VARCHAR
    """,
    "variant_stats": """
        sweep_id VARCHAR,
        strategy VARCHAR,
        offload VARCHAR,
        grad_accum INTEGER,
        bucket_mb INTEGER,
        link VARCHAR,
        placement VARCHAR,
        n_runs INTEGER,
        n_excluded INTEGER,
        median_step_time_s DOUBLE,
        ci_low_s DOUBLE,
        ci_high_s DOUBLE,
        -- medians over the variant's included runs (peak_mem_bytes: max)
        samples_per_s DOUBLE,
        tokens_per_s DOUBLE,
        comm_bytes_per_step DOUBLE,
        expected_comm_bytes_per_step DOUBLE,
        predicted_comm_s_per_step DOUBLE,
        peak_mem_bytes BIGINT
    """,
    "sensitivity_stats": """
        sweep_id VARCHAR,
        strategy VARCHAR,
        offload VARCHAR,
        grad_accum INTEGER,
        bucket_mb INTEGER,
        placement VARCHAR,
        link VARCHAR,
        baseline_link VARCHAR,
        slowdown DOUBLE,
        ci_low DOUBLE,
        ci_high DOUBLE
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
}

VIEWS: dict[str, str] = {
    # Per step: the slowest rank sets the pace (max over ranks), warmup excluded. For reading and
    # plotting step distributions; the run figures themselves are computed once, by
    # orchestrator/stats.py, and stored in runs (tests check the two agree).
    "step_times": """
        SELECT run_id, step, max(step_time_s) AS step_time_s,
               sum(samples) AS samples, sum(tokens) AS tokens, avg(loss) AS loss
        FROM steps WHERE NOT warmup GROUP BY run_id, step
    """,
    "run_summary": """
        SELECT run_id, sweep_id, seq, strategy, offload, grad_accum, bucket_mb,
               link, placement, world_size, model, precision, "repeat", backend,
               status, throttled, link_class, effective_transport, link_check,
               coalesce(n_steps, 0) AS n_steps, median_step_time_s, p10_step_time_s,
               p90_step_time_s, samples_per_s, tokens_per_s,
               comm_bytes_per_step, expected_comm_bytes_per_step,
               predicted_comm_s_per_step, peak_mem_bytes, startup_s
        FROM runs
    """,
    "variant_summary": """
        SELECT sweep_id, strategy, offload, grad_accum, bucket_mb, link, placement,
               n_runs, n_excluded, median_step_time_s, ci_low_s, ci_high_s,
               samples_per_s, tokens_per_s, comm_bytes_per_step, expected_comm_bytes_per_step,
               predicted_comm_s_per_step, peak_mem_bytes
        FROM variant_stats
    """,
    "link_sensitivity": """
        SELECT sweep_id, strategy, offload, grad_accum, bucket_mb, placement, link, baseline_link,
               slowdown, ci_low, ci_high
        FROM sensitivity_stats
    """,
    # The link microbenchmark's figure per (link, placement, collective, size): medians over
    # iterations. Computed here only; the driver prices communication from this view.
    "link_bandwidth": """
        SELECT sweep_id, link, placement, backend, world_size, op AS collective, msg_bytes,
               count(*) AS iterations,
               median(time_s) AS time_s,
               median(algbw_gbps) AS algbw_gbps,
               median(busbw_gbps) AS busbw_gbps
        FROM link_bench WHERE status = 'ok'
        GROUP BY ALL
    """,
}

# version -> SQL statements that bring a database from version-1 to version.
MIGRATIONS: dict[int, list[str]] = {
    # v2: figures are computed once, in Python (orchestrator/stats.py), and stored; views select.
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
    # v3: long sweeps (issue 10): driver liveness, retried runs.
    3: [
        "ALTER TABLE sweeps ADD COLUMN driver_pid INTEGER",
        "ALTER TABLE sweeps ADD COLUMN heartbeat_at TIMESTAMPTZ",
        "ALTER TABLE runs ADD COLUMN attempt INTEGER",
        "ALTER TABLE runs ADD COLUMN superseded_by VARCHAR",
    ],
}
