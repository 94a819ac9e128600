"""Kill the driver again and again, resume each time: are runs lost or stored twice?

    python bench/bench_faults.py [--kills 20] [--repeats 12] [--commit-every 4] [--seed 1]
                                 [--max-delay 15] [--budget-s S] [--smoke] [--json OUT] [--keep]

One sweep (gpt2-tiny DDP, world_size 2, 2 links x ``--repeats`` = the planned runs, 2 timed
steps each) is started with ``linksweep run`` on its own embedded Ray, then killed with SIGKILL
``--kills`` times, each time resumed with ``linksweep run --resume``:
- a random kill: SIGKILL after a delay drawn uniformly from [1, ``--max-delay``] s after the
  process started (during Ray's start, a run, a commit, a statistics refresh...);
- every ``--commit-every``-th kill is *during a commit*: the driver gets
  ``LINKSWEEP_KILL_IN_COMMIT=SEQ`` (SEQ: the next run it will store) and SIGKILLs itself after
  that run is spooled and before the database has it.
After the last kill one more ``--resume`` completes the sweep.

Reported (and written with ``--json``):
- lost: planned (link, repeat) pairs with no current ``ok`` run at the end (goal 0);
- duplicated: pairs with more than one current run (goal 0); runs without their steps;
- per resume: seconds from launching ``--resume`` to the first step of its first new run
  (``runs.started_at`` + ``runs.startup_s``, i.e. Ray start + topology probe + placement +
  actor start + rendezvous + model build) and to that run being stored;
- per kill: seconds until every process of the killed driver's embedded Ray was gone;
- commit kills: whether the spooled run was stored by the resume without running again.

Figures (``--json``: ``summary.KEY``, next to ``sessions``): ``lost``, ``duplicated``,
``ok_runs_without_steps``, ``commit_kills_stored_once_from_spool`` (of ``commit_kills``),
``resume_to_first_step_s`` (``n``, ``median``, ``max``: to the first step of a run the resume
started itself, not of one it committed from the spool) and ``ray_gone_after_kill_s``
(``median``, ``max``, ``never``: not gone within 30 s).

``--smoke``: 1 kill (during a commit) of a 2-run sweep, then the completing resume: a check that
the script runs, not a measurement.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.store import Q, Reader, StoreError  # noqa: E402
from orchestrator.sweep.ledger import KILL_IN_COMMIT_ENV  # noqa: E402
from orchestrator.watchdog import _stat, descendants  # noqa: E402

FIGURES = (
    "summary.lost",
    "summary.duplicated",
    "summary.ok_runs_without_steps",
    "summary.commit_kills_stored_once_from_spool",
    "summary.resume_to_first_step_s.median",
    "summary.ray_gone_after_kill_s.median",
)
"""The ``--json`` keys (dotted) every run, ``--smoke`` too, writes."""

SWEEP = """
name: faults
model: gpt2-tiny
dataset: builtin
precision: fp32
seq_len: 32
micro_batch_size: 2
steps: 2
warmup_steps: 1
repeats: {repeats}
world_size: 2
links: {{default: {{}}, other: {{}}}}
grid: {{strategy: [ddp], grad_accum: [1], placement: [pack]}}
"""


def stored(db: str) -> list[dict]:
    if not os.path.exists(db):
        return []
    try:
        with Reader(db) as r:
            return r.rows(Q.BENCH_FAULT_RUNS)
    except StoreError:
        return []


def has_sweep(db: str) -> bool:
    """A kill before the driver wrote its sweep row leaves nothing to resume: start anew."""
    if not os.path.exists(db):
        return False
    try:
        with Reader(db) as r:
            return bool(r.rows(Q.LATEST_SWEEPS, limit=1))
    except StoreError:
        return False


def launch(sweep: str, db: str, resume: bool, env_extra: dict) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(REPO)
    env.update(env_extra)
    args = [sys.executable, "-m", "orchestrator", "run", sweep, "--db", db]
    return subprocess.Popen(
        args + (["--resume"] if resume else []),
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def gone_after(procs: dict[int, int], t_kill: float, limit_s: float = 30.0) -> float | None:
    while time.monotonic() - t_kill < limit_s:
        if all((st := _stat(p)) is None or st[1] != s for p, s in procs.items()):
            return time.monotonic() - t_kill
        time.sleep(0.05)
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=12)
    ap.add_argument("--commit-every", type=int, default=4)
    ap.add_argument("--max-delay", type=float, default=15.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="stop killing after this many seconds (then the last resume completes the sweep)",
    )
    ap.add_argument("--smoke", action="store_true", help="1 commit kill of a 2-run sweep")
    ap.add_argument("--json", default=None)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv)
    if args.smoke:
        args.kills, args.repeats, args.commit_every = 1, 1, 1
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="bench-faults-"))
    sweep, db = str(work / "faults.yaml"), str(work / "r.duckdb")
    Path(sweep).write_text(SWEEP.format(repeats=args.repeats))
    planned = 2 * args.repeats
    resumes = []
    t_start = time.monotonic()
    for i in range(args.kills + 1):
        before = {r["run_id"] for r in stored(db)}
        out_of_time = args.budget_s is not None and time.monotonic() - t_start > args.budget_s
        last = i == args.kills or out_of_time
        commit_kill = not last and args.commit_every and (i + 1) % args.commit_every == 0
        env = {}
        if commit_kill:
            done_seqs = {r["seq"] for r in stored(db)}
            env[KILL_IN_COMMIT_ENV] = str(min(set(range(1, planned + 1)) - done_seqs))
        t0_wall = dt.datetime.now(dt.timezone.utc)
        t0 = time.monotonic()
        resume = has_sweep(db)
        p = launch(sweep, db, resume=resume, env_extra=env)
        if last:
            rc = p.wait(timeout=3600)
            kills_info = None
        else:
            delay = rng.uniform(1.0, args.max_delay)
            procs: dict[int, int] = {}
            while p.poll() is None and (commit_kill or time.monotonic() - t0 < delay):
                procs.update(descendants(p.pid))
                time.sleep(0.05)
            if p.poll() is None:
                procs.update(descendants(p.pid))
                os.kill(p.pid, signal.SIGKILL)
            t_kill = time.monotonic()
            rc = p.wait(timeout=60)
            kills_info = {
                "kind": "commit" if commit_kill else "random",
                "at_s": round(t_kill - t0, 2),
                "rc": rc,
                "ray_gone_s": gone_after(procs, t_kill),
                "n_procs": len(procs),
            }
        after = stored(db)
        new = sorted((r for r in after if r["run_id"] not in before), key=lambda r: r["seq"])
        rec = {"session": i, "resume": resume, "rc": rc, "new_runs": len(new)}
        if kills_info:
            rec["kill"] = kills_info
            if commit_kill:
                rec["kill"]["spooled_seq"] = int(env[KILL_IN_COMMIT_ENV])
        # A run the resume ran itself: not one it committed from the spool (started earlier).
        started = [r for r in new if r["started_at"] >= t0_wall]
        if resume and started:
            first = started[0]
            stored_at = first["finished_at"]
            rec["to_first_step_s"] = round(
                (first["started_at"] - t0_wall).total_seconds() + (first["startup_s"] or 0), 2
            )
            rec["to_first_stored_s"] = round((stored_at - t0_wall).total_seconds(), 2)
        resumes.append(rec)
        print(json.dumps(rec, default=str), flush=True)
    final = stored(db)
    current = [r for r in final if r["superseded_by"] is None]
    by_pair: dict = {}
    for r in current:
        by_pair.setdefault((r["link"], r["repeat"]), []).append(r)
    pairs = [(link, rep) for rep in range(1, args.repeats + 1) for link in ("default", "other")]
    lost = [pr for pr in pairs if not any(r["status"] == "ok" for r in by_pair.get(pr, []))]
    duplicated = [pr for pr, rs in by_pair.items() if len(rs) > 1]
    no_steps = [r["run_id"] for r in current if r["status"] == "ok" and not r["n_step_rows"]]
    commit_recovered = []
    for rec in resumes:
        k = rec.get("kill")
        if k and k["kind"] == "commit":
            seq = k["spooled_seq"]
            # stored by the next open (the resume's first Store), never run a second time
            commit_recovered.append(sum(1 for r in final if r["seq"] == seq) == 1)
    firsts = [r["to_first_step_s"] for r in resumes if "to_first_step_s" in r]
    gone = [r["kill"]["ray_gone_s"] for r in resumes if r.get("kill")]
    went = [g for g in gone if g is not None]
    summary = {
        "planned_runs": planned,
        "kills": sum(1 for r in resumes if r.get("kill")),
        "commit_kills": len(commit_recovered),
        "stored_current_runs": len(current),
        "lost": len(lost),
        "duplicated": len(duplicated),
        "ok_runs_without_steps": len(no_steps),
        "commit_kills_stored_once_from_spool": sum(commit_recovered),
        "resume_to_first_step_s": {
            "n": len(firsts),
            "median": statistics.median(firsts) if firsts else None,
            "max": max(firsts) if firsts else None,
        },
        "ray_gone_after_kill_s": {
            "median": statistics.median(went) if went else None,
            "max": max(went, default=None),
            "never": sum(1 for g in gone if g is None),
        },
        "final_sweep_status": [r["sweep_status"] for r in final[:1]],
    }
    print(json.dumps(summary, indent=1, default=str))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"summary": summary, "sessions": resumes}, indent=1, default=str)
        )
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"kept {work}", file=sys.stderr)
    return 0 if not lost and not duplicated and not no_steps else 1


if __name__ == "__main__":
    sys.exit(main())
