"""How far this machine drifts: one sweep file run twice, and a slower link beside it.

    sudo .venv/bin/python bench/bench_drift.py [--repeats 3] [--steps 4] [--json OUT] [--keep]
    sudo .venv/bin/python bench/bench_drift.py --smoke [--json OUT] [--address A --state-dir D]

``linksweep compare`` judges a candidate sweep against a baseline; on a shared machine the same
sweep file does not give the same step times twice, and a gate must know by how much. This bench
measures it on the emulated 2-node cluster, with the sweeps of the issue's measurement (the
compare acceptance test, ``tests/integration/test_compare_emulated.py``, runs the same grid with
less compute per step: seq_len 32, micro-batch 1):

1. sweep A (baseline): gpt2-tiny, DDP and ZeRO-3, links ``fast`` (unshaped) and ``slow``
   (tc 500mbit), spread placement (one rank per node: every collective crosses the link);
2. the candidate: the same sweep with ``slow`` shaped at 200mbit instead;
3. sweep A again, into a fresh database: the candidate's duration apart from the first.

Each sweep goes into its own database. Per variant (strategy x link) it reports the run figures
(each run's median step time, slowest rank) of each sweep, the variant figures (median over runs)
and the ratios A2 / A1 (drift: nothing changed) and candidate / A1; per strategy the slowdown
(slow / fast within one sweep) of each sweep and the same two ratios. A slowdown divides out what
the machine did to both links alike, which is why a gate on a drifting machine should use it.

What it runs: ``linksweep cluster up --emulated`` in-process (2 nodes of 1 CPU, prefix ``lsd``)
with the links ``fast``, ``s500=500mbit`` and ``s200=200mbit`` (a sweep's ``slow`` names the
interface ``ls-s500`` or ``ls-s200``), three ``linksweep run`` against it in this process on one
connection (the nodes' launchers start once), then the cluster down (also on Ctrl-C or a
failure). ``--address ADDR --state-dir DIR``: a running emulated cluster with those links
instead (the test suite's shared one), neither brought up nor down; its nodes past the first
two are excluded, and its links' tc rates are stored only when DIR is linksweep's default. The cluster's state goes in linksweep's default state folder, so
each sweep stores the tc rate of its links (``link_overview``); with a cluster already recorded
there the bench exits 77. The full run (3 repeats, 4 timed steps, the link microbenchmark up to
2 MiB) took 18 min on 2 cores under load 2-8 from other jobs (each sweep 5.3-7 min);
``--smoke`` (DDP only, 1 repeat, 2 timed steps, no microbenchmark) 3.7 min under load 7-9: it
checks that the bench runs, its figures mean nothing.

Needs root, ``ip`` and ``tc`` (network namespaces), and the subnet 198.18.0.0/24 free (no other
emulated cluster up): otherwise it says why and exits 77 (skipped). Exit 0 when every run
succeeded; 1 when a run failed or a sweep did not run; 130 on Ctrl-C.

``--json OUT`` writes (``FIGURES`` names the figures among them, dotted; through a list: every
element):

- ``context``: date, CPU count, git sha and dirty flag, versions, the sweeps, smoke or not;
- ``linksweep_exit_codes``: ``linksweep run``'s, per sweep label (a1, candidate, a2);
- ``wall_s``: cluster up + three sweeps + cluster down, seconds;
- ``sweeps``: per sweep its ``label``, ``sweep_id``, database ``db`` (kept with ``--keep``),
  ``wall_s`` (the ``linksweep run`` command) and ``started_s`` (seconds after the first began);
- ``variants``: per (strategy, link) the run figures ``a1_runs``, ``a2_runs``,
  ``candidate_runs`` (seconds, in run order), the variant figures ``a1_s``, ``a2_s``,
  ``candidate_s`` and the ratios ``drift_ratio`` (a2_s / a1_s) and ``candidate_ratio``
  (candidate_s / a1_s);
- ``slowdowns``: per strategy the slowdown slow / fast of each sweep (``a1``, ``a2``,
  ``candidate``), ``drift_ratio`` (a2 / a1) and ``candidate_ratio`` (candidate / a1);
- ``drift_min``, ``drift_max``: the range of ``variants.drift_ratio``;
  ``slowdown_drift_min``, ``slowdown_drift_max``: the range of ``slowdowns.drift_ratio``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script from anywhere: import orchestrator

from orchestrator.emulated import (  # noqa: E402
    DEFAULT_STATE_DIR,
    IFACE_PREFIX,
    STATE_FILE,
    cluster_unavailable,
    parse_link_arg,
    recorded_node_ips,
)
from orchestrator.store import Q, Reader  # noqa: E402

FIGURES = (
    "wall_s",
    "sweeps.wall_s",
    "variants.a1_s",
    "variants.a2_s",
    "variants.candidate_s",
    "variants.drift_ratio",
    "variants.candidate_ratio",
    "slowdowns.a1",
    "slowdowns.a2",
    "slowdowns.candidate",
    "slowdowns.drift_ratio",
    "slowdowns.candidate_ratio",
    "drift_min",
    "drift_max",
    "slowdown_drift_min",
    "slowdown_drift_max",
)
"""The ``--json`` keys (dotted; through a list: every element) every run, ``--smoke`` too,
writes."""
SKIPPED = 77
"""Exit code of a bench that cannot run here: "skipped", as in automake's test harness."""
PREFIX = "lsd"
"""Namespace prefix: not the default "ls" (a user's cluster), nor the tests' or other benches'."""
CLUSTER_LINKS = ("fast", "s500=500mbit", "s200=200mbit")
"""One cluster for all three sweeps: the baseline's ``slow`` is ``s500``, the candidate's
``s200`` (the issue's 500mbit vs 200mbit), so no second cluster up/down is paid."""
BASELINE_SLOW, CANDIDATE_SLOW = "s500", "s200"
REPEATS = 3
"""Runs per variant, as in the issue's measurement: below 5, ranges, not intervals."""
STEPS = 4
WARMUP = 1
LINKBENCH_MAX_MB = 2
RUN_TIMEOUT_S = 300.0
"""Per-run hang guard (linksweep's run_timeout_s)."""


