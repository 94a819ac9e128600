"""Does linksweep's own cost stay small as runs get bigger and sweeps get longer?

    python bench/bench_scale.py [--only ingest,commit,refresh,sweep] [--runs 12] [--steps 6]
                                [--code DIR] [--json OUT] [--keep]

Four measurements, each printed as a table (and written with ``--json``):

ingest   rows/s of ``Store.insert`` into ``steps``: the columnar path (one Arrow batch) and the
         row-at-a-time ``executemany`` path it replaced (``Store._insert_rows``), in the same
         process on the same machine, so their ratio is what counts. Target >= 200,000 rows/s.
commit   seconds of ``sweep.store_run`` (the run's one transaction: runs, steps, ranks, comms,
         transports, telemetry rows) for a synthetic 64-rank x 1,000-step run (64,000 step rows,
         plus 1,000 telemetry samples per rank), into a database already holding one such run.
         The first insert of a process also pays pyarrow's lazy imports once (shown apart).
         Target < 1 s.
refresh  seconds of ``sweep.refresh_stats`` (figures of one variant group) after a run, with
         10 and with 500 runs stored (groups of 2 links x 5 repeats): it must not grow.
sweep    a 12-run gpt2-tiny sweep under ``linksweep run`` (embedded Ray, 2 ranks, DDP,
         grad_accum 1/4 x links default/no_p2p x 3 repeats): per run, wall (``runs.started_at``
         -> ``finished_at``) minus its timed steps (sum of the slowest rank's step times); sweep
         efficiency = all timed steps / the sweep's wall (``sweeps.started_at`` -> ``finished_at``);
         and the command's wall. ``--code DIR`` runs ``linksweep run`` from another checkout
         (``PYTHONPATH=DIR``), e.g. ``git archive`` of an older commit, for before/after figures.
         With the run-phase table (schema v3) the median seconds per phase are printed too.

The synthetic measurements need no Ray; ``sweep`` starts Ray and gpt2 ranks: run it alone
(``flock /tmp/linksweep-heavy.lock`` on a shared machine).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script from anywhere: import orchestrator, workloads

from orchestrator import stats  # noqa: E402
from orchestrator.planner import Variant  # noqa: E402
from orchestrator.rows import RunRows  # noqa: E402
from orchestrator.spec import parse_spec  # noqa: E402
from orchestrator.store import Q, Reader, Store  # noqa: E402

SWEEP_TIMEOUT_S = 1800


def step_rows(run_id: str, ranks: int, steps: int) -> list[dict]:
    return [
        {
            "run_id": run_id,
            "rank": r,
            "step": s,
            "warmup": s < 3,
            "step_time_s": 0.1 + 1e-6 * s + 1e-7 * r,
            "samples": 2,
            "tokens": 256,
            "loss": 3.0 - 1e-4 * s,
        }
        for r in range(ranks)
        for s in range(steps)
    ]


def synthetic_run(run_id: str, ranks: int = 64, steps: int = 1000) -> RunRows:
    now = dt.datetime.now(dt.timezone.utc)
    run = {
        "run_id": run_id,
        "sweep_id": "bench",
        "seq": 0,
        "strategy": "ddp",
        "link": "default",
        "link_env": {"NCCL_P2P_DISABLE": "1"},
        "world_size": ranks,
        "status": "ok",
        "started_at": now,
        "finished_at": now,
        "nodes": [{"rank": r, "node_id": f"n{r // 8}"} for r in range(ranks)],
        "throttled": False,
        "median_step_time_s": 0.1,
    }
    ranks_rows = [
        {"run_id": run_id, "rank": r, "node_id": f"n{r // 8}", "local_rank": r % 8}
        for r in range(ranks)
    ]
    comms = [
        {"run_id": run_id, "rank": r, "op": "all_reduce", "msg_bytes": 1 << 20, "count": 4}
        for r in range(ranks)
    ]
    telemetry = [
        {"run_id": run_id, "rank": r, "t_s": 0.25 * i, "temp_c": 60.0, "power_w": 300.0}
        for r in range(ranks)
        for i in range(steps)
    ]
    return RunRows(run, step_rows(run_id, ranks, steps), ranks_rows, comms, [], telemetry)


def bench_ingest(work: Path) -> dict:
    rows = step_rows("ingest", 64, 1000)
    with Store(str(work / "ingest.duckdb")) as s:
        with s.transaction():
            s.insert("steps", step_rows("warm", 1, 10))  # pyarrow's lazy imports, once
        t0 = time.perf_counter()
        with s.transaction():
            s.insert("steps", rows)
        fast = time.perf_counter() - t0
        few = rows[:5000]  # the old path at 2k rows/s: 5,000 rows say enough
        t0 = time.perf_counter()
        with s.transaction():
            s._insert_rows("steps", few)
        slow = time.perf_counter() - t0
    out = {
        "columnar_rows_per_s": len(rows) / fast,
        "executemany_rows_per_s": len(few) / slow,
    }
    out["speedup"] = out["columnar_rows_per_s"] / out["executemany_rows_per_s"]
    return out


def bench_commit(work: Path) -> dict:
    from orchestrator.sweep import store_run

    cold = subprocess.run(  # a fresh process: what the first commit of a sweep pays
        [sys.executable, "-c", _COLD_COMMIT, str(work / "cold.duckdb")],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    with Store(str(work / "commit.duckdb")) as s:
        store_run(s, synthetic_run("first"))
        t0 = time.perf_counter()
        big = synthetic_run("second")
        build = time.perf_counter() - t0
        t0 = time.perf_counter()
        store_run(s, big)
        commit = time.perf_counter() - t0
    return {
        "step_rows": len(big.steps),
        "telemetry_rows": len(big.telemetry),
        "commit_s": commit,
        "first_commit_in_fresh_process_s": float(cold.stdout.strip()),
        "building_the_dicts_s": build,
    }


_COLD_COMMIT = """
import sys, time
sys.path.insert(0, ".")
from bench.bench_scale import synthetic_run
from orchestrator.store import Store
from orchestrator.sweep import store_run
run = synthetic_run("cold")
with Store(sys.argv[1]) as s:
    t0 = time.perf_counter()
    store_run(s, run)
    print(time.perf_counter() - t0)
