"""What does linksweep's machinery cost a step, and a run's start? The same gpt2-tiny DDP run, under
``linksweep run`` and under a bare ``torchrun``, alternated on one machine; then one sweep that
starts every strategy, for each strategy's per-run overhead next to DDP's.

One job: measure what linksweep itself costs a run (per step against torchrun, per start-up
against DDP).

    python bench/bench_overhead.py [--trials 5] [--steps 20] [--warmup 3] [--with-nice0]
                                   [--without-actors] [--startup-repeats 2] [--startup-only]
                                   [--launchers [--gpu] [--launcher-repeats 3]]
                                   [--smoke] [--json OUT] [--keep]

Arms: ``linksweep`` (``launcher: fork``: ranks forked by a per-node launcher whose fork server
has the imports done), ``linksweep_actors`` (``launcher: actors``: fresh Ray actors per run, the
imports paid every run), ``torchrun``; each linksweep arm is a 2-run sweep whose second run gives
the figures (the first run's start-up, which warms the fork server, is shown apart).

Both sides train the same variant with the same code: ``linksweep run`` starts ranks that call
``workloads.train.run_training``; ``torchrun --standalone --nproc_per_node 2
bench/standalone.py`` calls it from plain processes with the same ``RunConfig``
(``orchestrator.sweep.planner.run_config``). Both get OMP_NUM_THREADS=1 per rank (linksweep sets it from
the rank's one-CPU bundle, ``planner.run_env``; here it is set explicitly for torchrun), so the
only difference left is what runs around the ranks: Ray's raylet, GCS and actor plumbing, the
progress actor, the driver polling, versus torchrun's agent.

Figure (both sides, the protocol of ``orchestrator/analysis/stats.py``): per timed step the max over the 2
ranks, then the median over the timed steps. linksweep's comes from ``run_summary``
.median_step_time_s; torchrun's from the standalone JSON's per-rank steps (``stats.run_figure``).
Trials alternate A, B, A, B... so drift and neighbours on a shared machine hit both sides; the
table shows every trial, then the median of each side and the ratio linksweep / torchrun of those
medians (target: within 5%, i.e. 0.95..1.05), the median of the per-trial ratios, and the
ratio of each side's fastest run (neighbours only add time, so on a busy machine the fastest run
is the least disturbed one). The verdict uses the 95% bootstrap interval of the median per-trial
ratio: within 5% when the whole interval lies in 0.95..1.05, not within when it lies wholly
outside, undecided otherwise (or with fewer than 5 trials): then run more trials, or run it on a
quieter machine.

Start-up seconds, from "start the ranks" to "the last rank begins its first (warmup) step":
- linksweep: ``runs.startup_s`` = last rank's first_step_wall_s minus the moment the driver asked
  Ray for the actors (placement group already reserved). Ray's own start (``ray.init``, the
  topology probe) comes before that; the whole command's wall time is shown as ``ls_wall_s``.
- torchrun: last rank's first_step_wall_s minus the moment this script launched torchrun
  (launcher, interpreters, imports, rendezvous, model and data build). Its wall time is
  ``tr_wall_s``.

Niceness: Ray starts worker processes, so linksweep's ranks, at nice 15 (Ray's
``worker_niceness`` default); torchrun's ranks run at the caller's nice (0). On an idle machine
that costs nothing; when other processes want the same cores (a shared CI box, a busy head node,
dataloader workers) the ranks get less CPU than a bare torchrun would. ``--with-nice0`` adds a
third arm, ``linksweep_nice0``: ``linksweep run`` with ``RAY_worker_niceness=0`` in its env
(the embedded Ray then starts its workers at nice 0), to tell Ray's plumbing from the priority.

Isolation: ``linksweep run`` without an address always starts its own embedded Ray
(``ray.init(address="local")``), even where someone ran ``ray start`` on this machine.

On a CPU machine the step times are gloo on loopback; only the ratio means something there.
Ctrl-C stops the loop and still prints (and writes) what finished.

Start-up per strategy (after the trials, or alone with ``--startup-only``): one ``linksweep run``
(``launcher: fork``) of the same workload with ``grid.strategy`` ddp, zero1, zero2, zero3, fsdp,
hsdp (hsdp: one shard group of both ranks, the default on one node) and ``--startup-repeats``
repeats (default 2), interleaved round robin, in one sweep: the same Ray, the same fork server,
the same minute of the machine for every strategy. The sweep's first run also starts the node's
launcher and its fork server, so each strategy's figures come from its runs after the first
repeat: with the default 2, one run each, every one after the fork server is warm; with more,
the median run (by overhead) of those, ``n_runs`` of them. Per run: ``wall_s``
(``runs.started_at`` -> ``finished_at``), ``steps_s`` (the ``run_phases`` ``warmup``,
``timed_steps`` and ``profiled_pass``, each the slowest rank's), ``overhead_s`` = wall_s -
steps_s, and every phase's seconds (``run_phases``, the slowest rank's): placement,
process_start, imports, pg_init, model_data_build, ``strategy_init``, rank_teardown, teardown,
commit. Per strategy: ``ratio_to_ddp`` (its overhead_s / DDP's, same sweep) and
``within_2x_ddp`` (the goal: ratio_to_ddp <= 2). A ``pg_init`` of 0.3-0.8 s instead of ~0.02 s
is a rank that reached rank 0's TCPStore before it listened (its connect is retried after a
back-off): it lands on a random run, so one run each can miss the goal by it; more repeats and
the median damp it. The machine's 1-minute load average before and after the sweep is kept
(``load_before``, ``load_after``): on a shared machine, repeat when it moved.

Figures (``--json``: ``summary.ARM.KEY`` per linksweep arm, next to ``trials`` and ``context``):
``median_step_time_s`` and ``torchrun_median_step_time_s`` (median over trials of each run's
figure), ``ratio`` (of those medians), ``median_trial_ratio`` with ``median_trial_ratio_ci`` and
``verdict``, ``ratio_of_min``, ``p10_median_trial_ratio`` and ``p10_verdict`` (the same on each
run's 10th-percentile step), ``startup_s``, ``first_run_startup_s`` and ``torchrun_startup_s``.

Start-up figures (``--json``: ``startup.per_strategy.S.KEY`` per strategy S): ``overhead_s``,
``wall_s``, ``steps_s``, ``phases`` (phase -> s), ``ratio_to_ddp``, ``within_2x_ddp``,
``n_runs``; next to them ``startup.runs`` (every run of the sweep), ``startup.load_before``,
``startup.load_after``.

Start-up per launcher (``--launchers`` alone; ``--gpu`` on a GPU node): one-rank DDP and two
DDP ranks (``--gpu``: sharing one GPU, on the selftest's GPU workload), a ``linksweep run`` per
launcher of ``--launcher-repeats`` runs; a run's start-up is the sum of its phases before the
first step, compile left out (``orchestrator/selftest/startup.py`` ``START_UP_PHASES``, slowest
rank each); the median run after the first gives ``launchers.SHAPE.LAUNCHER.start_up_s``,
``n_runs``, ``phases`` and ``within_goal`` (fork: at most ``LAUNCHER_GOAL_S``, 3 s).

``--smoke``: 1 trial of arms ``linksweep`` (fork) and ``torchrun`` (so ``bench/standalone.py``
runs too), 1 timed step after 1 warmup step at seq_len 32 (``SMOKE_SEQ_LEN``): a check that the
script runs, not a measurement. Its ``linksweep`` arm is the start-up sweep with one run per
strategy (DDP first, so it also pays the fork server's start): one Ray start for both.
"""