def sweep_doc(slow_iface: str, strategies: list[str], repeats: int, steps: int, linkbench: bool):
    """The sweep file; baseline and candidate differ only in the interface ``slow`` names."""
    doc = {
        "name": "drift-emulated",
        "model": "gpt2-tiny",
        "dataset": "builtin",
        "precision": "fp32",
        "seq_len": 64,
        "micro_batch_size": 2,
        "steps": steps,
        "warmup_steps": WARMUP,
        "repeats": repeats,
        "world_size": 2,
        "run_timeout_s": RUN_TIMEOUT_S,
        "links": {
            "fast": {"GLOO_SOCKET_IFNAME": IFACE_PREFIX + "fast"},
            "slow": {"GLOO_SOCKET_IFNAME": IFACE_PREFIX + slow_iface},
        },
        "grid": {"strategy": strategies, "placement": ["spread"], "linkbench": linkbench},
    }
    if linkbench:
        doc["linkbench_max_mb"] = LINKBENCH_MAX_MB
    return doc


def _ratio(a, b):
    return None if a is None or b in (None, 0) else a / b


def drift_tables(facts: dict[str, dict]) -> dict:
    """Per variant and per strategy, the three sweeps side by side with their ratios. Pure.

    ``facts[label]`` (label a1, a2, candidate) holds ``runs`` (rows with strategy, link, status,
    median_step_time_s, in run order), ``variants`` (strategy, link, median_step_time_s) and
    ``slowdowns`` (strategy, link, slowdown)."""
    labels = ("a1", "a2", "candidate")
    keys = sorted({(v["strategy"], v["link"]) for v in facts["a1"]["variants"]})
    variants = []
    for strategy, link in keys:
        row: dict = {"strategy": strategy, "link": link}
        for label in labels:
            f = facts[label]
            row[f"{label}_runs"] = [
                r["median_step_time_s"]
                for r in f["runs"]
                if (r["strategy"], r["link"]) == (strategy, link) and r["status"] == "ok"
            ]
            row[f"{label}_s"] = next(
                (
                    v["median_step_time_s"]
                    for v in f["variants"]
                    if (v["strategy"], v["link"]) == (strategy, link)
                ),
                None,
            )
        row["drift_ratio"] = _ratio(row["a2_s"], row["a1_s"])
        row["candidate_ratio"] = _ratio(row["candidate_s"], row["a1_s"])
        variants.append(row)
    slowdowns = []
    for strategy in sorted({s for s, _ in keys}):
        row = {"strategy": strategy}
        for label in labels:
            row[label] = next(
                (s["slowdown"] for s in facts[label]["slowdowns"] if s["strategy"] == strategy),
                None,
            )
        row["drift_ratio"] = _ratio(row["a2"], row["a1"])
        row["candidate_ratio"] = _ratio(row["candidate"], row["a1"])
        slowdowns.append(row)

    def span(rows, key):
        vals = [r[key] for r in rows if r[key] is not None]
        return (min(vals), max(vals)) if vals else (None, None)

    dmin, dmax = span(variants, "drift_ratio")
    smin, smax = span(slowdowns, "drift_ratio")
    return {
        "variants": variants,
        "slowdowns": slowdowns,
        "drift_min": dmin,
        "drift_max": dmax,
        "slowdown_drift_min": smin,
        "slowdown_drift_max": smax,
    }


