"""ZeRO 1/2/3 versus DDP on this machine: step time, communication and memory for gpt2-tiny at
grad_accum 1 and 8, from one ``linksweep run``; and where a ZeRO-3 rank's start-up goes.

    python bench/bench_zero.py [--only sweep,init] [--repeats 2] [--steps 8] [--warmup 2]
                               [--smoke] [--json OUT] [--keep]

``sweep``: one sweep, strategy [ddp, zero1, zero2, zero3] x grad_accum [1, 8], world_size 2,
seq_len 128, micro_batch_size 2, gpt2-tiny, fp32. linksweep interleaves the repeats round robin
(every variant's repeat 1, then every variant's repeat 2), so drift on a shared machine spreads
over all variants. The table (``--json``: ``rows``, one per variant) comes from the
``variant_summary`` view:

- ``step_s`` [``ci_low_s``, ``ci_high_s``]: median over repeats of each run's figure (median over
  timed steps of the max over ranks), with its percentile-bootstrap interval
  (``orchestrator/analysis/stats.py``; with 2 repeats the interval is just the two runs' spread).
- ``vs_ddp`` [lo, hi]: that median / DDP's median at the same grad_accum, with a bootstrap
  interval resampling both groups' run figures (``stats.bootstrap_ratio_ci``).
- ``comm_B_per_step``: bytes of collectives per optimizer step and rank, counted in the profiled
  step (``runs.comm_bytes_per_step``); ``expected_B_per_step`` is the analytic model
  (``orchestrator/analysis/comm_model.py``; null where it makes no prediction, e.g. ZeRO-3 with
  DeepSpeed's default config).
- ``peak_mem_B``: on CPU the rank process's peak RSS (GPU: allocator peak), max over ranks.

Next to ``rows``: ``linksweep_exit_code`` (1: some run failed) and ``failed`` (their errors).

On CPU the collectives are gloo over loopback and DeepSpeed's optimizer is torch's AdamW on 1
thread per rank, so the ratios say what ZeRO's extra work costs when communication is nearly
free; absolute times mean something on a GPU only. Ctrl-C: linksweep keeps finished runs, and
this script prints what the database holds. ``linksweep run`` starts its own embedded Ray
(``ray.init(address="local")``), even where someone ran ``ray start`` on this machine.

``init``: where a rank's ``strategy_init`` phase goes (``deepspeed.initialize`` for ZeRO, the DDP
wrap for DDP). Two gloo ranks (torch.multiprocessing, no Ray) do what a rank of the sweep's first
variant does, with the same ``RunConfig`` (``orchestrator.sweep.planner.run_config``, so the same
DeepSpeed config) and the same ``workloads.strategies.make_strategy``; each first imports what
the fork launcher's server preloads (``workloads/forkserver_preload.py``), so the profile sees
what a forked rank pays, not imports the fork server already paid. Rank 0 runs under cProfile
(which slows Python-heavy code somewhat), rank 1 does not. Per strategy (``--json``:
``init_profile.STRATEGY``):

- ``init_s``: rank 0's ``make_strategy`` wall, profiled; ``init_s_unprofiled``: rank 1's;
- ``parts_s``: cumulative seconds of named calls inside it (:data:`INIT_PARTS`; nested ones
  say so in their name), and ``linksweep_own_s``: ``make_strategy`` minus
  ``deepspeed.initialize`` (our optimizer, our wrapping);
- ``top``: the top cumulative entries (function, seconds), import machinery left out.

The first ``deepspeed.initialize`` on a fresh machine JIT-builds the ``deepspeed_shm_comm`` op
(tens of seconds, then cached in ``~/.cache/torch_extensions``): ``parts_s.ds_shm_op_load``
shows it; run the bench again for the steady state.

``--smoke``: one run each of ddp and zero3 at grad_accum 1 (1 warmup and 1 timed step, seq_len
32, micro-batch 1) and the zero3 init profile only: a check that the script runs, not a measurement.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script from anywhere: import orchestrator

from orchestrator.analysis import stats  # noqa: E402
from orchestrator.store import Q, Reader  # noqa: E402

STRATEGIES = ["ddp", "zero1", "zero2", "zero3"]
GRAD_ACCUM = [1, 8]
"""1: a collective every micro-step; 8: DDP and ZeRO-1 reduce once per 8 micro-steps."""
REPEATS = 2
"""Runs per variant; 2 is the least that gives an interval, 16 runs take ~10 min on 2 cores."""
STEPS = 8
"""Timed steps per run; at grad_accum 8 one step is 8 micro-steps, so 8 steps is plenty."""
WARMUP = 2
"""DeepSpeed builds its buckets and optimizer state in the first steps."""
RUN_TIMEOUT_S = 600.0
"""Per-run hang guard (linksweep's run_timeout_s); a healthy run here takes under a minute."""
INIT_STRATEGIES = ("ddp", "zero3")
"""Strategies whose start-up is profiled: DDP's (a wrap) against ZeRO-3's, the costliest."""
SMOKE = {
    "strategies": ["ddp", "zero3"],
    "grad_accum": [1],
    "seq_len": 32,
    "micro_batch_size": 1,
    "steps": 1,
    "warmup": 1,
    "init": ("zero3",),
}
"""``--smoke``: every code path (a sweep, a ZeRO init profile) at the least compute."""
INIT_PARTS = {
    # name -> (file suffix, function) inside make_strategy; "a.b": b runs inside a
    "deepspeed_initialize": ("deepspeed/__init__.py", "initialize"),
    "ds_comm_init": ("deepspeed/comm/comm.py", "init_distributed"),
    "ds_comm_init.ds_shm_op_load": ("deepspeed/comm/torch.py", "build_shm_op"),
    "ds_comm_init.ds_shm_op_load.ds_op_probes": (
        "deepspeed/ops/__init__.py",
        "_probe_compatible_ops",
    ),
    "ds_optimizer_check": ("deepspeed/runtime/zero/utils.py", "is_zero_supported_optimizer"),
    "ds_zero_optimizer": ("deepspeed/runtime/engine.py", "_configure_zero_optimizer"),
    "ds_distributed_model": ("deepspeed/runtime/engine.py", "_configure_distributed_model"),
    "ddp_wrap": ("torch/nn/parallel/distributed.py", "__init__"),
}
"""Calls of ``deepspeed.initialize`` (DeepSpeed 0.19.8) and of the DDP wrap whose cumulative
seconds the init profile reports: the communication backend (its shared-memory op loaded, or
JIT-built on first use, after probing which ops this machine can build), the check whether our
optimizer is one ZeRO has tested (which imports DeepSpeed's Muon optimizer, whose module calls
``torch.compile`` and so imports torch's dynamo and inductor), the ZeRO optimizer (parameter
partitioning, flat fp32 partitions, gradient hooks), the data-parallel group and broadcast."""

FIGURES = (
    "linksweep_exit_code",
    "rows.step_s",
    "rows.ci_low_s",
    "rows.ci_high_s",
    "rows.vs_ddp",
    "rows.comm_B_per_step",
    "rows.peak_mem_B",
    "init_profile.zero3.init_s",
    "init_profile.zero3.init_s_unprofiled",
    "init_profile.zero3.parts_s",
    "init_profile.zero3.linksweep_own_s",
    "init_profile.zero3.top",
)
"""The ``--json`` keys (dotted; through a list: every element) every run, ``--smoke`` too,
writes."""


def sweep_doc(
    repeats: int,
    steps: int,
    warmup: int,
    strategies: list[str] = STRATEGIES,
    grad_accum: list[int] = GRAD_ACCUM,
    seq_len: int = 128,
    micro_batch_size: int = 2,
) -> dict:
    return {
        "name": "bench-zero",
        "model": "gpt2-tiny",
        "dataset": "builtin",
        "precision": "fp32",
        "seq_len": seq_len,
        "micro_batch_size": micro_batch_size,
        "steps": steps,
        "warmup_steps": warmup,
        "repeats": repeats,
        "world_size": 2,
        "links": {"default": {}},
        "run_timeout_s": RUN_TIMEOUT_S,
        "grid": {"strategy": strategies, "grad_accum": grad_accum, "placement": ["pack"]},
    }


def profile_parts(stats_: dict, top_n: int = 15) -> dict:
    """From ``pstats.Stats(...).stats`` ({(file, line, function): (cc, nc, tt, ct, callers)}):
    cumulative seconds of :data:`INIT_PARTS` found, ``linksweep_own_s`` (``make_strategy``
    minus ``deepspeed.initialize``; None for DDP), and the ``top_n`` cumulative entries
    without the import machinery. Pure."""

    def cum(suffix: str, func: str) -> float | None:
        hits = [v[3] for k, v in stats_.items() if k[0].endswith(suffix) and k[2] == func]
        return max(hits) if hits else None

    parts = {name: cum(*where) for name, where in INIT_PARTS.items()}
    parts = {name: t for name, t in parts.items() if t is not None}
    total = cum("workloads/strategies.py", "make_strategy")
    ds = parts.get("deepspeed_initialize")
    entries = sorted(
        ((f"{_short(k[0])}:{k[1]}({k[2]})", v[3]) for k, v in stats_.items()
         if not k[0].startswith(("<frozen", "~")) and "importlib" not in k[0]),
        key=lambda e: -e[1],
    )  # fmt: skip
    return {
        "parts_s": parts,
        "linksweep_own_s": total - ds if total is not None and ds is not None else None,
        "top": entries[:top_n],
    }


def _short(path: str) -> str:
    """A profile entry's file, from the package (``deepspeed/...``) or the repo down."""
    for marker in ("site-packages/", f"{REPO}/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def _init_rank(rank: int, port: int, cfg, out_dir: str) -> None:
    """One rank of the init profile (a torch.multiprocessing child): the rank's env as
    ``workloads/rank.py`` sets it, the fork server's imports, a gloo group, the model, then
    ``make_strategy`` timed (rank 0: under cProfile)."""
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE="2",
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        OMP_NUM_THREADS="1",
    )
    import torch
    import torch.distributed as dist

    import workloads.forkserver_preload  # noqa: F401 - what a forked rank starts with
    from workloads.model import build_model
    from workloads.strategies import make_strategy

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        model = build_model(cfg.model, cfg.seed)
        profiler = cProfile.Profile() if rank == 0 else None
        t0 = time.perf_counter()
        if profiler:
            profiler.enable()
        strategy = make_strategy(model, torch.device("cpu"), cfg, None)
        if profiler:
            profiler.disable()
        out = {"init_s": time.perf_counter() - t0}
        if profiler:
            out.update(profile_parts(pstats.Stats(profiler).stats))
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(out))
        strategy.teardown()
    finally:
        dist.destroy_process_group()


