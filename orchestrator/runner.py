"""The sweep driver: plan -> for each run: Ray executes, the store records -> statistics.

The driver is the only DuckDB writer. Each run is stored in one transaction as soon as it ends,
so Ctrl-C or a crash keeps every finished run. A failed run is a row (status ``failed`` and the
error text) and the sweep goes on. Row building and statistics are pure functions.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
import socket
from dataclasses import dataclass

from orchestrator import stats
from orchestrator.comm_model import busbw_factor, expected_comm
from orchestrator.planner import (
    PlannedRun,
    Variant,
    check_capacity,
    link_placements,
    plan_runs,
    rank_resources,
)
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
    # Ray starts workers at nice 15; ranks compete with everything else on a shared machine at
    # the priority a bare torchrun would have (bench/bench_overhead.py compares the two).
    env["RAY_worker_niceness"] = "0"
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
            comms_logger=False,  # enabled only for the profiled pass (workloads/ds_comms.py)
        )
    return cfg


@dataclass(frozen=True)
class RunRows:
    run: dict
    steps: list[dict]
    ranks: list[dict]
    comms: list[dict]
    transports: list[dict]
    telemetry: list[dict]


def transport_facts(
    run_id: str, records: list[dict], link_env: dict[str, str], link_class: str
) -> tuple[list[dict], dict]:
    """Rows for ``transports`` and the run's effective_transport / link_check / nccl_version."""
    from orchestrator import nccl_log

    backends = {r.get("backend") for r in records}
    if backends == {"gloo"}:
        return [], {
            "effective_transport": nccl_log.GLOO_TRANSPORT,
            "link_check": "unknown",  # gloo logs no transport choice to verify against
            "nccl_version": None,
        }
    rows, families, version = [], set(), None
    for rec in records:
        log = nccl_log.parse_nccl_log(rec.get("nccl_log") or "")
        version = version or log.nccl_version
        families.update(nccl_log.transport_families(log))
        for line in log.channels:
            rows.append(
                {
                    "run_id": run_id,
                    "rank": rec["rank"],
                    "channel": line.channel,
                    "peer": line.peer,
                    "transport": line.transport,
                    "detail": line.detail,
                }
            )
    fams = sorted(families)
    return rows, {
        "effective_transport": nccl_log.effective_transport(fams) if records else None,
        "link_check": nccl_log.link_check(link_env, fams, link_class) if records else "unknown",
        "nccl_version": version,
    }


def telemetry_facts(run_id: str, records: list[dict]) -> tuple[list[dict], dict]:
    """Rows for ``telemetry`` and the run's summary flags; absent telemetry is said, not faked."""
    from workloads.telemetry import TelemetrySample, summarize

    rows, samples, violations, statuses = [], [], {}, set()
    for rec in records:
        tel = rec.get("telemetry") or {}
        statuses.add(tel.get("status", "absent: not reported"))
        for smp in tel.get("samples", []):
            rows.append({"run_id": run_id, "rank": rec["rank"], **smp})
            samples.append(TelemetrySample(**smp))
        for k, v in tel.get("violation_ns", {}).items():
            violations[f"{rec['rank']}:{k}"] = v
    summary = summarize(samples, violations)
    status = "; ".join(sorted(statuses)) if statuses else None
    return rows, {
        "telemetry": status,
        "max_temp_c": summary.max_temp_c,
        "mean_power_w": summary.mean_power_w,
        "min_sm_clock_mhz": summary.min_sm_clock_mhz,
        "throttled": summary.throttled if summary.available else None,
        "hot": summary.hot if summary.available else None,
    }


def link_class_for(placement: str, nodes: list[dict], topo_links: dict) -> str:
    """The link between the run's GPUs (slowest if they differ); NET across nodes."""
    from orchestrator.topo import run_link_class

    if not nodes:
        return "unknown"
    if placement == "spread":
        return "NET"  # ranks on different nodes talk over the network, GPUs or not
    host = nodes[0].get("hostname")
    gpu_ids = [int(g) for n in nodes for g in (n.get("gpu_ids") or [])]
    return run_link_class(topo_links.get(host, {}), gpu_ids, placement)


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


def comm_expectation(spec: SweepSpec, v: Variant, n_params: int):
    """The analytic bytes per optimizer step (orchestrator/comm_model.py) for this run.

    Psi is in the dtype that travels: DDP reduces fp32 gradients (autocast keeps fp32 master
    grads); DeepSpeed reduces and gathers bf16 models in bf16. ZeRO-3 gathers each parameter in
    forward and again in backward unless its prefetch window (one bucket) covers the whole model,
    in which case DeepSpeed keeps them gathered from forward to backward (measured; see
    comm_model's docstring) - so 1 gather per micro-step for models under one bucket.
    """
    from orchestrator.ds_config import bucket_elements

    bytes_per_param = 2 if spec.precision == "bf16" and v.strategy != "ddp" else 4
    gathers = 2.0
    if v.strategy == "zero3" and n_params <= bucket_elements(v.bucket_mb, spec.precision):
        gathers = 1.0
    return expected_comm(
        v.strategy,
        v.grad_accum,
        n_params * bytes_per_param,
        spec.world_size,
        zero3_gathers_per_micro_step=gathers,
    )


