"""ZeRO 1/2/3 versus DDP on this machine: step time, communication and memory for gpt2-tiny at
grad_accum 1 and 8, from one ``linksweep run``.

    python bench/bench_zero.py [--repeats 2] [--steps 8] [--warmup 2] [--json OUT] [--keep]

One sweep: strategy [ddp, zero1, zero2, zero3] x grad_accum [1, 8], world_size 2, seq_len 128,
micro_batch_size 2, gpt2-tiny, fp32. linksweep interleaves the repeats round robin (every
variant's repeat 1, then every variant's repeat 2), so drift on a shared machine spreads over all
variants. The table comes from the ``variant_summary`` view:

- ``step_s`` [``ci_low_s``, ``ci_high_s``]: median over repeats of each run's figure (median over
  timed steps of the max over ranks), with its percentile-bootstrap interval
  (``orchestrator/stats.py``; with 2 repeats the interval is just the two runs' spread).
- ``vs_ddp`` [lo, hi]: that median / DDP's median at the same grad_accum, with a bootstrap
  interval resampling both groups' run figures (``stats.bootstrap_ratio_ci``).
- ``comm_B_per_step``: bytes of collectives per optimizer step and rank, counted in the profiled
  pass after the timed steps (``runs.comm_bytes_per_step``); ``expected_B_per_step`` is the
  analytic model (``orchestrator/comm_model.py``).
- ``peak_mem_B``: on CPU the rank process's peak RSS (GPU: allocator peak), max over ranks.

On CPU the collectives are gloo over loopback and DeepSpeed's optimizer is torch's AdamW on 1
thread per rank, so the ratios say what ZeRO's extra work costs when communication is nearly
free; absolute times mean something on a GPU only. Ctrl-C: linksweep keeps finished runs, and
this script prints what the database holds.

``linksweep run`` starts its own embedded Ray (``ray.init(address="local")``), even where someone
ran ``ray start`` on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script from anywhere: import orchestrator

from orchestrator import stats  # noqa: E402
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


def sweep_doc(repeats: int, steps: int, warmup: int) -> dict:
    return {
        "name": "bench-zero",
        "model": "gpt2-tiny",
        "dataset": "builtin",
        "precision": "fp32",
        "seq_len": 128,
        "micro_batch_size": 2,
        "steps": steps,
        "warmup_steps": warmup,
        "repeats": repeats,
        "world_size": 2,
        "links": {"default": {}},
        "run_timeout_s": RUN_TIMEOUT_S,
        "grid": {"strategy": STRATEGIES, "grad_accum": GRAD_ACCUM, "placement": ["pack"]},
    }


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=REPEATS)
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("--warmup", type=int, default=WARMUP)
    p.add_argument("--json", help="write the table, failures and context here")
    p.add_argument("--keep", action="store_true", help="keep the temp folder (sweep, database)")
    args = p.parse_args(argv)
    if args.repeats < 1 or args.steps < 1 or args.warmup < 0:
        p.error("--repeats and --steps must be >= 1, --warmup >= 0")

    from orchestrator.provenance import context as provenance

    doc = sweep_doc(args.repeats, args.steps, args.warmup)
    context = {**provenance(), "sweep": doc}
    print(f"bench_zero: {context['date']} cpus={context['cpus']} {context['versions']}")
    work = Path(tempfile.mkdtemp(prefix="linksweep-bench-zero-"))
    sweep, db = work / "sweep.yaml", work / "zero.duckdb"
    sweep.write_text(yaml.safe_dump(doc, sort_keys=False))
    env = dict(
        os.environ,
        TOKENIZERS_PARALLELISM="false",
        RAY_DISABLE_USAGE_STATS="1",
    )
    env.pop("RAY_ADDRESS", None)  # this machine: embedded Ray
    interrupted = False
    try:
        # linksweep's own progress and summary go to this terminal; exit 1 = some run failed,
        # still stored and reported below.
        rc = subprocess.run(
            [*_linksweep(), "run", str(sweep), "--db", str(db)], cwd=REPO, env=env
        ).returncode
    except KeyboardInterrupt:
        interrupted, rc = True, 130
    try:
        if not db.exists():
            print(f"bench_zero: linksweep run exited {rc} and wrote no database", file=sys.stderr)
            return 1
        variants, figures, failed = read_results(str(db))
        rows = table_rows(variants, figures, seed=0)
        report(rows)
        for seq, strategy, ga, error in failed:
            print(f"FAILED run #{seq} {strategy} ga={ga}: {error}", file=sys.stderr)
        if args.json:
            Path(args.json).write_text(
                json.dumps(
                    {
                        "context": context,
                        "linksweep_exit_code": rc,
                        "rows": rows,
                        "failed": [list(f) for f in failed],
                    },
                    indent=1,
                    default=str,
                )
            )
    finally:
        if args.keep:
            print(f"kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 130 if interrupted else (0 if rc == 0 else 1)


if __name__ == "__main__":
    sys.exit(main())