def init_profile(strategy: str, doc: dict) -> dict:
    """Profile ``make_strategy`` for ``strategy`` on 2 gloo ranks with the sweep's config."""
    import torch.multiprocessing as mp

    from orchestrator.sweep.planner import Variant, run_config
    from orchestrator.sweep.spec import parse_spec

    spec = parse_spec({**doc, "grid": {**doc["grid"], "strategy": [strategy]}})
    cfg = run_config(spec, Variant(strategy, 1, "default", "pack"), f"init-{strategy}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_init_rank, args=(port, cfg, tmp), nprocs=2, join=True)
        r0, r1 = (json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in (0, 1))
    return {**r0, "init_s_unprofiled": r1["init_s"]}


def report_init(strategy: str, r: dict) -> None:
    print(
        f"\n{strategy} make_strategy: {r['init_s']:.3f} s profiled (rank 0), "
        f"{r['init_s_unprofiled']:.3f} s unprofiled (rank 1); linksweep's own: "
        + (f"{r['linksweep_own_s']:.3f} s" if r["linksweep_own_s"] is not None else "-")
    )
    for name, t in r["parts_s"].items():
        print(f"  {name:<44} {t:8.3f} s")
    print("  top cumulative:")
    for name, t in r["top"]:
        print(f"    {t:8.3f} s  {name}")


def _linksweep() -> list[str]:
    exe = Path(sys.executable).with_name("linksweep")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "orchestrator"]