def build_rows(
    spec: SweepSpec,
    sweep_id: str,
    planned: PlannedRun,
    run_id: str,
    result,
    started_at: dt.datetime,
    finished_at: dt.datetime,
    topo_links: dict | None = None,
    bench: dict[tuple[str, int], float] | None = None,
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

    comm_bytes = predicted = None
    if first.get("profile_steps"):
        per_rank = [
            sum(c["msg_bytes"] * c["count"] for c in rec["comms"]) / rec["profile_steps"]
            for rec in records
        ]
        comm_bytes = max(per_rank)
        if bench:
            per_step = [{**c, "count": c["count"] / first["profile_steps"]} for c in first["comms"]]
            predicted = predict_comm_s(per_step, bench)
    expectation = None
    n_params = first.get("n_params")
    if n_params and spec.world_size > 1:
        expectation = comm_expectation(spec, v, n_params)
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
        "predicted_comm_s_per_step": predicted,
        "nvme_swap_files": max((r.get("nvme_swap_files") or 0 for r in records), default=None),
        "variant": v.to_dict(),
    }
    link_class = link_class_for(v.placement, result.nodes, topo_links or {})
    transports, t_facts = transport_facts(run_id, records, spec.links[v.link], link_class)
    telemetry, tel_facts = telemetry_facts(run_id, records)
    run.update({"link_class": link_class, **t_facts, **tel_facts})
    return RunRows(run, steps, ranks, comms, transports, telemetry)


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
            dict(
                zip(
                    ("strategy", "offload", "grad_accum", "bucket_mb", "link", "placement"),
                    key,
                    strict=True,
                )
            )
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
        store.insert("transports", rows.transports)
        store.insert("telemetry", rows.telemetry)


def linkbench_config(spec: SweepSpec, run_id: str, gpu: bool) -> dict:
    max_mb = spec.linkbench_max_mb or (256 if gpu else 16)
    return {
        "run_id": run_id,
        "kind": "linkbench",
        "max_bytes": max_mb * 2**20,
        "pg_timeout_s": min(600.0, spec.run_timeout_s),
    }


def linkbench_rows(sweep_id: str, link: str, placement: str, world_size: int, result) -> list[dict]:
    """One row per (collective, size, timed iteration); a failed benchmark is one failed row."""
    base = {"sweep_id": sweep_id, "link": link, "placement": placement, "world_size": world_size}
    empty = {
        "backend": None,
        "op": None,
        "msg_bytes": None,
        "iteration": None,
        "time_s": None,
        "algbw_gbps": None,
        "busbw_gbps": None,
    }
    if result.error is not None or not result.rank_records:
        return [{**base, **empty, "status": "failed", "error": result.error}]
    rows = []
    for rec in result.rank_records[0]["linkbench"]:  # every rank returns the same records
        if rec.get("skipped_reason"):
            rows.append(
                {
                    **base,
                    **empty,
                    "backend": rec["backend"],
                    "op": rec["op"],
                    "msg_bytes": rec["msg_bytes"],
                    "status": "skipped",
                    "error": rec["skipped_reason"],
                }
            )
            continue
        factor = busbw_factor(rec["op"], world_size)
        for i, t in enumerate(rec["times_s"]):
            algbw = rec["msg_bytes"] / t / 1e9 if t > 0 else None
            rows.append(
                {
                    **base,
                    "backend": rec["backend"],
                    "op": rec["op"],
                    "msg_bytes": rec["msg_bytes"],
                    "iteration": i,
                    "time_s": t,
                    "algbw_gbps": algbw,
                    "busbw_gbps": algbw * factor if algbw is not None else None,
                    "status": "ok",
                    "error": None,
                }
            )
    return rows


def bench_table(rows: list[dict]) -> dict[tuple[str, int], float]:
    """(op, msg_bytes) -> median algbw (GB/s) over iterations, from link_bench rows."""
    by_key: dict[tuple[str, int], list[float]] = {}
    for r in rows:
        if r["status"] == "ok" and r["algbw_gbps"]:
            by_key.setdefault((r["op"], r["msg_bytes"]), []).append(r["algbw_gbps"])
    return {k: stats.median(v) for k, v in by_key.items()}