from __future__ import annotations

import argparse
import json
import math
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
from orchestrator.store import Q, Reader  # noqa: E402
from orchestrator.store.queries import Query  # noqa: E402
from orchestrator.sweep.planner import plan_runs  # noqa: E402
from orchestrator.sweep.spec import parse_spec  # noqa: E402
from workloads import catalog  # noqa: E402

TRIALS = 5
"""Trials (one run per arm each); 5 is the fewest the verdict's bootstrap interval accepts."""
STEPS = 20
"""Timed steps per run: enough for a stable median at ~0.1-0.3 s per step on 2 CPU cores."""
WARMUP = 3
"""First steps allocate buffers and build DDP buckets; excluded from the figure."""
SEQ_LEN = 128
SMOKE_SEQ_LEN = 32
"""``--smoke``: the least compute a step can have; the figures mean nothing there."""
TARGET = 0.05
"""The acceptance target: linksweep's median step within 5% of bare torchrun's."""
RUN_TIMEOUT_S = 900
"""Hang guard per command; a CPU run of this size takes well under a minute."""
REFERENCE = catalog.names(catalog.DDP)[0]  # every other strategy's start-up is divided by DDP's
BUILT_IN = [s.name for s in catalog.STRATEGIES.values() if s.workload.startswith("workloads.")]
STRATEGIES = (REFERENCE, *(s for s in BUILT_IN if s != REFERENCE))
"""The start-up sweep's strategies: every built-in one of the catalog, the reference first."""
STARTUP_REPEATS = 2
"""Runs per strategy in the start-up sweep: the first run of the sweep also starts the fork
server, so with 2 every strategy has a run after it (its last one gives the figures)."""
STARTUP_GOAL = 2.0
"""The goal: every strategy's per-run overhead within 2x DDP's, measured in the same sweep."""
STEP_PHASES = ("warmup", "timed_steps", "profiled_pass")
"""The ``run_phases`` that are training steps; the rest of a run's wall is overhead."""