def unavailable() -> str | None:
    """Why the emulated cluster cannot be brought up here, or None."""
    if why := cluster_unavailable():
        return why
    if (Path(DEFAULT_STATE_DIR) / STATE_FILE).exists():
        return f"an emulated cluster is recorded in {DEFAULT_STATE_DIR}"
    return None


def linksweep_run(sweep: Path, db: Path, address: str) -> int:
    """``linksweep run`` in this process, inside :func:`run_sweeps`' hold on the cluster."""
    from orchestrator import cli

    return cli.main(["run", str(sweep), "--db", str(db), "--address", address])


def run_sweeps(plan, files, work: Path, address: str, t0: float) -> tuple[dict, list[dict]]:
    """The plan's sweeps one after another, in this process, on one connection: the nodes'
    launchers (torch and DeepSpeed imported) start once, not once per sweep, and no sweep pays
    a Python start and a join (a user's ``linksweep run`` in a shell pays both: the figures
    here are about the runs, which are the same either way)."""
    from orchestrator.raycluster import session

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    codes: dict[str, int] = {}
    sweeps: list[dict] = []
    with session.held(address):
        for label, doc_name in plan:
            db = work / f"{label}.duckdb"
            start = time.monotonic()
            codes[label] = linksweep_run(files[doc_name], db, address)
            sweeps.append(
                {"label": label, "db": str(db), "wall_s": time.monotonic() - start,
                 "started_s": start - t0}
            )  # fmt: skip
    return codes, sweeps


def read_facts(db: str) -> dict:
    """The one sweep of a database: its id, runs, variant figures and slowdowns."""
    with Reader(db) as reader:
        (sweep,) = reader.rows(Q.LATEST_SWEEPS, limit=1)
        sid = sweep["sweep_id"]
        return {
            "sweep_id": sid,
            "runs": reader.rows(Q.REPORT_RUNS, sweep_id=sid),
            "variants": reader.rows(Q.REPORT_VARIANTS, sweep_id=sid),
            "slowdowns": reader.rows(Q.REPORT_SENSITIVITY, sweep_id=sid),
        }


