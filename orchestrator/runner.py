"""The sweep driver: plan -> for each run: Ray executes, the store records -> statistics.

The driver is the only DuckDB writer. Each run is stored in one transaction as soon as it ends,
so Ctrl-C or a crash keeps every finished run. A failed run is a row (status ``failed`` and the
error text) and the sweep goes on. Row building and statistics are pure functions.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import socket
from dataclasses import dataclass

from orchestrator import stats
from orchestrator.comm_model import busbw_factor, expected_comm
from orchestrator.planner import PlannedRun, Variant, check_capacity, plan_runs, rank_resources
from orchestrator.spec import SweepSpec

NCCL_DEBUG_DEFAULTS = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH,ENV"}


def new_sweep_id(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def run_id_for(sweep_id: str, seq: int) -> str:
    return f"{sweep_id}-r{seq:04d}"


def run_env(spec: SweepSpec, link: str, run_id: str, cpus_per_rank: int) -> dict[str, str]:
    """Env for every rank of a run: the link's variables, plus NCCL logging unless the link sets
    its own (the user's value wins), plus thread counts matching the rank's CPU share."""
    env = {k: v for k, v in NCCL_DEBUG_DEFAULTS.items()}
    env["NCCL_DEBUG_FILE"] = f"/tmp/linksweep-nccl-{run_id}-%h-%p.log"
    env["OMP_NUM_THREADS"] = str(max(1, cpus_per_rank))
    env["TOKENIZERS_PARALLELISM"] = "false"
    env.update(spec.links[link])
    return env


def run_config(spec: SweepSpec, v: Variant, run_id: str, nvme_dir: str | None) -> dict:
    """The plain dict a rank receives: everything it needs, nothing it must look up."""
    from orchestrator.ds_config import deepspeed_config

    cfg = {
        "run_id": run_id,
        "strategy": v.strategy,
        "grad_accum": v.grad_accum,
        "bucket_mb": v.bucket_mb,
        "offload": v.offload,
        "model": spec.model,
        "dataset": spec.dataset,
        "precision": spec.precision,
        "seq_len": spec.seq_len,
        "micro_batch_size": spec.micro_batch_size,
        "steps": spec.steps,
        "warmup_steps": spec.warmup_steps,
        "seed": spec.seed,
        "lr": 1e-3,
        "profile_steps": 1,
        "pg_timeout_s": min(600.0, spec.run_timeout_s),
        "nvme_dir": nvme_dir,
        "ds_config": None,
    }
    if v.strategy != "ddp":
        cfg["ds_config"] = deepspeed_config(
            strategy=v.strategy,
            grad_accum=v.grad_accum,
            micro_batch_size=spec.micro_batch_size,
            world_size=spec.world_size,
            precision=spec.precision,
            offload=v.offload,
            bucket_mb=v.bucket_mb,
            nvme_path=nvme_dir,
            comms_logger=True,
        )
    return cfg


@dataclass(frozen=True)
class RunRows:
    run: dict
    steps: list[dict]
    ranks: list[dict]
    comms: list[dict]


def comm_rows(run_id: str, rank: int, records: list[dict], world_size: int) -> list[dict]:
    rows = []
    for c in records:
        per_op_s = c["total_time_s"] / c["count"] if c["count"] else 0.0
        algbw = c["msg_bytes"] / per_op_s / 1e9 if per_op_s > 0 else None
        rows.append(
            {
                "run_id": run_id,
                "rank": rank,
                "op": c["op"],
                "msg_bytes": c["msg_bytes"],
                "count": c["count"],
                "total_time_s": c["total_time_s"],
                "algbw_gbps": algbw,
                "busbw_gbps": algbw * busbw_factor(c["op"], world_size) if algbw else None,
            }
        )
    return rows


def build_rows(
    spec: SweepSpec,
    sweep_id: str,
    planned: PlannedRun,
    run_id: str,
    result,
    started_at: dt.datetime,
    finished_at: dt.datetime,
) -> RunRows:
    """Turn one run's result (scheduler.RunResult) into table rows. Pure."""
    v = planned.variant
    records = result.rank_records
    status = "ok" if result.error is None else "failed"
    first = records[0] if records else {}
    steps, ranks, comms = [], [], []
    for rec in records:
        for s in rec["steps"]:
            steps.append({"run_id": run_id, "rank": rec["rank"], **s})
        node = next((n for n in result.nodes if n["rank"] == rec["rank"]), {})
        ranks.append(
            {
                "run_id": run_id,
                "rank": rec["rank"],
                "node_id": node.get("node_id"),
                "hostname": node.get("hostname"),
                "local_rank": rec.get("local_rank"),
                "device": rec.get("device"),
                "peak_mem_bytes": rec.get("peak_mem_bytes"),
            }
        )
        comms.extend(comm_rows(run_id, rec["rank"], rec.get("comms", []), spec.world_size))

    comm_bytes = None
    if first.get("profile_steps"):
        per_rank = [
            sum(c["msg_bytes"] * c["count"] for c in rec["comms"]) / rec["profile_steps"]
            for rec in records
        ]
        comm_bytes = max(per_rank)
    expectation = None
    n_params = first.get("n_params")
    if n_params and spec.world_size > 1:
        bytes_per_param = 2 if spec.precision == "bf16" and v.strategy != "ddp" else 4
        expectation = expected_comm(v.strategy, v.grad_accum, n_params * bytes_per_param, spec.world_size)
    startup = None
    if result.actors_created_wall and first.get("first_step_wall"):
        startup = max(r["first_step_wall"] for r in records) - result.actors_created_wall
    run = {
        "run_id": run_id,
        "sweep_id": sweep_id,
        "seq": planned.seq,
        "strategy": v.strategy,
        "offload": v.offload,
        "grad_accum": v.grad_accum,
        "bucket_mb": v.bucket_mb,
        "link": v.link,
        "link_env": spec.links[v.link],
        "placement": v.placement,
        "world_size": spec.world_size,
        "model": spec.model,
        "n_params": n_params,
        "precision": spec.precision,
        "seq_len": spec.seq_len,
        "micro_batch_size": spec.micro_batch_size,
        "steps": spec.steps,
        "warmup_steps": spec.warmup_steps,
        "repeat": planned.repeat,
        "backend": first.get("backend"),
        "status": status,
        "error": result.error,
        "started_at": started_at,
        "finished_at": finished_at,
        "startup_s": startup,
        "nodes": result.nodes,
        "gpu_visibility": _gpu_visibility(result.nodes),
        "data_source": first.get("data_source"),
        "tokenizer": first.get("tokenizer"),
        "peak_mem_bytes": max((r.get("peak_mem_bytes") or 0 for r in records), default=None),
        "comm_bytes_per_step": comm_bytes,
        "expected_comm_bytes_per_step": expectation.msg_bytes_per_step if expectation else None,
        "comm_note": expectation.note if expectation else None,
        "variant": v.to_dict(),
    }
    return RunRows(run, steps, ranks, comms)


def _gpu_visibility(nodes: list[dict]) -> str:
    from orchestrator.scheduler import GPU_VISIBILITY

    if any(n.get("visible_gpus") for n in nodes):
        return GPU_VISIBILITY
    return "cpu: no GPUs assigned"


def refresh_stats(store, sweep_id: str, spec: SweepSpec) -> None:
    """Recompute the sweep's variant figures and link slowdowns (bootstrap CIs) from stored runs.

    Failed and throttled runs are counted as excluded, never deleted.
    """
    cols, rows = store.query(
        "SELECT strategy, offload, grad_accum, bucket_mb, link, placement, status, "
        "coalesce(throttled, false), median_step_time_s FROM run_summary WHERE sweep_id = ?",
        [sweep_id],
    )
    groups: dict[tuple, dict] = {}
    for strategy, offload, ga, bucket, link, placement, status, throttled, figure in rows:
        g = groups.setdefault((strategy, offload, ga, bucket, link, placement), {"ok": [], "n": 0})
        g["n"] += 1
        if status == "ok" and not throttled and figure is not None:
            g["ok"].append(figure)
    variant_rows = []
    for key, g in groups.items():
        med = lo = hi = None
        if g["ok"]:
            med = stats.median(g["ok"])
            lo, hi = stats.bootstrap_median_ci(g["ok"], seed=spec.seed)
        variant_rows.append(
            dict(zip(("strategy", "offload", "grad_accum", "bucket_mb", "link", "placement"), key))
            | {
                "sweep_id": sweep_id,
                "n_runs": g["n"],
                "n_excluded": g["n"] - len(g["ok"]),
                "median_step_time_s": med,
                "ci_low_s": lo,
                "ci_high_s": hi,
            }
        )
    base = spec.baseline
    sens_rows = []
    for (strategy, offload, ga, bucket, link, placement), g in groups.items():
        if link == base:
            continue
        b = groups.get((strategy, offload, ga, bucket, base, placement))
        if not b or not b["ok"] or not g["ok"]:
            continue
        ratio, lo, hi = stats.bootstrap_ratio_ci(g["ok"], b["ok"], seed=spec.seed)
        sens_rows.append(
            {
                "sweep_id": sweep_id,
                "strategy": strategy,
                "offload": offload,
                "grad_accum": ga,
                "bucket_mb": bucket,
                "placement": placement,
                "link": link,
                "baseline_link": base,
                "slowdown": ratio,
                "ci_low": lo,
                "ci_high": hi,
            }
        )
    store.replace_rows("variant_stats", {"sweep_id": sweep_id}, variant_rows)
    store.replace_rows("sensitivity_stats", {"sweep_id": sweep_id}, sens_rows)


def sweep_row(spec: SweepSpec, sweep_id: str, address: str, n_runs: int) -> dict:
    from orchestrator.provenance import git_info, versions

    sha, dirty = git_info()
    return {
        "sweep_id": sweep_id,
        "name": spec.name,
        "spec": spec.to_json_dict(),
        "started_at": dt.datetime.now(dt.timezone.utc),
        "status": "running",
        "git_sha": sha,
        "git_dirty": dirty,
        "versions": versions(),
        "ray_address": address,
        "n_runs_planned": n_runs,
        "driver_host": socket.gethostname(),
    }


def nvme_dir_for(spec: SweepSpec, v: Variant, run_id: str) -> str | None:
    return os.path.join(spec.nvme_path, run_id) if v.offload == "nvme" else None


def store_run(store, rows: RunRows) -> None:
    with store.transaction():
        store.insert("runs", [rows.run])
        store.insert("steps", rows.steps)
        store.insert("ranks", rows.ranks)
        store.insert("comms", rows.comms)


def check_cluster(spec: SweepSpec) -> dict[str, float]:
    """Capacity check against the connected cluster; returns one rank's bundle."""
    from orchestrator.scheduler import cluster_nodes

    nodes = cluster_nodes()
    check_capacity(spec, nodes)
    return rank_resources(nodes)


def dumps(obj) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


def execute_sweep(spec: SweepSpec, store, address: str, bundle: dict[str, float], ui) -> str:
    """Run every planned run in order, storing each as it ends. Returns the sweep id.

    ``ui`` receives progress callbacks (see orchestrator/ui.py). KeyboardInterrupt marks the sweep
    ``interrupted`` and re-raises; finished runs are already stored.
    """
    import shutil

    from orchestrator import scheduler

    planned = plan_runs(spec)
    sweep_id = new_sweep_id()
    with store.transaction():
        store.insert("sweeps", [sweep_row(spec, sweep_id, address, len(planned))])
    ui.sweep_started(spec, sweep_id, len(planned))
    board = scheduler.ProgressBoard.remote()
    cpus = int(bundle.get("CPU", 1))
    status = "ok"
    try:
        for p in planned:
            run_id = run_id_for(sweep_id, p.seq)
            nvme_dir = nvme_dir_for(spec, p.variant, run_id)
            cfg = run_config(spec, p.variant, run_id, nvme_dir)
            ui.run_started(p, run_id)
            started = dt.datetime.now(dt.timezone.utc)
            try:
                result = scheduler.execute_run(
                    cfg,
                    spec.world_size,
                    p.variant.placement,
                    run_env(spec, p.variant.link, run_id, cpus),
                    bundle,
                    spec.run_timeout_s,
                    board=board,
                    on_tick=lambda: ui.tick(scheduler.poll(board)),
                )
            finally:
                if nvme_dir:
                    shutil.rmtree(nvme_dir, ignore_errors=True)
            rows = build_rows(
                spec, sweep_id, p, run_id, result, started, dt.datetime.now(dt.timezone.utc)
            )
            store_run(store, rows)
            refresh_stats(store, sweep_id, spec)
            if rows.run["status"] != "ok":
                status = "failed"
            ui.run_finished(p, rows.run)
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        store.update(
            "sweeps",
            {"sweep_id": sweep_id},
            {"status": status, "finished_at": dt.datetime.now(dt.timezone.utc)},
        )
        ui.sweep_finished(sweep_id, status)
    return sweep_id


__all__ = [
    "build_rows",
    "check_cluster",
    "new_sweep_id",
    "plan_runs",
    "refresh_stats",
    "run_config",
    "run_env",
    "run_id_for",
    "store_run",
    "sweep_row",
]
