"""``linksweep selftest [--out DIR] [--address ADDR] [--quick] [--only CHECK,...] [--dry-run]
[--peak-tflops X]``: the acceptance run for a node.

One command runs doctor, the node probes (topo, NVML), one fleet check (``linksweep fleet`` on
the default network, ``--pairs all``), and the selftest's sweeps (one rank, two ranks over DDP
and ZeRO-1/2/3 at grad_accum 1 and 8, two ranks over FSDP2 at grad_accum 2, NVMe offload, a
forced hang), each through the machinery ``linksweep fleet`` and ``linksweep run`` use, into
one folder:

    checks.csv            check, result (pass | fail | not run), detail: one row per check
    results.duckdb        every run of every selftest sweep and the fleet check's rows
                          (fleet_* tables), for ``linksweep query --db``
    fleet.txt             the fleet check's summary: nodes, busbw, health notes, suspects
    sweeps/*.yaml         the sweep files it ran (``orchestrator/selftest/plan.py`` ``sweep_specs``)
    doctor.txt            ``linksweep doctor``'s output
    plan.txt              the plan it ran (what ``--dry-run`` prints): checks, nodes, time
    nodes.json            each node's probe report (topo text, NVML inventory, CUDA, versions)
    nvml-inventory.json   each node's NVML inventory
    nvidia-smi-topo-m-HOST.txt, nvidia-smi-q-HOST.txt   raw captures on each node that has
                          nvidia-smi (taken there: the driver machine may have no GPU)
    nccl/transports.csv   the NCCL channels each run's log showed (empty on gloo)
    nccl/<run_id>-<source>.log   each run's raw NCCL_DEBUG=INFO log (none on gloo)
    hang/                 the hung run's stacks and NCCL flight-recorder dumps, per rank

Which checks run where, and their sweeps, is ``orchestrator/selftest/plan.py`` (pure, from the
nodes' probe reports); how each is decided is ``orchestrator/selftest/verdicts.py``; here is only
the I/O. ``--dry-run`` prints the plan (``orchestrator/selftest/plan_text.py``) and runs nothing: no
sweep, no fleet check, no folder. Exit 0 only if every check that ran passed; 1 otherwise; 2 when
the cluster cannot be joined or ``--out`` already holds a selftest.

May import: doctor, shared, orchestrator.cli_help, orchestrator.topology.discovery, orchestrator.sweep.ds_check,
orchestrator.errors, orchestrator.fleet.loop, orchestrator.fleet.pairs, orchestrator.fleet.tables,
orchestrator.fleet.summary, orchestrator.sweep.preflight, orchestrator.raycluster.session,
orchestrator.selftest.fleet_facts, orchestrator.selftest.plan, orchestrator.selftest.plan_text,
orchestrator.selftest.startup, orchestrator.selftest.verdicts, orchestrator.sweep.spec,
orchestrator.sweep.stopping, orchestrator.store,
orchestrator.sweep.execute, orchestrator.ui, yaml.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import csv
import dataclasses
import io
import json
import os
import re
import socket
import sys
import time
from pathlib import Path

from orchestrator.cli_help import ADDRESS_HELP
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, err
from orchestrator.selftest import fleet_facts, plan, startup
from orchestrator.selftest import verdicts as verdict


def add_parser(sub) -> None:
    s = sub.add_parser(
        "selftest",
        help="acceptance run for a node: doctor, topo, fleet, training, ZeRO, FSDP2, NVMe, a "
        "forced hang",
        description="Run doctor, the node probes, one fleet check (fleet.txt) and short sweeps "
        "(one rank; two ranks over DDP "
        "and ZeRO-1/2/3 at grad_accum 1 and 8; FSDP2 at grad_accum 2, its bytes against "
        "theory and its accumulation check; NVMe offload; a forced hang) and write one "
        "folder: raw captures, the results database and checks.csv (check, pass|fail|not run, "
        "detail). Checks needing CUDA read 'not run: no CUDA' on a CPU machine.",
        epilog="exit codes: 0 every check that ran passed; 1 a check failed; 2 bad input "
        "(cluster unreachable, --out already used); 130 interrupted",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="the folder to write (default: ./selftest-HOST); must not hold a selftest yet",
    )
    s.add_argument("--address", default=None, help=ADDRESS_HELP)
    s.add_argument(
        "--quick",
        action="store_true",
        help="one run of each kind (one rank; two ranks and two GPUs: zero3 at grad_accum 1; "
        "FSDP2; NVMe; the hang) and no fleet check (default: every check)",
    )
    s.add_argument(
        "--dry-run",
        action="store_true",
        help="print the checks it would run, on which nodes and GPUs, which it would skip and "
        "why, and the time it should take; run nothing (default: run the checks)",
    )
    s.add_argument(
        "--only",
        type=_only,
        default=(),
        metavar="CHECK,...",
        help="these checks and no other (names as in checks.csv, e.g. one_rank,"
        "one_rank_launchers,rehearsal_shared_gpu,shared_gpu_fork for the launchers' start-up); "
        "only the sweeps they are decided from run (default: every check)",
    )
    s.add_argument(
        "--peak-tflops",
        type=_peak,
        default=None,
        metavar="X",
        help="dense peak TFLOP/s per GPU for MFU in the GPU sweeps (ignored on CPU), for a GPU "
        "the built-in table lacks (default: the table in orchestrator/analysis/flops.py)",
    )
    s.set_defaults(func=main)


def _only(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if problems := plan.only_errors(names) or ([] if names else ["--only: no check named"]):
        raise argparse.ArgumentTypeError("; ".join(problems))
    return names


def _peak(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}; allowed: a number of TFLOP/s above 0")
    return value


def main(args: argparse.Namespace) -> int:
    from orchestrator.commands.shared import join_cluster
    from orchestrator.raycluster import session
    from orchestrator.sweep import stopping

    quick, peak = args.quick, getattr(args, "peak_tflops", None)
    only = getattr(args, "only", ())
    if getattr(args, "dry_run", False):
        if join_cluster(args.address) is None:
            return EXIT_BAD_INPUT
        try:
            print(dry_run(quick, peak, only))
        finally:
            session.disconnect()
        return EXIT_OK
    out = Path(args.out or f"selftest-{socket.gethostname().split('.')[0]}")
    if (out / "results.duckdb").exists() or (out / "checks.csv").exists():
        err(f"--out {out} already holds a selftest; name a new folder")
        return EXIT_BAD_INPUT
    (out / "sweeps").mkdir(parents=True, exist_ok=True)
    label = join_cluster(args.address)
    if label is None:
        return EXIT_BAD_INPUT
    restore_signals = stopping.install()
    try:
        verdicts = _selftest(out, label, args.address, quick, peak, only)
    except KeyboardInterrupt as exc:  # stopping.SweepStopped
        err(f"selftest {stopping.describe(exc)}; what ran is in {out}")
        return stopping.exit_code(exc)
    finally:
        session.disconnect()
        restore_signals()
    _print_table(verdicts)
    print(f"selftest: {out}/checks.csv, database {out}/results.duckdb")
    return EXIT_OK if verdict.exit_ok(verdicts) else EXIT_FAILED


def plan_here(
    quick: bool, peak_tflops: float | None, only: tuple[str, ...] = ()
) -> tuple[list, plan.SelftestPlan]:
    """The joined cluster's nodes probed (``discovery.discover_nodes``) and the plan for them."""
    from orchestrator.topology.discovery import discover_nodes

    reports = discover_nodes()
    facts = [plan.NodeFacts.from_report(r) for r in reports]
    return reports, plan.plan_selftest(facts, quick, peak_tflops, only)


