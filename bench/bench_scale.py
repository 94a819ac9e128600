"""Does linksweep's own cost stay small as runs get bigger and sweeps get longer?

    python bench/bench_scale.py [--only ingest,commit,refresh,sweep] [--runs 12] [--steps 6]
                                [--strategies ddp,zero3] [--launcher fork] [--code DIR]
                                [--smoke] [--json OUT] [--keep]

Four measurements, each printed as a table (and written with ``--json``):

ingest   rows/s of ``Store.insert`` into ``steps``: the columnar path (one Arrow batch) and the
         row-at-a-time ``executemany`` path it replaced (``Store._insert_rows``), in the same
         process on the same machine, so their ratio is what counts. Target >= 200,000 rows/s.
commit   seconds of a run's commit as a sweep's driver does it: ``ledger.commit_run`` builds
         the payload (runs, steps, ranks, comms, telemetry rows) and hands it to
         ``LiveStore.commit_run``, which spools it durably (JSON, fsync) and commits it in one
         transaction while the database is open; for a synthetic 64-rank x 1,000-step run (64,000
         step rows, plus 1,000 telemetry samples per rank), into a database already holding one
         such run. The first commit of a process also pays pyarrow's lazy imports (measured
         apart, in a fresh process). Target < 1 s.
refresh  seconds of ``sweep.refresh_stats`` (figures of one variant group) after a run, with
         10 and with 500 runs stored (groups of 2 links x 5 repeats): it must not grow.
sweep    per strategy of ``--strategies`` (default ddp and zero3), a gpt2-tiny sweep of
         ``--runs`` runs (grad_accum 1/4 x links default/no_p2p x runs/4 repeats) under
         ``linksweep run`` (embedded Ray, 2 ranks), each strategy its own sweep and database:
         per run, wall (``runs.started_at`` -> ``finished_at``) minus its timed steps (sum of the
         slowest rank's step times); sweep efficiency = all timed steps / the sweep's wall; the
         median seconds per phase (``run_phases``, slowest rank, median over runs: placement,
         process_start, imports, pg_init, model_data_build, strategy_init, warmup, ...); and the
         command's wall. ``--code DIR`` runs ``linksweep run`` from another checkout
         (``PYTHONPATH=DIR``), e.g. ``git archive`` of an older commit, for before/after figures.

Figures (``--json``; FIGURES lists the keys ``--smoke`` must produce):
- ``ingest.columnar_rows_per_s``, ``ingest.executemany_rows_per_s``, ``ingest.speedup``;
- ``commit.commit_s`` (``LiveStore.commit_run``: spool + commit), ``commit.longsweep_commit_s``
  (all of ``ledger.commit_run``: payload, spool, commit, then the run's ``commit`` phase row),
  ``commit.spool_bytes``, ``commit.spool_encode_s`` and ``commit.spool_decode_s`` (the
  payload to and from JSON, both inside ``commit_s``), and
  ``commit.first_commit_in_fresh_process_s``;
- ``refresh.refresh_s_at_10_runs``, ``refresh.refresh_s_at_500_runs``,
  ``refresh.ratio_500_to_10``;
- per strategy S: ``sweep.S.median_run_wall_s``, ``sweep.S.median_run_overhead_s`` (wall minus
  timed steps), ``sweep.S.median_run_wall_minus_all_steps_s`` (wall minus warmup, timed and
  profiled steps), ``sweep.S.sweep_efficiency``, ``sweep.S.phases_median_s`` (phase -> s).

``--smoke``: the same code on tiny sizes (8 ranks x 100 steps, 3 refreshes, one zero3 run of 1
warmup and 1 timed step at seq_len 32, micro-batch 1), a check that the script runs, not a
measurement.

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

from orchestrator.analysis import stats  # noqa: E402
from orchestrator.store import Q, Reader, Store, spool  # noqa: E402
from orchestrator.store.live import LiveStore  # noqa: E402
from orchestrator.sweep import ledger  # noqa: E402
from orchestrator.sweep.planner import PlannedRun, Variant  # noqa: E402
from orchestrator.sweep.resume import RunSlot  # noqa: E402
from orchestrator.sweep.rows import RunRows  # noqa: E402
from orchestrator.sweep.spec import parse_spec  # noqa: E402

SWEEP_TIMEOUT_S = 1800
STRATEGIES = "ddp,zero3"
"""The sweep's strategies by default: DDP and the ZeRO stage whose start-up costs most."""
FULL = {"ranks": 64, "steps": 1000, "executemany_rows": 5000, "refreshes": 21}
"""Synthetic sizes. The old row-at-a-time path runs ~2k rows/s: 5,000 rows say enough."""
SMOKE = {"ranks": 8, "steps": 100, "executemany_rows": 500, "refreshes": 3, "strategies": "zero3"}
"""Smoke: one sweep (each costs a Ray start); zero3's, which runs more of the rank's code."""