def table_rows(variants: list[dict], run_figures: dict[tuple[str, int], list[float]], seed: int):
    """One row per (strategy, grad_accum) with the ratio to DDP at that grad_accum. Pure."""
    rows = []
    for v in sorted(variants, key=lambda v: (v["grad_accum"], STRATEGIES.index(v["strategy"]))):
        key = (v["strategy"], v["grad_accum"])
        base = run_figures.get(("ddp", v["grad_accum"]))
        mine = run_figures.get(key)
        ratio = lo = hi = None
        if base and mine:
            ratio, lo, hi = stats.bootstrap_ratio_ci(mine, base, seed=seed)
        rows.append(
            {
                "strategy": v["strategy"],
                "grad_accum": v["grad_accum"],
                "n_runs": v["n_runs"],
                "n_excluded": v["n_excluded"],
                "step_s": v["median_step_time_s"],
                "ci_low_s": v["ci_low_s"],
                "ci_high_s": v["ci_high_s"],
                "vs_ddp": ratio,
                "vs_ddp_lo": lo,
                "vs_ddp_hi": hi,
                "comm_B_per_step": v["comm_bytes_per_step"],
                "expected_B_per_step": v["expected_comm_bytes_per_step"],
                "peak_mem_B": v["peak_mem_bytes"],
            }
        )
    return rows


def read_results(db: str) -> tuple[list[dict], dict, list[tuple]]:
    """variant_summary rows, the ok run figures per variant, and failed runs' errors."""
    with Reader(db) as reader:
        variants = reader.rows(Q.BENCH_VARIANTS)
        runs = reader.rows(Q.BENCH_OK_RUN_FIGURES)
        failed = [tuple(r.values()) for r in reader.rows(Q.BENCH_FAILED_RUNS)]
    figures: dict[tuple[str, int], list[float]] = {}
    for r in runs:
        figures.setdefault((r["strategy"], r["grad_accum"]), []).append(r["median_step_time_s"])
    return variants, figures, failed