"""


def _refresh_spec():
    return parse_spec(
        {
            "name": "bench-refresh",
            "model": "gpt2-tiny",
            "world_size": 2,
            "links": {"default": {}, "no_p2p": {"NCCL_P2P_DISABLE": "1"}},
            "grid": {"strategy": ["ddp"]},
        }
    )


def _stored_runs(n: int) -> list[dict]:
    """n runs in groups of 2 links x 5 repeats; group g is bucket_mb = g + 1."""
    out = []
    for seq in range(n):
        group, within = divmod(seq, 10)
        out.append(
            {
                "run_id": f"r{seq}",
                "sweep_id": "s",
                "seq": seq,
                "strategy": "ddp",
                "offload": "none",
                "grad_accum": 1,
                "bucket_mb": group + 1,
                "link": "default" if within % 2 == 0 else "no_p2p",
                "placement": "pack",
                "repeat": within // 2 + 1,
                "status": "ok",
                "throttled": False,
                "median_step_time_s": 0.1 * (1 + 0.3 * (within % 2)) + 1e-3 * within,
                "samples_per_s": 20.0,
                "tokens_per_s": 2560.0,
            }
        )
    return out


def bench_refresh(work: Path, repeat: int = 21) -> dict:
    """Median seconds of one refresh with 10 and with 500 runs stored, alternated (10, 500, 10,
    500, ...) so that a neighbour's load hits both."""
    from orchestrator.sweep import refresh_stats

    spec = _refresh_spec()
    stores, variants, times = {}, {}, {}
    try:
        for n in (10, 500):
            s = stores[n] = Store(str(work / f"refresh-{n}.duckdb"))
            runs = _stored_runs(n)
            with s.transaction():
                s.insert("runs", runs)
            last = runs[-1]
            variants[n] = Variant("ddp", 1, last["link"], "pack", "none", last["bucket_mb"])
            times[n] = []
        for _ in range(repeat):
            for n, s in stores.items():
                t0 = time.perf_counter()
                refresh_stats(s, spec, "s", variants[n])
                times[n].append(time.perf_counter() - t0)
        rows = {
            n: s.query("SELECT count(*) FROM variant_stats")[1][0][0] for n, s in stores.items()
        }
    finally:
        for s in stores.values():
            s.close()
    out = {f"refresh_s_at_{n}_runs": stats.median(t) for n, t in times.items()}
    out.update({f"variant_rows_after_refresh_at_{n}": k for n, k in rows.items()})
    out["ratio_500_to_10"] = out["refresh_s_at_500_runs"] / out["refresh_s_at_10_runs"]
    return out


def sweep_doc(runs: int, steps: int) -> dict:
    if runs % 4:
        raise SystemExit("--runs must be a multiple of 4 (2 grad_accum x 2 links x repeats)")
    return {
        "name": "bench-scale",
        "model": "gpt2-tiny",
        "dataset": "builtin",
        "precision": "fp32",
        "seq_len": 128,
        "micro_batch_size": 2,
        "steps": steps,
        "warmup_steps": 2,
        "repeats": runs // 4,
        "world_size": 2,
        "links": {"default": {}, "no_p2p": {"NCCL_P2P_DISABLE": "1"}},
        "grid": {"strategy": ["ddp"], "grad_accum": [1, 4], "placement": ["pack"]},
    }