def predict_comm_s(comms_per_step: list[dict], bench: dict[tuple[str, int], float]) -> float | None:
    """Seconds a step's collectives take at the link's measured bandwidth.

    Each (op, msg_bytes, count per step) is priced at the microbenchmark's algbw for that op at
    the nearest measured size (log scale; beyond the largest size, the largest size's
    bandwidth). time = msg_bytes / algbw, i.e. wire bytes / busbw in nccl-tests' terms.
    """
    import math

    total = 0.0
    for c in comms_per_step:
        sizes = sorted(size for op, size in bench if op == c["op"])
        if not sizes:
            return None
        target = max(1, c["msg_bytes"])
        size = min(sizes, key=lambda s: abs(math.log2(s) - math.log2(target)))
        total += c["count"] * c["msg_bytes"] / (bench[(c["op"], size)] * 1e9)
    return total


def preflight(spec: SweepSpec) -> None:
    """Checks that need this machine, not just the file: NVMe offload's folder and async_io op.

    Raises SpecError (exit 2, nothing run). On a multi-node cluster a worker node can still lack
    libaio; that run then fails with the same actionable message (workloads/strategies.py).
    """
    from orchestrator.spec import SpecError

    if "nvme" not in spec.grid.offload or "zero3" not in spec.grid.strategy:
        return
    errors = []
    try:
        os.makedirs(spec.nvme_path, exist_ok=True)
        probe = os.path.join(spec.nvme_path, ".linksweep-write-test")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as exc:
        errors.append(
            f"nvme_path: {spec.nvme_path!r} is not a writable folder ({exc.strerror}); "
            "allowed: a writable path on a local NVMe disk"
        )
    try:
        from deepspeed.ops.op_builder import AsyncIOBuilder

        compatible = AsyncIOBuilder().is_compatible(verbose=False)
    except Exception as exc:  # noqa: BLE001 - any import/probe failure means not buildable
        compatible = False
        errors.append(f"grid.offload: 'nvme' cannot be checked: {exc}")
    if not compatible:
        errors.append(
            "grid.offload: 'nvme' needs DeepSpeed's async_io op, which cannot be built here: "
            "apt-get install libaio-dev && pip install ninja; allowed offloads without it: "
            "none, cpu"
        )
    if errors:
        raise SpecError(errors)


def check_cluster(spec: SweepSpec) -> dict[str, float]:
    """Capacity check against the connected cluster; returns one rank's bundle."""
    from orchestrator.scheduler import cluster_nodes

    nodes = cluster_nodes()
    check_capacity(spec, nodes)
    return rank_resources(nodes)


def discover_topology(store, sweep_id: str) -> dict:
    """One probe per node: nvidia-smi topo -m and NVML inventory -> nodes, gpus, gpu_links."""
    from orchestrator.discovery import discover_nodes, links_by_node, node_rows

    tables = node_rows(sweep_id, discover_nodes())
    with store.transaction():
        for table, rows in tables.items():
            store.insert(table, rows)
    statuses = sorted({r["nvml"] for r in tables["nodes"]})
    store.update("sweeps", {"sweep_id": sweep_id}, {"topology_status": "; ".join(statuses)})
    return links_by_node(tables["gpu_links"])


def execute_sweep(
    spec: SweepSpec, store, address: str, bundle: dict[str, float], ui, train: bool = True
) -> str:
    """Run every planned run in order, storing each as it ends. Returns the sweep id.

    ``ui`` receives progress callbacks (see orchestrator/ui.py). KeyboardInterrupt marks the sweep
    ``interrupted`` and re-raises; finished runs are already stored.
    """
    import shutil

    from orchestrator import scheduler

    planned = plan_runs(spec) if train else []
    sweep_id = new_sweep_id()
    with store.transaction():
        store.insert("sweeps", [sweep_row(spec, sweep_id, address, len(planned))])
    topo_links = discover_topology(store, sweep_id)
    ui.sweep_started(spec, sweep_id, len(planned))
    board = scheduler.ProgressBoard.remote()
    cpus = int(bundle.get("CPU", 1))
    status = "ok"
    benches: dict[tuple[str, str], dict] = {}
    try:
        if spec.grid.linkbench or not train:
            for link, placement in link_placements(spec):
                run_id = f"{sweep_id}-lb-{link}-{placement}"
                ui.linkbench_started(link, placement)
                result = scheduler.execute_run(
                    linkbench_config(spec, run_id, gpu="GPU" in bundle),
                    spec.world_size,
                    placement,
                    run_env(spec, link, run_id, cpus),
                    bundle,
                    spec.run_timeout_s,
                )
                rows = linkbench_rows(sweep_id, link, placement, spec.world_size, result)
                with store.transaction():
                    store.insert("link_bench", rows)
                benches[(link, placement)] = bench_table(rows)
                ui.linkbench_finished(link, placement, result.error)
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
                spec,
                sweep_id,
                p,
                run_id,
                result,
                started,
                dt.datetime.now(dt.timezone.utc),
                topo_links,
                benches.get((p.variant.link, p.variant.placement)),
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