def dry_run(quick: bool, peak_tflops: float | None, only: tuple[str, ...] = ()) -> str:
    """``--dry-run``: the plan for the joined cluster, as text; probes the nodes, runs nothing."""
    from orchestrator.selftest.plan_text import plan_text

    return plan_text(plan_here(quick, peak_tflops, only)[1])


def _selftest(
    out: Path,
    label: str,
    address: str | None,
    quick: bool,
    peak_tflops: float | None = None,
    only: tuple[str, ...] = (),
) -> list[verdict.Verdict]:
    from orchestrator.selftest.plan_text import plan_text

    started = time.monotonic()
    doctor_exit, doctor_text = _doctor(out, address)
    reports, the_plan = plan_here(quick, peak_tflops, only)
    nodes = _write_nodes(out, reports)
    text = plan_text(the_plan)
    (out / "plan.txt").write_text(text + "\n")
    print(text, flush=True)
    captures = _capture_nvidia_smi(out)  # also where torch sees no CUDA: it may be torch's fault
    db = str(out / "results.duckdb")
    fleet = _run_fleet(out, db, label) if the_plan.fleet else None
    sweeps = {key: _run_sweep(out, db, label, key, spec) for key, spec in the_plan.sweeps.items()}
    runs, diagnostics = _read_back(out, db)
    start_up = _rows(db, startup.START_UP_SQL) if os.path.exists(db) else []
    facts = verdict.Facts(
        doctor_exit=doctor_exit,
        doctor_problems="; ".join(
            line.strip() for line in doctor_text.splitlines() if "[INVALIDATES]" in line
        ),
        nodes=tuple(nodes),
        captures=captures,
        sweeps={
            k: dataclasses.replace(s, runs=tuple(r for r in runs if r["sweep"] == name))
            for k, s in sweeps.items()
            for name in [plan.sweep_name(k)]
        },
        diagnostics=tuple(diagnostics),
        fleet=fleet,
        start_up=tuple(start_up),
    )
    verdicts = verdict.decide(facts, the_plan)
    _report_start_up(out, startup.start_up_table(facts, the_plan))
    print(
        f"selftest: took {time.monotonic() - started:.0f} s; the plan expected about "
        f"{the_plan.estimate_s:.0f} s, at most {the_plan.bound_s:.0f} s",
        file=sys.stderr,
    )
    _write_checks(out, verdicts)
    return verdicts