FIGURES = (
    "ingest.columnar_rows_per_s",
    "ingest.executemany_rows_per_s",
    "ingest.speedup",
    "commit.commit_s",
    "commit.longsweep_commit_s",
    "commit.spool_bytes",
    "commit.spool_encode_s",
    "commit.spool_decode_s",
    "commit.first_commit_in_fresh_process_s",
    "refresh.refresh_s_at_10_runs",
    "refresh.refresh_s_at_500_runs",
    "refresh.ratio_500_to_10",
    "sweep.zero3.median_run_wall_s",
    "sweep.zero3.median_run_overhead_s",
    "sweep.zero3.median_run_wall_minus_all_steps_s",
    "sweep.zero3.sweep_efficiency",
    "sweep.zero3.phases_median_s.strategy_init",
)
"""The ``--json`` keys (dotted paths) every run with the default ``--strategies``, and
``--smoke``, writes (``sweep.ddp`` has the same keys as ``sweep.zero3``)."""


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


def bench_ingest(work: Path, size: dict) -> dict:
    rows = step_rows("ingest", size["ranks"], size["steps"])
    with Store(str(work / "ingest.duckdb")) as s:
        with s.transaction():
            s.insert("steps", step_rows("warm", 1, 10))  # pyarrow's lazy imports, once
        t0 = time.perf_counter()
        with s.transaction():
            s.insert("steps", rows)
        fast = time.perf_counter() - t0
        few = rows[: size["executemany_rows"]]
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


class TimedLiveStore(LiveStore):
    """A ``LiveStore`` that times its ``commit_run`` (spool + commit) and keeps the payload
    ``ledger.commit_run`` built, so the benchmark measures the driver's own path."""

    def commit_run(self, payload: spool.Payload) -> bool:
        self.payload = payload
        t0 = time.perf_counter()
        try:
            return super().commit_run(payload)
        finally:
            self.commit_s = time.perf_counter() - t0


def commit(db: str, run: RunRows) -> tuple[TimedLiveStore, float]:
    """Commit ``run`` as the driver does (``ledger.commit_run``); (store, its wall)."""
    store = TimedLiveStore(db, say=lambda msg: print(f"bench_scale: {msg}", file=sys.stderr))
    slot = RunSlot(PlannedRun(0, 1, Variant("ddp", 1, "default", "pack")), run.run["run_id"])
    t0 = time.perf_counter()
    if not ledger.commit_run(store, slot, run, []):
        raise RuntimeError(f"{db}: the run stayed spooled (database busy)")
    return store, time.perf_counter() - t0