def report(t: dict) -> None:
    from orchestrator.ui import print_table

    def num(x, fmt=".3f"):
        return "" if x is None else format(x, fmt)

    def runs(xs):
        return " ".join(num(x) for x in xs)

    rows = [
        (
            v["strategy"],
            v["link"],
            runs(v["a1_runs"]),
            runs(v["a2_runs"]),
            runs(v["candidate_runs"]),
            num(v["drift_ratio"]),
            num(v["candidate_ratio"]),
        )
        for v in t["variants"]
    ]
    print_table(
        [
            "strategy",
            "link",
            "A1 runs (s)",
            "A2 runs (s)",
            "candidate runs (s)",
            "A2/A1",
            "cand/A1",
        ],  # fmt: skip
        rows,
        title="run figures (median step, s) and variant ratios",
    )
    rows = [
        (
            s["strategy"],
            num(s["a1"]),
            num(s["a2"]),
            num(s["candidate"]),
            num(s["drift_ratio"]),
            num(s["candidate_ratio"]),
        )  # fmt: skip
        for s in t["slowdowns"]
    ]
    print_table(
        ["strategy", "slowdown A1", "A2", "candidate", "A2/A1", "cand/A1"],
        rows,
        title="slowdown slow / fast within each sweep",
    )
    print(
        f"drift A2/A1 over variants: {num(t['drift_min'])}-{num(t['drift_max'])}; "
        f"over slowdowns: {num(t['slowdown_drift_min'])}-{num(t['slowdown_drift_max'])}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny sweeps (~1.5 min): does it run?")
    p.add_argument("--repeats", type=int, default=None, help=f"default {REPEATS} (smoke: 1)")
    p.add_argument("--steps", type=int, default=None, help=f"timed steps, default {STEPS}")
    p.add_argument("--json", help="write the figures (FIGURES) here")
    p.add_argument("--keep", action="store_true", help="keep the temp folder (sweeps, databases)")
    p.add_argument(
        "--address",
        help="a running emulated cluster's Ray address (with the links fast, s500, s200), "
        "recorded in --state-dir: used as it is, not brought up or down; its nodes past the "
        "first two are excluded",
    )
    p.add_argument(
        "--state-dir",
        default=DEFAULT_STATE_DIR,
        help=f"with --address (default {DEFAULT_STATE_DIR})",
    )
    args = p.parse_args(argv)
    repeats = args.repeats or (1 if args.smoke else REPEATS)
    steps = args.steps or (2 if args.smoke else STEPS)
    if repeats < 1 or steps < 1:
        p.error("--repeats and --steps must be >= 1")
    if args.address is None and (why := unavailable()):
        print(f"bench_drift: skipped: {why}", file=sys.stderr)
        return SKIPPED

    from orchestrator.emulated import down, up
    from orchestrator.provenance import context as provenance

    strategies = ["ddp"] if args.smoke else ["ddp", "zero3"]
    docs = {
        "baseline": sweep_doc(BASELINE_SLOW, strategies, repeats, steps, not args.smoke),
        "candidate": sweep_doc(CANDIDATE_SLOW, strategies, repeats, steps, not args.smoke),
    }
    # a sweep starts a launcher on every node it may place a rank on: only the first two
    if args.address is not None and (others := recorded_node_ips(args.state_dir)[2:]):
        for doc in docs.values():
            doc["exclude_nodes"] = others
    context = {**provenance(), "sweeps": docs, "smoke": args.smoke}
    print(f"bench_drift: {context['date']} cpus={context['cpus']} {context['versions']}")
    work = Path(tempfile.mkdtemp(prefix="linksweep-bench-drift-"))
    files = {}
    for name, doc in docs.items():
        files[name] = work / f"{name}.yaml"
        files[name].write_text(yaml.safe_dump(doc, sort_keys=False))
    plan = [("a1", "baseline"), ("candidate", "candidate"), ("a2", "baseline")]
    codes: dict[str, int] = {}
    sweeps: list[dict] = []
    t0 = time.monotonic()
    interrupted = False
    try:
        if args.address is not None:
            codes, sweeps = run_sweeps(plan, files, work, args.address, t0)
        else:
            links = [parse_link_arg(s) for s in CLUSTER_LINKS]
            address = up(2, links, DEFAULT_STATE_DIR, prefix=PREFIX)
            try:
                codes, sweeps = run_sweeps(plan, files, work, address, t0)
            finally:
                leftovers = down(DEFAULT_STATE_DIR)
                if leftovers:
                    print(f"bench_drift: cluster down left {leftovers}", file=sys.stderr)
    except KeyboardInterrupt:
        interrupted = True
    wall_s = time.monotonic() - t0
    try:
        if interrupted or len(sweeps) < len(plan):
            print(f"bench_drift: not every sweep ran (exit codes {codes})", file=sys.stderr)
            return 130 if interrupted else 1
        facts = {s["label"]: read_facts(s["db"]) for s in sweeps}
        for s in sweeps:
            s["sweep_id"] = facts[s["label"]]["sweep_id"]
        tables = drift_tables(facts)
        what = "three sweeps" if args.address else "cluster up, three sweeps, cluster down"
        print(f"\nbench_drift: {wall_s:.0f} s ({what})")
        for s in sweeps:
            print(f"  {s['label']}: sweep {s['sweep_id']}, started at +{s['started_s']:.0f} s, "
                  f"{s['wall_s']:.0f} s")  # fmt: skip
        report(tables)
        if args.json:
            out = {
                "context": context,
                "linksweep_exit_codes": codes,
                "wall_s": wall_s,
                "sweeps": sweeps,
                **tables,
            }
            Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    finally:
        if args.keep:
            print(f"kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if all(c == 0 for c in codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