def _doctor(out: Path, address: str | None) -> tuple[int, str]:
    """``linksweep doctor`` on the joined cluster, its output kept in doctor.txt and shown."""
    from orchestrator.commands import doctor

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = doctor.main(argparse.Namespace(address=address))
    text = buf.getvalue()
    (out / "doctor.txt").write_text(text)
    print(text, end="")
    return code, text


def _write_nodes(out: Path, reports) -> list[dict]:
    """nodes.json and nvml-inventory.json; the facts the verdict reads, per node."""
    from orchestrator.topology.discovery import parse_report_topo

    (out / "nodes.json").write_text(json.dumps([r.to_dict() for r in reports], indent=1))
    inventory = {r.hostname: {"nvml": r.nvml_status, "gpus": r.inventory} for r in reports}
    (out / "nvml-inventory.json").write_text(json.dumps(inventory, indent=1))
    nodes = []
    for r in reports:
        topo = parse_report_topo(r) if r.topo_text is not None else None
        nodes.append(
            {
                "hostname": r.hostname,
                "error": r.error,
                "cuda_available": r.cuda_available,
                "cuda_device_count": r.cuda_device_count,
                "topo_ok": topo is not None,
                "topo_gpus": 0 if topo is None else len(topo.gpus),
                "topo_status": r.topo_status,
                "nvml_gpus": len(r.inventory),
                "ray_gpus": r.gpus,
            }
        )
    return nodes