def bench_commit(work: Path, size: dict) -> dict:
    ranks, steps = size["ranks"], size["steps"]
    cold = subprocess.run(  # a fresh process: what the first commit of a sweep pays
        [sys.executable, "-c", _COLD_COMMIT, str(work / "cold.duckdb"), str(ranks), str(steps)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    db = str(work / "commit.duckdb")
    commit(db, synthetic_run("first", ranks, steps))
    t0 = time.perf_counter()
    big = synthetic_run("second", ranks, steps)
    build = time.perf_counter() - t0
    store, wall = commit(db, big)
    t0 = time.perf_counter()
    encoded = spool.encode(store.payload)
    encode = time.perf_counter() - t0
    t0 = time.perf_counter()
    spool.decode(encoded)
    decode = time.perf_counter() - t0
    return {
        "step_rows": len(big.steps),
        "telemetry_rows": len(big.telemetry),
        "commit_s": store.commit_s,
        "longsweep_commit_s": wall,
        "spool_bytes": len(encoded),
        "spool_encode_s": encode,
        "spool_decode_s": decode,
        "first_commit_in_fresh_process_s": float(cold.stdout.strip().splitlines()[-1]),
        "building_the_dicts_s": build,
    }


_COLD_COMMIT = """
import sys
sys.path.insert(0, ".")
from bench.bench_scale import commit, synthetic_run
store, _ = commit(sys.argv[1], synthetic_run("cold", int(sys.argv[2]), int(sys.argv[3])))
print(store.commit_s)
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
                # every variant key, as the planner fills it (without one the refresh finds
                # no run): DDP's defaults, the bucket as the group
                **Variant(
                    "ddp",
                    1,
                    "default" if within % 2 == 0 else "no_p2p",
                    "pack",
                    bucket_mb=group + 1,
                ).axes,  # fmt: skip
                "repeat": within // 2 + 1,
                "status": "ok",
                "throttled": False,
                "median_step_time_s": 0.1 * (1 + 0.3 * (within % 2)) + 1e-3 * within,
                "samples_per_s": 20.0,
                "tokens_per_s": 2560.0,
            }
        )
    return out


def bench_refresh(work: Path, repeat: int = FULL["refreshes"]) -> dict:
    """Median seconds of one refresh with 10 and with 500 runs stored, alternated (10, 500, 10,
    500, ...) so that a neighbour's load hits both."""
    from orchestrator.sweep.execute import refresh_stats

    spec = _refresh_spec()
    stores, variants, times = {}, {}, {}
    try:
        for n in (10, 500):
            s = stores[n] = Store(str(work / f"refresh-{n}.duckdb"))
            runs = _stored_runs(n)
            with s.transaction():
                s.insert("runs", runs)
            last = runs[-1]
            variants[n] = Variant("ddp", 1, last["link"], "pack", bucket_mb=last["bucket_mb"])
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
    if not all(rows.values()):  # an empty group refreshes in no time: that measures nothing
        raise RuntimeError(f"refresh wrote no variant_stats rows ({rows}): runs not found")
    out = {f"refresh_s_at_{n}_runs": stats.median(t) for n, t in times.items()}
    out.update({f"variant_rows_after_refresh_at_{n}": k for n, k in rows.items()})
    out["ratio_500_to_10"] = out["refresh_s_at_500_runs"] / out["refresh_s_at_10_runs"]
    return out


def sweep_doc(strategy: str, runs: int, steps: int, smoke: bool = False) -> dict:
    """One strategy's sweep: grad_accum 1/4 x links default/no_p2p x runs/4 repeats (the link
    only names the env on CPU: gloo reads no NCCL variable). Smoke: one short run."""
    if not smoke and (runs < 4 or runs % 4):
        raise SystemExit("--runs must be a multiple of 4 (2 grad_accum x 2 links x repeats)")
    links = {"default": {}} if smoke else {"default": {}, "no_p2p": {"NCCL_P2P_DISABLE": "1"}}
    return {
        "name": f"bench-scale-{strategy}",
        "model": "gpt2-tiny",
        "dataset": "builtin",
        "precision": "fp32",
        "seq_len": 32 if smoke else 128,
        "micro_batch_size": 1 if smoke else 2,
        "steps": steps,
        "warmup_steps": 1 if smoke else 2,
        "repeats": 1 if smoke else runs // 4,
        "world_size": 2,
        "links": links,
        "grid": {
            "strategy": [strategy],
            "grad_accum": [1] if smoke else [1, 4],
            "placement": ["pack"],
        },
    }


def bench_sweep(work: Path, doc: dict, code: str | None) -> dict:
    name = doc["name"]
    sweep = work / f"{name}.yaml"
    sweep.write_text(yaml.safe_dump(doc))
    db = work / f"{name}.duckdb"
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


def _print_phases(per_strategy: dict) -> None:
    """Phase x strategy: median seconds (slowest rank, median over runs), then run figures."""
    from orchestrator.ui import print_table

    names = list(per_strategy)
    phases = sorted({p for f in per_strategy.values() for p in f["phases_median_s"]})
    rows = [(p, *(per_strategy[n]["phases_median_s"].get(p) for n in names)) for p in phases]
    for key in ("median_run_wall_s", "median_run_overhead_s", "sweep_efficiency"):
        rows.append((key, *(per_strategy[n][key] for n in names)))
    print_table(["phase", *names], rows, title="\nmedian seconds per run, by strategy", digits=3)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="ingest,commit,refresh,sweep")
    ap.add_argument("--runs", type=int, default=12, help="runs per strategy (multiple of 4)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--strategies", default=STRATEGIES, help="one sweep each (default %(default)s)")
    ap.add_argument("--code", help="run the sweep from this checkout (PYTHONPATH)")
    ap.add_argument("--launcher", help="sweep key 'launcher' for the sweep (when supported)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: does it run? (seconds)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args(argv)
    size = SMOKE if args.smoke else FULL
    steps = 1 if args.smoke else args.steps
    work = Path(tempfile.mkdtemp(prefix="linksweep-scale-"))
    out: dict = {"date": dt.datetime.now(dt.timezone.utc).isoformat(), "cpus": os.cpu_count()}
    try:
        wanted = args.only.split(",")
        if "ingest" in wanted:
            _print("ingest (steps rows)", out.setdefault("ingest", bench_ingest(work, size)))
        if "commit" in wanted:
            what = f"commit ({size['ranks']} ranks x {size['steps']:,} steps)"
            _print(what, out.setdefault("commit", bench_commit(work, size)))
        if "refresh" in wanted:
            figures = bench_refresh(work, size["refreshes"])
            _print("stats refresh per run", out.setdefault("refresh", figures))
        if "sweep" in wanted:
            extra = {"launcher": args.launcher} if args.launcher else {}
            per_strategy = out.setdefault("sweep", {})
            strategies = SMOKE["strategies"] if args.smoke else args.strategies
            for strategy in strategies.split(","):
                doc = {**sweep_doc(strategy, args.runs, steps, args.smoke), **extra}
                figures = per_strategy[strategy] = bench_sweep(work, doc, args.code)
                _print(f"{figures['runs']}-run gpt2-tiny sweep, {strategy}", figures)
            _print_phases(per_strategy)
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