FIGURES = (
    "summary.linksweep.median_step_time_s",
    "summary.linksweep.torchrun_median_step_time_s",
    "summary.linksweep.ratio",
    "summary.linksweep.median_trial_ratio",
    "summary.linksweep.verdict",
    "summary.linksweep.ratio_of_min",
    "summary.linksweep.p10_median_trial_ratio",
    "summary.linksweep.p10_verdict",
    "summary.linksweep.startup_s",
    "summary.linksweep.first_run_startup_s",
    "summary.linksweep.torchrun_startup_s",
    "startup.load_before",
    "startup.load_after",
    "startup.per_strategy.ddp.overhead_s",
    "startup.per_strategy.ddp.phases.strategy_init",
    "startup.per_strategy.zero1.overhead_s",
    "startup.per_strategy.zero1.ratio_to_ddp",
    "startup.per_strategy.zero1.within_2x_ddp",
    "startup.per_strategy.zero2.overhead_s",
    "startup.per_strategy.zero2.ratio_to_ddp",
    "startup.per_strategy.zero2.within_2x_ddp",
    "startup.per_strategy.zero3.overhead_s",
    "startup.per_strategy.zero3.ratio_to_ddp",
    "startup.per_strategy.zero3.within_2x_ddp",
    "startup.per_strategy.zero3.phases.strategy_init",
    "startup.per_strategy.fsdp.overhead_s",
    "startup.per_strategy.fsdp.ratio_to_ddp",
    "startup.per_strategy.fsdp.within_2x_ddp",
    "startup.per_strategy.hsdp.overhead_s",
    "startup.per_strategy.hsdp.ratio_to_ddp",
    "startup.per_strategy.hsdp.within_2x_ddp",
    "startup.per_strategy.hsdp.wall_s",
    "startup.per_strategy.hsdp.steps_s",
)
"""The ``--json`` keys (dotted) every run, ``--smoke`` too, writes (arm ``linksweep``: fork)."""


def sweep_doc(
    steps: int, warmup: int, repeats: int = 1, launcher: str = "auto", seq_len: int = SEQ_LEN
) -> dict:
    """The benchmarked workload: gpt2-tiny DDP, 2 ranks, one variant, ``repeats`` runs."""
    return {
        "name": "bench-overhead",
        "model": "gpt2-tiny",
        "dataset": "builtin",
        "precision": "fp32",
        "seq_len": seq_len,
        "micro_batch_size": 2,
        "steps": steps,
        "warmup_steps": warmup,
        "repeats": repeats,
        "launcher": launcher,
        "world_size": 2,
        "links": {"default": {}},
        "grid": {"strategy": [REFERENCE], "grad_accum": [1], "placement": ["pack"]},
    }


def _exe(name: str, module_fallback: list[str]) -> list[str]:
    """The console script next to this interpreter (the venv's), else ``python -m``."""
    exe = Path(sys.executable).with_name(name)
    return [str(exe)] if exe.exists() else [sys.executable, *module_fallback]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "RAY_DISABLE_USAGE_STATS": "1"}
    )
    env.pop("RAY_ADDRESS", None)  # the comparison is on this machine: embedded Ray
    env.pop("RAY_worker_niceness", None)  # Ray's default unless an arm asks otherwise
    # this checkout's code, also where the script is a copy in another one (before/after)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def _check(proc: subprocess.CompletedProcess, what: str) -> None:
    if proc.returncode != 0:
        raise RuntimeError(f"{what} exited {proc.returncode}:\n{proc.stderr[-3000:]}")