def _capture_nvidia_smi(out: Path) -> dict[str, dict[str, str]]:
    """``nvidia-smi topo -m`` and ``-q`` on every node, verbatim, as
    ``nvidia-smi-topo-m-HOST.txt`` and ``nvidia-smi-q-HOST.txt`` wherever nvidia-smi answered
    (a CPU-only torch on a GPU node shows there); per hostname, name -> ok or why not."""
    from orchestrator.topology.discovery import capture_on_every_node

    status: dict[str, dict[str, str]] = {}
    for host, captures in capture_on_every_node():
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", host)
        for name, got in captures.items():
            if got["text"] is not None:
                stem = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")
                (out / f"{stem}-{safe}.txt").write_text(got["text"])
        status[host] = {name: str(got["status"]) for name, got in captures.items()}
    return status


def _run_fleet(out: Path, db: str, label: str) -> fleet_facts.FleetFacts:
    """One fleet check on the joined cluster (the default network, every pair, the default
    size) into the selftest's database, as ``linksweep fleet`` runs it; its summary into
    fleet.txt; its rows read back. A check that raises fails the ``fleet`` check, with why."""
    from orchestrator.fleet.loop import FleetOptions, run_fleet
    from orchestrator.fleet.pairs import parse_pairs
    from orchestrator.fleet.tables import DEFAULT_LINK
    from orchestrator.store import StoreError, check_writable
    from orchestrator.store.live import LiveStore

    def say(msg: str) -> None:
        print(f"selftest: {msg}", file=sys.stderr, flush=True)

    ran, why_not = True, ""
    try:
        check_writable(db)
        store = LiveStore(db)
        store.recover()
        run_fleet(
            store, FleetOptions(links={DEFAULT_LINK: {}}, pairs=parse_pairs("all")), label, say
        )
    except StoreError as exc:
        ran, why_not = False, str(exc)
    except Exception as exc:  # noqa: BLE001 - run_fleet stored it as a failed check; go on
        ran, why_not = False, f"{type(exc).__name__}: {exc}"
    if why_not:
        err(f"selftest: the fleet check failed: {why_not}")
    text = _fleet_text(db) or f"no fleet check stored: {why_not}"
    (out / "fleet.txt").write_text(text + "\n")
    if not os.path.exists(db):
        return fleet_facts.FleetFacts(ran, why_not)
    return fleet_facts.FleetFacts(
        ran,
        why_not,
        checks=tuple(_rows(db, fleet_facts.FLEET_CHECKS_SQL)),
        nodes=tuple(_rows(db, fleet_facts.FLEET_NODES_SQL)),
        pairs=tuple(_rows(db, fleet_facts.FLEET_PAIRS_SQL)),
        suspects=tuple(_rows(db, fleet_facts.FLEET_SUSPECTS_SQL)),
    )


def _fleet_text(db: str) -> str | None:
    """The stored fleet check's summary as ``linksweep fleet`` prints it; None when none."""
    from orchestrator.fleet.summary import summary_text
    from orchestrator.store.snapshot import NoSuchFleet, load_fleet

    if not os.path.exists(db):
        return None
    try:
        return summary_text(**load_fleet(db, "latest"))
    except NoSuchFleet:
        return None


def _rows(db: str, sql: str) -> list[dict]:
    from orchestrator.store import read_query

    cols, values = read_query(db, sql)
    return [dict(zip(cols, v, strict=True)) for v in values]