def report(rows: list[dict]) -> None:
    from orchestrator.ui import print_table

    def ci(a, b):
        return f"[{a:.3g}, {b:.3g}]" if a is not None and b is not None else ""

    cols = ["strategy", "ga", "runs", "step_s", "step CI", "vs_ddp", "vs_ddp CI", "comm_B/step"]
    cols += ["expected_B/step", "peak_mem_MB"]
    print_table(
        cols,
        [
            (
                r["strategy"],
                r["grad_accum"],
                f"{r['n_runs'] - r['n_excluded']}/{r['n_runs']}",
                r["step_s"],
                ci(r["ci_low_s"], r["ci_high_s"]),
                r["vs_ddp"],
                ci(r["vs_ddp_lo"], r["vs_ddp_hi"]),
                r["comm_B_per_step"],
                r["expected_B_per_step"],
                r["peak_mem_B"] / 1e6 if r["peak_mem_B"] else None,
            )
            for r in rows
        ],
        title="ZeRO vs DDP, gpt2-tiny, world_size 2 (step: median of runs' figures)",
    )


def run_sweep(doc: dict, work: Path) -> dict | None:
    """``linksweep run`` of the sweep; its table, or None when it wrote no database."""
    sweep, db = work / "sweep.yaml", work / "zero.duckdb"
    sweep.write_text(yaml.safe_dump(doc, sort_keys=False))
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", RAY_DISABLE_USAGE_STATS="1")
    env.pop("RAY_ADDRESS", None)  # this machine: embedded Ray
    # linksweep's own progress and summary go to this terminal; exit 1 = some run failed, still
    # stored and reported below. Ctrl-C: linksweep stops, what it stored is reported.
    try:
        rc = subprocess.run(
            [*_linksweep(), "run", str(sweep), "--db", str(db)], cwd=REPO, env=env
        ).returncode
    except KeyboardInterrupt:
        rc = 130
    if not db.exists():
        print(f"bench_zero: linksweep run exited {rc} and wrote no database", file=sys.stderr)
        return None
    variants, figures, failed = read_results(str(db))
    rows = table_rows(variants, figures, seed=0)
    report(rows)
    for seq, strategy, ga, error in failed:
        print(f"FAILED run #{seq} {strategy} ga={ga}: {error}", file=sys.stderr)
    return {"linksweep_exit_code": rc, "rows": rows, "failed": [list(f) for f in failed]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", default="sweep,init", help="sweep, init or both (default)")
    p.add_argument("--repeats", type=int, default=REPEATS)
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("--warmup", type=int, default=WARMUP)
    p.add_argument("--smoke", action="store_true", help="tiny sizes: does it run? (~1 min)")
    p.add_argument("--json", help="write the table, the init profile and the context here")
    p.add_argument("--keep", action="store_true", help="keep the temp folder (sweep, database)")
    args = p.parse_args(argv)
    if args.repeats < 1 or args.steps < 1 or args.warmup < 0:
        p.error("--repeats and --steps must be >= 1, --warmup >= 0")
    wanted = args.only.split(",")
    if set(wanted) - {"sweep", "init"}:
        p.error(f"--only {args.only}: allowed sweep, init")

    from orchestrator.provenance import context as provenance

    if args.smoke:
        args.repeats, args.steps, args.warmup = 1, SMOKE["steps"], SMOKE["warmup"]
        doc = sweep_doc(
            1,
            SMOKE["steps"],
            SMOKE["warmup"],
            SMOKE["strategies"],
            SMOKE["grad_accum"],
            SMOKE["seq_len"],
            SMOKE["micro_batch_size"],
        )
    else:
        doc = sweep_doc(args.repeats, args.steps, args.warmup)
    context = {**provenance(), "sweep": doc}
    print(f"bench_zero: {context['date']} cpus={context['cpus']} {context['versions']}")
    out: dict = {"context": context}
    work = Path(tempfile.mkdtemp(prefix="linksweep-bench-zero-"))
    rc = 0
    try:
        if "sweep" in wanted:
            table = run_sweep(doc, work)
            if table is None:
                return 1
            out.update(table)
            rc = table["linksweep_exit_code"]
        if "init" in wanted and rc != 130:
            profiles = out.setdefault("init_profile", {})
            for strategy in SMOKE["init"] if args.smoke else INIT_STRATEGIES:
                profiles[strategy] = init_profile(strategy, doc)
                report_init(strategy, profiles[strategy])
    except KeyboardInterrupt:
        rc = 130
    finally:
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1, default=str))
        if args.keep:
            print(f"kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 130 if rc == 130 else (0 if rc == 0 else 1)


if __name__ == "__main__":
    sys.exit(main())