def run_linksweep(sweep: Path, work: Path, trial: int, pick: int = -1, **env: str) -> dict:
    """(a) ``linksweep run`` into a fresh database; the figure and start-up of its run number
    ``pick`` (in run order; default the last: what every run after the first pays)."""
    db = work / f"ls-{trial}-{len(list(work.glob('ls-*.duckdb')))}.duckdb"
    t0 = time.time()
    proc = subprocess.run(
        [*_exe("linksweep", ["-m", "orchestrator"]), "run", str(sweep), "--db", str(db)],
        cwd=REPO,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    wall = time.time() - t0
    _check(proc, "linksweep run")
    with Reader(str(db)) as reader:
        rows = reader.rows(Q.BENCH_RUNS)
    if not rows or any(x["status"] != "ok" for x in rows):
        raise RuntimeError(f"linksweep run: expected ok runs, got {rows}")
    r = rows[pick]
    return {
        "median_step_time_s": r["median_step_time_s"],
        "p10_step_time_s": r["p10_step_time_s"],
        "startup_s": r["startup_s"],
        "first_run_startup_s": rows[0]["startup_s"],
        "wall_s": wall,
        "n_steps": r["n_steps"],
        "db": str(db),
    }


def run_torchrun(sweep: Path, work: Path, trial: int) -> dict:
    """(b) bare torchrun of the same variant; the figure from the per-rank step times."""
    out = work / f"tr-{trial}.json"
    cmd = [
        *_exe("torchrun", ["-m", "torch.distributed.run"]),
        "--standalone",  # c10d rendezvous on a free port
        "--nproc_per_node",
        "2",
        str(Path(__file__).with_name("standalone.py")),
        "--sweep",
        str(sweep),
        "--strategy",
        REFERENCE,
        "--grad-accum",
        "1",
        "--out",
        str(out),
    ]
    t0 = time.time()
    proc = subprocess.run(
        cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    wall = time.time() - t0
    _check(proc, "torchrun bench/standalone.py")
    doc = json.loads(out.read_text())
    timed = {
        r["rank"]: [s["step_time_s"] for s in r["steps"] if not s["warmup"]] for r in doc["ranks"]
    }
    first = max(r["first_step_wall_s"] for r in doc["ranks"])
    per_step = [max(ts) for ts in zip(*timed.values(), strict=True)]  # the slowest rank's
    return {
        "median_step_time_s": stats.run_figure(timed),
        "p10_step_time_s": stats.percentile(per_step, 10),
        "startup_s": first - t0,
        "wall_s": wall,
        "n_steps": len(timed[0]),
        "omp_num_threads": sorted({r["omp_num_threads"] for r in doc["ranks"]}),
    }


# --- start-up per strategy ------------------------------------------------------------------
RUN_PHASES = Query(
    "bench_overhead_run_phases",
    """SELECT r.seq, r.strategy, r."repeat", r.status,
              epoch(r.finished_at) - epoch(r.started_at) AS wall_s, ph.phase, max(ph.seconds) AS s
       FROM runs r LEFT JOIN run_phases ph ON ph.run_id = r.run_id
       GROUP BY r.seq, r.strategy, r."repeat", r.status, r.started_at, r.finished_at, ph.phase
       ORDER BY r.seq""",
)
"""Every run of a one-sweep database with each phase's seconds (the slowest rank's; the
driver's phases have one row per run)."""


def startup_doc(steps: int, warmup: int, repeats: int, seq_len: int) -> dict:
    """The start-up sweep: the benchmarked workload with every strategy, fork launcher."""
    doc = sweep_doc(steps, warmup, repeats, "fork", seq_len)
    return {**doc, "name": "bench-startup", "grid": {**doc["grid"], "strategy": list(STRATEGIES)}}


def last_ddp_index(doc: dict) -> int:
    """Index (in run order) of the sweep's last DDP run: the ``linksweep`` arm's figure when
    the arm runs the start-up sweep (``--smoke``)."""
    runs = plan_runs(parse_spec(doc))
    return max(i for i, run in enumerate(runs) if run.variant.strategy == REFERENCE)


def per_run(rows: list[dict]) -> list[dict]:
    """``RUN_PHASES`` rows (one per run and phase) -> one dict per run: strategy, repeat,
    status, wall_s, phases, steps_s (the step phases) and overhead_s (wall_s - steps_s). Pure."""
    runs: dict[int, dict] = {}
    for row in rows:
        run = runs.setdefault(row["seq"], {
            "seq": row["seq"], "strategy": row["strategy"], "repeat": row["repeat"],
            "status": row["status"], "wall_s": row["wall_s"], "phases": {},
        })  # fmt: skip
        if row["phase"] is not None:
            run["phases"][row["phase"]] = row["s"]
    for run in runs.values():
        run["steps_s"] = sum(run["phases"].get(p, 0.0) for p in STEP_PHASES)
        run["overhead_s"] = run["wall_s"] - run["steps_s"] if run["wall_s"] is not None else None
    return [runs[k] for k in sorted(runs)]


def startup_summary(runs: list[dict], goal: float = STARTUP_GOAL) -> dict:
    """Per strategy, the figures of its median run (by overhead_s; of an even count the lower
    middle one) among its ok runs after the first repeat (the sweep's first run also starts
    the fork server; with one repeat, all its runs), the ratio of that overhead to DDP's in the
    same sweep and whether it is within ``goal``. With 2 repeats: each strategy's second run.
    Pure."""
    ok = [r for r in runs if r["status"] == "ok" and r["overhead_s"] is not None]
    later = [r for r in ok if r["repeat"] > 1] or ok
    picked = {}
    for strategy in STRATEGIES:
        mine = sorted(
            (r for r in later if r["strategy"] == strategy), key=lambda r: r["overhead_s"]
        )
        if mine:
            picked[strategy] = (mine[(len(mine) - 1) // 2], len(mine))
    ddp = picked[REFERENCE][0]["overhead_s"] if REFERENCE in picked else None
    out = {}
    for strategy, (run, n) in picked.items():
        ratio = run["overhead_s"] / ddp if ddp else None
        out[strategy] = {
            "seq": run["seq"],
            "repeat": run["repeat"],
            "n_runs": n,
            "overhead_s": run["overhead_s"],
            "wall_s": run["wall_s"],
            "steps_s": run["steps_s"],
            "phases": run["phases"],
            "ratio_to_ddp": ratio,
            "within_2x_ddp": ratio is not None and ratio <= goal,
        }
    return out


def read_startup(db: str, load_before: float) -> dict:
    """The start-up sweep's figures from its database, with the machine's load around it."""
    with Reader(db) as reader:
        runs = per_run(reader.rows(RUN_PHASES))
    return {
        "runs": runs,
        "per_strategy": startup_summary(runs),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }


def run_startup(doc: dict, work: Path) -> dict:
    """Run the start-up sweep (``linksweep run``, fork launcher) and read its figures."""
    sweep = work / "sweep-startup.yaml"
    sweep.write_text(yaml.safe_dump(doc, sort_keys=False))
    load_before = os.getloadavg()[0]
    r = run_linksweep(sweep, work, 0)
    return {**read_startup(r["db"], load_before), "command_wall_s": r["wall_s"]}


PHASE_COLUMNS = ("placement", "process_start", "imports", "pg_init", "model_data_build",
                 "strategy_init", "rank_teardown", "teardown", "commit")  # fmt: skip
"""The non-step phases, in the order a run passes them (``workloads.contract.PHASES``)."""


def report_startup(startup: dict) -> None:
    from orchestrator.ui import print_table

    per = startup["per_strategy"]
    cols = ["strategy", "seq", "wall_s", "steps_s", "overhead_s", "ratio_to_ddp", "within_2x",
            *PHASE_COLUMNS]  # fmt: skip
    rows = [
        (st, f["seq"], f["wall_s"], f["steps_s"], f["overhead_s"], f["ratio_to_ddp"],
         "yes" if f["within_2x_ddp"] else "NO", *(f["phases"].get(p) for p in PHASE_COLUMNS))
        for st, f in per.items()
    ]  # fmt: skip
    print_table(
        cols,
        rows,
        title=f"\nstart-up per strategy (one sweep; each strategy's median run after repeat 1; "
        f"overhead = wall "
        f"- {' - '.join(STEP_PHASES)}; phases: slowest rank, s)",
        digits=3,
    )
    missing = [st for st in STRATEGIES if st not in per]
    failed = [st for st, f in per.items() if not f["within_2x_ddp"]]
    print(
        f"goal: every strategy's overhead within {STARTUP_GOAL:g}x DDP's: "
        + ("met" if not failed and not missing else f"NOT met ({', '.join(failed + missing)})")
        + f"; load (1 min) {startup['load_before']:.2f} before, {startup['load_after']:.2f} after"
    )


# --- start-up per launcher -------------------------------------------------------------------
LAUNCHERS = ("fork", "actors")
SHAPES = ("one_rank", "two_ranks")
LAUNCHER_REPEATS = 3
"""Runs per launcher sweep: the first also starts the node's launcher (fork) or warms Ray's
worker pool, so the figure is the median of the others."""
LAUNCHER_GOAL_S = 3.0
"""The goal: a forked run's start-up within 3 s (one-rank DDP, two ranks sharing a GPU)."""


def launcher_doc(
    shape: str, launcher: str, steps: int, warmup: int, repeats: int, gpu: bool
) -> dict:
    """One shape x launcher sweep: DDP, one rank or two (sharing one GPU with ``gpu``)."""
    from orchestrator.selftest.plan import base_workload

    doc = base_workload(cuda=gpu) | {"steps": steps, "warmup_steps": warmup, "repeats": repeats}
    two = {"world_size": 2, **({"ranks_per_gpu": 2} if gpu else {})}
    return doc | {
        "name": f"bench-launch-{shape}-{launcher}",
        "launcher": launcher,
        **({"world_size": 1} if shape == "one_rank" else two),
        "grid": {"strategy": [REFERENCE], "grad_accum": [1], "placement": ["pack"]},
    }


def launcher_summary(runs: list[dict], goal_s: float = LAUNCHER_GOAL_S, fork: bool = True) -> dict:
    """``per_run`` rows of one launcher sweep -> the median ok run after the first (of an even
    count the lower middle; with one run, that one): its start-up (the sum of
    ``START_UP_PHASES``), phases, and, for fork, whether it is within ``goal_s``. Pure."""
    from orchestrator.selftest.startup import START_UP_PHASES

    ok = [r for r in runs if r["status"] == "ok"]
    later = [r for r in ok if r["repeat"] > 1] or ok
    if not later:
        return {"n_runs": 0, "start_up_s": None, "phases": {}, "within_goal": False}
    for r in later:
        r["start_up_s"] = sum(r["phases"].get(p) or 0.0 for p in START_UP_PHASES)
    run = sorted(later, key=lambda r: r["start_up_s"])[(len(later) - 1) // 2]
    phases = {p: run["phases"][p] for p in START_UP_PHASES if p in run["phases"]}
    return {"n_runs": len(later), "start_up_s": run["start_up_s"], "phases": phases,
            "within_goal": (not fork) or run["start_up_s"] <= goal_s}  # fmt: skip


def run_launchers(work: Path, steps: int, warmup: int, repeats: int, gpu: bool) -> dict:
    """Every shape x launcher sweep, each its own ``linksweep run``; shape -> launcher ->
    :func:`launcher_summary` (or ``{"error": ...}`` for a sweep that failed)."""
    out: dict = {}
    for shape in SHAPES:
        for launcher in LAUNCHERS:
            sweep = work / f"sweep-{shape}-{launcher}.yaml"
            doc = launcher_doc(shape, launcher, steps, warmup, repeats, gpu)
            sweep.write_text(yaml.safe_dump(doc, sort_keys=False))
            try:
                r = run_linksweep(sweep, work, 0)
                with Reader(r["db"]) as reader:
                    runs = per_run(reader.rows(RUN_PHASES))
                got = launcher_summary(runs, fork=launcher == "fork")
            except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
                got = {"error": str(exc)}
                print(f"{shape} {launcher}: FAILED: {exc}", file=sys.stderr, flush=True)
            out.setdefault(shape, {})[launcher] = got
    return out


def report_launchers(launchers: dict, gpu: bool) -> None:
    from orchestrator.selftest.startup import START_UP_PHASES
    from orchestrator.ui import print_table

    rows = [
        (shape, launcher, f.get("n_runs"), f.get("start_up_s"),
         *(f.get("phases", {}).get(p) for p in START_UP_PHASES), f.get("error", ""))
        for shape, by in launchers.items() for launcher, f in by.items()
    ]  # fmt: skip
    where = "GPU: two ranks share one GPU" if gpu else "CPU"
    print_table(["shape", "launcher", "n_runs", "start_up_s", *START_UP_PHASES, "error"], rows,
                title=f"\nstart-up per run by launcher ({where}; the median run after the "
                "first; phases before the first step, compile left out, slowest rank, s)",
                digits=3)  # fmt: skip
    forks = [by.get("fork", {}) for by in launchers.values()]
    met = all(f.get("within_goal") for f in forks)
    print(f"goal: a forked run's start-up within {LAUNCHER_GOAL_S:g} s: "
          + ("met" if met else "NOT met"))  # fmt: skip


VERDICT_WORDS = {
    "within": f"within {TARGET:.0%} of torchrun (the whole interval is inside the band)",
    "outside": f"NOT within {TARGET:.0%} of torchrun (the whole interval is outside the band)",
    "undecided": f"UNDECIDED against the {TARGET:.0%} band (the interval straddles it, or fewer "
    "than 5 trials): run more trials, or on a quieter machine",
}

LINKSWEEP_ARMS = ("linksweep", "linksweep_actors", "linksweep_nice0")
"""The arms compared against ``torchrun``; ``linksweep_nice0`` only with --with-nice0."""


def verdict(per_trial: list[float], target: float = TARGET) -> tuple[str, tuple[float, float]]:
    """Is the step ratio within ``1 +- target``? Decided on the 95% bootstrap interval of the
    median per-trial ratio (each trial pairs the two sides back to back, so drift on a shared
    machine cancels within a pair): ``within`` when the interval lies inside the band,
    ``outside`` when it lies entirely outside, else ``undecided`` (more trials narrow it).
    Fewer than 5 trials give no interval worth the name: ``undecided``. Pure."""
    low, high = stats.bootstrap_median_ci(per_trial) if per_trial else (math.nan, math.nan)
    if len(per_trial) < 5:
        return "undecided", (low, high)
    if 1 - target <= low and high <= 1 + target:
        return "within", (low, high)
    if high < 1 - target or low > 1 + target:
        return "outside", (low, high)
    return "undecided", (low, high)


def _p10_summary(pairs: list[dict], arm: str) -> dict:
    """The same comparison on each run's 10th-percentile step (per step the slowest rank, as
    for the median). A neighbour that takes the cores for a few seconds slows a stretch of
    steps; over 150 steps the median absorbs short bursts but not bursts of tens of seconds,
    which on a shared machine move single trials by 10-25%. Such bursts reach the fastest tenth
    of the steps far less, while a cost linksweep put on every step (thread pools, allocator, a
    busy process beside the ranks) would move it like the median. Trials without the figure
    (JSON from before it was kept) give nothing. Pure."""
    if not all(t[arm].get("p10_step_time_s") and t["torchrun"].get("p10_step_time_s")
               for t in pairs):  # fmt: skip
        return {}
    per_trial = [t[arm]["p10_step_time_s"] / t["torchrun"]["p10_step_time_s"] for t in pairs]
    decision, ci = verdict(per_trial)
    return {
        "p10_median_trial_ratio": stats.median(per_trial),
        "p10_trial_ratio_range": [min(per_trial), max(per_trial)],
        "p10_verdict": decision,
        "p10_median_trial_ratio_ci": list(ci),
    }


def summarize(trials: list[dict]) -> dict:
    """Per linksweep arm: medians, ratio of medians vs torchrun, median per-trial ratio. Pure."""
    out: dict = {}
    for arm in LINKSWEEP_ARMS:
        pairs = [t for t in trials if t.get(arm) and t.get("torchrun")]
        if not pairs:
            continue
        ls = [t[arm]["median_step_time_s"] for t in pairs]
        tr = [t["torchrun"]["median_step_time_s"] for t in pairs]
        ratio = stats.median(ls) / stats.median(tr)
        per_trial = [a / b for a, b in zip(ls, tr, strict=True)]
        decision, ci = verdict(per_trial)
        out[arm] = {
            "n_pairs": len(pairs),
            "median_step_time_s": stats.median(ls),
            "torchrun_median_step_time_s": stats.median(tr),
            "ratio": ratio,
            "median_trial_ratio": stats.median(per_trial),
            "trial_ratio_range": [min(per_trial), max(per_trial)],
            "within_target": abs(ratio - 1.0) <= TARGET,
            "verdict": decision,  # on the bootstrap interval of the median per-trial ratio
            "median_trial_ratio_ci": list(ci),
            # Neighbours only ever add time, so the fastest run of each side is its least
            # disturbed one: a second opinion when the machine is busy.
            "ratio_of_min": min(ls) / min(tr),
            **_p10_summary(pairs, arm),
            "startup_s": stats.median([t[arm]["startup_s"] for t in pairs]),
            "first_run_startup_s": stats.median([t[arm]["first_run_startup_s"] for t in pairs]),
            "torchrun_startup_s": stats.median([t["torchrun"]["startup_s"] for t in pairs]),
            "wall_s": stats.median([t[arm]["wall_s"] for t in pairs]),
            "torchrun_wall_s": stats.median([t["torchrun"]["wall_s"] for t in pairs]),
        }
    return out


def report(trials: list[dict], summary: dict, arms: list[str]) -> None:
    from orchestrator.ui import print_table

    cols = ["trial", "arm", "step_s", "ratio_vs_torchrun", "startup_s", "wall_s"]
    rows = []
    for t in trials:
        tr = t.get("torchrun")
        for arm in arms:
            r = t.get(arm)
            if not r:
                continue
            ratio = r["median_step_time_s"] / tr["median_step_time_s"] if tr else None
            rows.append(
                (t["trial"], arm, r["median_step_time_s"], ratio, r["startup_s"], r["wall_s"])
            )
    print_table(cols, rows, title="per run (step: median over timed steps of max over ranks)")
    if not summary:
        print("no complete linksweep/torchrun pair: nothing to compare")
        return
    for arm, s in summary.items():
        verdict = VERDICT_WORDS[s["verdict"]]
        print(
            f"{arm}: median step {s['median_step_time_s']:.4f} s vs torchrun "
            f"{s['torchrun_median_step_time_s']:.4f} s over {s['n_pairs']} pair(s); "
            f"ratio {s['ratio']:.3f} (median per-trial ratio {s['median_trial_ratio']:.3f}, "
            f"fastest/fastest {s['ratio_of_min']:.3f}); "
            f"per-trial ratios {s['trial_ratio_range'][0]:.3f}..{s['trial_ratio_range'][1]:.3f}; "
            f"95% interval of the median per-trial ratio {s['median_trial_ratio_ci'][0]:.3f}.."
            f"{s['median_trial_ratio_ci'][1]:.3f}: {verdict}\n"
            f"  start-up to first step (median): {arm} {s['startup_s']:.2f} s per run (ranks "
            f"requested -> first step; the sweep's first run {s['first_run_startup_s']:.2f} s), "
            f"torchrun {s['torchrun_startup_s']:.2f} s (launch -> first step); "
            f"whole command: {s['wall_s']:.1f} s vs {s['torchrun_wall_s']:.1f} s"
        )
        if "p10_verdict" in s:
            lo, hi = s["p10_median_trial_ratio_ci"]
            print(
                f"  10th-percentile step (the least disturbed tenth of the steps): median "
                f"per-trial ratio {s['p10_median_trial_ratio']:.3f}, per-trial ratios "
                f"{s['p10_trial_ratio_range'][0]:.3f}..{s['p10_trial_ratio_range'][1]:.3f}; "
                f"95% interval {lo:.3f}..{hi:.3f}: {VERDICT_WORDS[s['p10_verdict']]}"
            )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=TRIALS, help="A/B pairs (default %(default)s)")
    p.add_argument("--steps", type=int, default=STEPS, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=WARMUP, help="warmup steps per run")
    p.add_argument(
        "--with-nice0",
        action="store_true",
        help="add a linksweep arm with RAY_worker_niceness=0 (ranks at nice 0, like torchrun)",
    )
    p.add_argument(
        "--without-actors",
        action="store_true",
        help="leave out arm linksweep_actors (fork and torchrun only: shorter trials)",
    )
    p.add_argument(
        "--startup-repeats",
        type=int,
        default=STARTUP_REPEATS,
        help="runs per strategy in the start-up sweep (default %(default)s; 0: no start-up sweep)",
    )
    p.add_argument(
        "--startup-only", action="store_true", help="only the start-up sweep (no trials)"
    )
    p.add_argument("--launchers", action="store_true", help="only the start-up per launcher")
    p.add_argument("--gpu", action="store_true", help="--launchers: two ranks share one GPU")
    p.add_argument("--launcher-repeats", type=int, default=LAUNCHER_REPEATS, help="runs a sweep")
    p.add_argument("--smoke", action="store_true", help="1 short trial, fork and torchrun only")
    p.add_argument("--json", help="write trials, summary and context here")
    p.add_argument("--keep", action="store_true", help="keep the temp folder (dbs, JSON)")
    args = p.parse_args(argv)
    if args.smoke:
        args.trials, args.steps, args.warmup, args.without_actors = 1, 1, 1, True
        args.startup_repeats, args.startup_only = 1, False
    seq_len = SMOKE_SEQ_LEN if args.smoke else SEQ_LEN
    if args.startup_only:
        args.trials = 0
    if args.trials < 0 or args.steps < 1 or args.warmup < 0 or args.startup_repeats < 0:
        p.error("--trials, --startup-repeats and --warmup must be >= 0, --steps >= 1")
    if args.startup_only and args.startup_repeats < 1:
        p.error("--startup-only needs --startup-repeats >= 1")

    if args.launchers:
        return launchers_main(args)
    from orchestrator.provenance import context as provenance

    context = {**provenance(), "sweep": sweep_doc(args.steps, args.warmup, seq_len=seq_len)}
    print(f"bench_overhead: {context['date']} cpus={context['cpus']} {context['versions']}")
    work = Path(tempfile.mkdtemp(prefix="linksweep-bench-overhead-"))
    sweep = work / "sweep.yaml"
    sweep.write_text(yaml.safe_dump(context["sweep"], sort_keys=False))
    # Two runs per linksweep sweep: the figures are the second run's (steady state: the fork
    # server is warm), the first run's start-up is shown apart. torchrun runs the first sweep's
    # variant once per trial.
    fork = work / "sweep-fork.yaml"
    fork.write_text(
        yaml.safe_dump(sweep_doc(args.steps, args.warmup, 2, "fork", seq_len), sort_keys=False)
    )
    actors = work / "sweep-actors.yaml"
    actors.write_text(
        yaml.safe_dump(sweep_doc(args.steps, args.warmup, 2, "actors", seq_len), sort_keys=False)
    )
    startup_sweep = startup_doc(args.steps, args.warmup, args.startup_repeats, seq_len)
    context["startup_sweep"] = startup_sweep
    startup: dict = {}
    arms = {
        "linksweep": lambda i: run_linksweep(fork, work, i),
        "torchrun": lambda i: run_torchrun(sweep, work, i),
        "linksweep_actors": lambda i: run_linksweep(actors, work, i),
    }
    if args.without_actors:
        del arms["linksweep_actors"]
    if args.with_nice0:
        arms["linksweep_nice0"] = lambda i: run_linksweep(actors, work, i, RAY_worker_niceness="0")
    if args.smoke:  # one Ray start for both: the arm's figure is the start-up sweep's DDP run
        smoke_sweep = work / "sweep-startup.yaml"
        smoke_sweep.write_text(yaml.safe_dump(startup_sweep, sort_keys=False))
        ddp_at = last_ddp_index(startup_sweep)
        arms["linksweep"] = lambda i: run_linksweep(smoke_sweep, work, i, pick=ddp_at)
    context["arms"] = list(arms)
    trials: list[dict] = []
    interrupted = False
    load_before = os.getloadavg()[0]
    try:
        for i in range(1, args.trials + 1):  # arms interleaved: A, B, (C), A, B, (C)...
            trial: dict = {"trial": i}
            trials.append(trial)
            for arm, fn in arms.items():
                try:
                    trial[arm] = r = fn(i)
                except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
                    # A failed run is data: recorded, reported, and the other runs go on.
                    trial.setdefault("errors", {})[arm] = str(exc)
                    print(f"trial {i} {arm:15s}: FAILED: {exc}", file=sys.stderr, flush=True)
                    continue
                print(
                    f"trial {i} {arm:15s}: step {r['median_step_time_s']:.4f} s, "
                    f"start-up {r['startup_s']:.2f} s, wall {r['wall_s']:.1f} s",
                    flush=True,
                )
                if args.smoke and arm == "linksweep":
                    startup = read_startup(r["db"], load_before)
        if args.startup_repeats and not args.smoke:
            try:
                startup = run_startup(startup_sweep, work)
            except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
                startup = {"error": str(exc)}
                print(f"start-up sweep: FAILED: {exc}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: reporting the finished trials", file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    summary = summarize(trials)
    if trials:
        report(trials, summary, list(arms))
    if startup.get("per_strategy"):
        report_startup(startup)
    if args.json:
        doc = {"context": context, "trials": trials, "summary": summary, "startup": startup}
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str))
    if interrupted:
        return 130
    if args.startup_only:
        return 0 if startup.get("per_strategy") else 1
    return 0 if summary else 1  # 1: no trial completed a linksweep/torchrun pair


def launchers_main(args: argparse.Namespace) -> int:
    """``--launchers``: the start-up per launcher alone (see the module docstring)."""
    from orchestrator.provenance import context as provenance

    if args.launcher_repeats < 1:
        raise SystemExit("--launcher-repeats must be >= 1")
    context = provenance()
    print(f"bench_overhead --launchers: {context['date']} cpus={context['cpus']}")
    work = Path(tempfile.mkdtemp(prefix="linksweep-bench-launchers-"))
    try:
        launchers = run_launchers(work, args.steps, args.warmup, args.launcher_repeats, args.gpu)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report_launchers(launchers, args.gpu)
    if args.json:
        doc = {"context": context, "launchers": launchers}
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str))
    failed = any("error" in f for by in launchers.values() for f in by.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