def _run_sweep(out: Path, db: str, label: str, key: str, spec_dict: dict) -> verdict.SweepFacts:
    """One selftest sweep through ``execute_sweep``, as ``linksweep run`` runs it, on the
    cluster already joined; a sweep refused before running (``preflight``: no async_io for
    NVMe) is not run, with the refusal as its reason."""
    import yaml

    from orchestrator.store import StoreError, check_writable
    from orchestrator.store.live import LiveStore
    from orchestrator.sweep import preflight
    from orchestrator.sweep.execute import execute_sweep
    from orchestrator.sweep.spec import SpecError, deepspeed_runs, load_spec
    from orchestrator.ui import SweepUI

    path = out / "sweeps" / f"{key}.yaml"
    path.write_text(yaml.safe_dump(spec_dict, sort_keys=False))
    print(f"selftest: sweep {path}", file=sys.stderr)
    try:
        spec = load_spec(str(path))
        if deepspeed_runs(spec):
            from orchestrator.sweep.ds_check import check_deepspeed

            if problems := check_deepspeed(spec):
                raise SpecError(problems, str(path))
        check_writable(db)
        preflight.preflight(spec)
        bundle = preflight.check_cluster(spec)
        store = LiveStore(db)
        store.recover()
        execute_sweep(spec, store, label, bundle, SweepUI())
    except preflight.NodeLacks as exc:
        err(str(exc))
        return verdict.SweepFacts(False, " ".join(str(exc).split()), node_lacks=True)
    except (SpecError, StoreError) as exc:
        err(str(exc))
        return verdict.SweepFacts(False, " ".join(str(exc).split()))
    except Exception as exc:  # noqa: BLE001 - a sweep that crashes fails its checks; the rest run
        err(f"selftest: sweep {key} crashed: {type(exc).__name__}: {exc}")
        return verdict.SweepFacts(False, f"sweep crashed: {type(exc).__name__}: {exc}")
    return verdict.SweepFacts(True)


def _read_back(out: Path, db: str) -> tuple[list[dict], list[dict]]:
    """The stored runs and diagnostics; NCCL transports and the hung run's dumps into files."""
    from orchestrator.store import read_query

    if not os.path.exists(db):
        return [], []
    runs = _rows(db, verdict.RUNS_SQL)
    diagnostics = _rows(db, verdict.DIAGNOSTICS_SQL)
    (out / "nccl").mkdir(exist_ok=True)
    cols, values = read_query(db, verdict.TRANSPORTS_SQL)
    with open(out / "nccl" / "transports.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(cols)
        w.writerows(values)
    for log in _rows(db, verdict.NCCL_LOGS_SQL):
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{log['run_id']}-{log['source']}")
        (out / "nccl" / f"{name}.log").write_text(log["text"])
    (out / "hang").mkdir(exist_ok=True)
    for d in diagnostics:
        stem = f"{out / 'hang'}/{d['run_id']}-r{d['rank']}"
        if d["python_stack"]:
            Path(f"{stem}.stack.txt").write_text(d["python_stack"])
        if d["nccl_trace"]:
            Path(f"{stem}.nccl-trace.bin").write_bytes(base64.b64decode(d["nccl_trace"]))
        if d["error"]:
            Path(f"{stem}.error.txt").write_text(d["error"])
    big = ("python_stack", "nccl_trace")
    return runs, [{k: v for k, v in d.items() if k not in big} for d in diagnostics]


def _report_start_up(out: Path, rows: list[tuple]) -> None:
    """Each launcher's start-up per run, side by side (``startup.csv``, and printed)."""
    from orchestrator.ui import print_table, write_csv

    with open(out / "startup.csv", "w", newline="") as f:
        write_csv(list(startup.START_UP_COLUMNS), rows, f)
    print_table(
        list(startup.START_UP_COLUMNS),
        rows,
        title="start-up per run by launcher (s; placement to the first step, compile left "
        "out; median of the ok runs, each phase the slowest rank's; a node's launcher starts "
        "once per selftest, before its first forked run, and is in no run's start-up)",
        digits=3,
    )


def _write_checks(out: Path, verdicts: list[verdict.Verdict]) -> None:
    with open(out / "checks.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["check", "result", "detail"])
        w.writerows([v.check, v.result, v.detail] for v in verdicts)


def _print_table(verdicts: list[verdict.Verdict]) -> None:
    from orchestrator.ui import print_table

    rows = [(v.check, v.line(), v.detail if v.result != "not run" else "") for v in verdicts]
    print_table(["check", "result", "detail"], rows, title="selftest")