def bench_sweep(work: Path, runs: int, steps: int, code: str | None, extra: dict) -> dict:
    sweep = work / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({**sweep_doc(runs, steps), **extra}))
    db = work / "sweep.duckdb"
    env = dict(os.environ, RAY_DISABLE_USAGE_STATS="1", PYTHONPATH=code or str(REPO))
    env.pop("RAY_ADDRESS", None)
    exe = Path(sys.executable).with_name("linksweep")
    cmd = [str(exe)] if exe.exists() and not code else [sys.executable, "-m", "orchestrator"]
    t0 = time.time()
    proc = subprocess.run(
        [*cmd, "run", str(sweep), "--db", str(db)],
        cwd=code or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=SWEEP_TIMEOUT_S,
    )
    command_wall = time.time() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"linksweep run exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    with Reader(str(db)) as r:
        per_run = r.rows(Q.BENCH_RUN_OVERHEAD)
        (sweep_row,) = r.rows(Q.BENCH_SWEEP_WALL)
        phases = _phases(r)
        all_steps = _all_steps_overhead(r)
    timed = sum(x["timed_s"] for x in per_run)
    overhead = [x["wall_s"] - x["timed_s"] for x in per_run]
    return {
        "runs": len(per_run),
        "runs_ok": sum(x["status"] == "ok" for x in per_run),
        "median_run_wall_s": stats.median([x["wall_s"] for x in per_run]),
        "median_run_timed_s": stats.median([x["timed_s"] for x in per_run]),
        "median_run_overhead_s": stats.median(overhead),
        "sweep_wall_s": sweep_row["wall_s"],
        "sweep_efficiency": timed / sweep_row["wall_s"],
        "sweep_wall_per_run_minus_steps_s": (sweep_row["wall_s"] - timed) / len(per_run),
        "command_wall_s": command_wall,
        "median_run_wall_minus_all_steps_s": all_steps,
        "phases_median_s": phases,
    }


def _all_steps_overhead(reader: Reader) -> float | None:
    """Median over runs of wall minus every step the workload ran (warmup, timed, profiled
    pass: the slowest rank's wall in each), when run phases are stored (v3)."""
    try:
        rows = reader.rows(Q.BENCH_RUN_STEP_PHASES)
    except Exception:  # noqa: BLE001 - a database from --code older than run phases
        return None
    return stats.median([x["wall_s"] - x["steps_s"] for x in rows]) if rows else None


def _phases(reader: Reader) -> dict:
    """Median seconds per phase over the runs (max over ranks per run), when stored (v3)."""
    query = getattr(Q, "BENCH_PHASES", None)
    if query is None:
        return {}
    try:
        return {r["phase"]: r["median_s"] for r in reader.rows(query)}
    except Exception:  # noqa: BLE001 - a database from --code older than run phases
        return {}


def _print(name: str, figures: dict) -> None:
    print(f"\n{name}")
    for k, v in figures.items():
        if isinstance(v, dict):
            for pk, pv in v.items():
                print(f"  {k}.{pk:<24} {pv:10.3f}")
        else:
            print(f"  {k:<36} {v:12.3f}" if isinstance(v, float) else f"  {k:<36} {v!s:>12}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="ingest,commit,refresh,sweep")
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--code", help="run the sweep from this checkout (PYTHONPATH)")
    ap.add_argument("--launcher", help="sweep key 'launcher' for the sweep (when supported)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="linksweep-scale-"))
    out: dict = {"date": dt.datetime.now(dt.timezone.utc).isoformat(), "cpus": os.cpu_count()}
    try:
        wanted = args.only.split(",")
        if "ingest" in wanted:
            _print("ingest (steps rows)", out.setdefault("ingest", bench_ingest(work)))
        if "commit" in wanted:
            _print("commit (64 ranks x 1,000 steps)", out.setdefault("commit", bench_commit(work)))
        if "refresh" in wanted:
            _print("stats refresh per run", out.setdefault("refresh", bench_refresh(work)))
        if "sweep" in wanted:
            extra = {"launcher": args.launcher} if args.launcher else {}
            figures = bench_sweep(work, args.runs, args.steps, args.code, extra)
            _print(f"{args.runs}-run gpt2-tiny sweep", out.setdefault("sweep", figures))
    finally:
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=2, default=str))
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
