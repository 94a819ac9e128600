"""``linksweep selftest``'s verdict, pure: pass, fail or not run for each check of the plan
(``orchestrator/selftest/plan.py``), from the facts the command stored and read back
(:class:`Facts`): :func:`decide`, one small function per check in :data:`DECIDERS`.

A check the plan skips is ``not run`` with the plan's reason (``no CUDA``, ``--quick``), never
passed: a GPU result is never faked. A figure the hardware cannot give (MFU of a GPU without a
known peak, NVML telemetry under MIG) is reported as unknown in the detail, never failed. The
command (``orchestrator/commands/selftest.py``) does the I/O: it reads the database with
:data:`RUNS_SQL`, :data:`DIAGNOSTICS_SQL` and the fleet SQL (``orchestrator/selftest/fleet_facts.py``,
which also decides the ``fleet`` and ``fleet_gpu`` checks) into :class:`Facts`.

May import: fleet_facts, plan, startup.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.selftest.fleet_facts import (
    FleetFacts,
    fleet_detail,
    fleet_gpu_detail,
    fleet_gpu_problems,
    fleet_problems,
    suspects_text,
)
from orchestrator.selftest.plan import CHECK_NAMES, SelftestPlan, planned_runs, sweep_name
from orchestrator.selftest.startup import start_up_text

Result = Literal["pass", "fail", "not run"]

# The facts, read back with orchestrator.store.read_query from the selftest's own database (it
# holds only the selftest's sweeps, so no parameter is needed).
RUNS_SQL = """
SELECT s.name AS sweep, r.run_id, r.launcher, r.strategy, r.grad_accum, r.offload, r.world_size,
       r.status, r.error, r.backend, r.n_steps, r.tokens_per_s, r.mfu, r.peak_tflops,
       r.peak_source, r.peak_mem_bytes, r.telemetry, r.link_class, r.ranks_per_gpu,
       r.nvme_swap_files, r.gpu_name, r.effective_transport, r.nccl_version, r.grad_sync,
       r.comm_bytes_per_step, r.expected_comm_bytes_per_step, r.comm_note, r.accum_check
FROM runs r JOIN sweeps s USING (sweep_id)
ORDER BY s.name, r.seq
"""
DIAGNOSTICS_SQL = """
SELECT d.run_id, d.rank, d.hostname,
       coalesce(length(d.python_stack), 0) > 0 AS has_stack,
       coalesce(length(d.nccl_trace), 0) > 0 AS has_nccl_trace,
       d.python_stack, d.nccl_trace, d.error
FROM diagnostics d ORDER BY d.run_id, d.rank
"""
TRANSPORTS_SQL = """
SELECT s.name AS sweep, t.run_id, t.rank, t.channel, t.peer, t.transport, t.detail
FROM transports t JOIN runs r USING (run_id) JOIN sweeps s USING (sweep_id)
ORDER BY s.name, t.run_id, t.rank, t.channel
"""

NCCL_LOGS_SQL = "SELECT run_id, source, text FROM nccl_logs ORDER BY run_id, source"
"""Every run's raw NCCL log (a rank's, or a failed run's file read from its node)."""

CAPTURES = ("nvidia-smi topo -m", "nvidia-smi -q")
"""The raw captures taken on every node (``workloads/probe.py`` ``capture_nvidia_smi``)."""


@dataclass(frozen=True)
class SweepFacts:
    """One selftest sweep: whether it ran (``why_not`` when it did not) and what it stored."""

    ran: bool
    why_not: str = ""
    runs: tuple[dict, ...] = ()
    """Rows of :data:`RUNS_SQL` for this sweep."""
    node_lacks: bool = False
    """Not run because a node lacks what it needs (``preflight.NodeLacks``: no libaio for NVMe
    offload), not because linksweep refused or failed: its checks are ``not run``."""


@dataclass(frozen=True)
class Facts:
    """Everything the verdict needs, gathered by the command; plantable in tests."""

    doctor_exit: int
    doctor_problems: str = ""
    nodes: tuple[dict, ...] = ()
    """Per node: hostname, error, cuda_available, cuda_device_count (all the node's GPUs: the
    probe drops CUDA_VISIBLE_DEVICES), topo_ok, topo_status, topo_gpus (GPUs in the parsed
    matrix), nvml_gpus (NVML inventory length), ray_gpus (what Ray offers)."""
    captures: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per hostname: capture name (:data:`CAPTURES`) -> ``ok`` or why not, taken on that node."""
    sweeps: dict[str, SweepFacts] = field(default_factory=dict)
    diagnostics: tuple[dict, ...] = ()
    """Rows of :data:`DIAGNOSTICS_SQL` (has_stack, has_nccl_trace per run and rank)."""
    fleet: FleetFacts | None = None
    """The selftest's fleet check; None: not run (``--quick``)."""
    start_up: tuple[dict, ...] = ()
    """Rows of ``startup.START_UP_SQL`` (every run's start-up phases)."""


@dataclass(frozen=True)
class Verdict:
    check: str
    result: Result
    detail: str

    def line(self) -> str:
        return f"not run: {self.detail}" if self.result == "not run" else self.result


@dataclass(frozen=True)
class Inputs:
    """What one check's decide function reads."""

    facts: Facts
    plan: SelftestPlan
    runs: list[dict]
    """The stored runs of the check's sweep (empty for a check without one)."""
    expected: list[tuple[str, int]]
    """(strategy, grad_accum) of every run the plan's sweep file asked for."""


Decision = tuple[Result, str]


def _trained(runs: list[dict]) -> list[str]:
    """Problems of runs that should have trained: one line each, empty when all trained."""
    bad = []
    for r in runs:
        name = f"{r['strategy']} grad_accum {r['grad_accum']}"
        if r["status"] != "ok":
            bad.append(f"{name}: {r['status']}: {(r['error'] or '').splitlines()[:1]}")
        elif not r["n_steps"] or not r["tokens_per_s"] or r["tokens_per_s"] <= 0:
            bad.append(f"{name}: no timed steps or tokens/s ({r['n_steps']}, {r['tokens_per_s']})")
    return bad


def _n(value, spec: str = ".0f") -> str:
    """A stored figure as text; ``-`` for NULL (a failed run has none)."""
    return "-" if value is None else format(value, spec)


def _result(problems: list[str], ok_detail: str) -> Decision:
    return ("fail", "; ".join(problems)) if problems else ("pass", ok_detail)


def _missing(runs: list[dict], expected: list[tuple[str, int]]) -> list[str]:
    have = {(r["strategy"], r["grad_accum"]) for r in runs}
    return [f"{s} grad_accum {g}: no run stored" for s, g in expected if (s, g) not in have]


def _doctor(i: Inputs) -> Decision:
    if i.facts.doctor_exit == 0:
        return "pass", "exit 0"
    return "fail", i.facts.doctor_problems or "exit 1"


def _topo(i: Inputs) -> Decision:
    nodes = i.facts.nodes
    problems = [f"{n['hostname']}: {n['error']}" for n in nodes if n["error"]]
    problems += [
        f"{n['hostname']}: topo {n['topo_status']}"
        for n in nodes
        if n["cuda_available"] and not n["topo_ok"]
    ]
    problems += [  # CUDA_VISIBLE_DEVICES may hide GPUs from CUDA, never from nvidia-smi
        f"{n['hostname']}: topo -m shows {n['topo_gpus']} GPU(s), CUDA sees "
        f"{n['cuda_device_count']}"
        for n in nodes
        if n["topo_ok"] and n["topo_gpus"] < n["cuda_device_count"]
    ]
    if not nodes:
        problems.append("no node answered the probe")
    gpus = sum(n["cuda_device_count"] for n in nodes)
    return _result(problems, f"{len(nodes)} node(s), {gpus} GPU(s) seen by CUDA")


def _gpu_captures(i: Inputs) -> Decision:
    """Judged on the nodes with a GPU only: a GPU-less head has no nvidia-smi to run."""
    gpu_nodes = [n for n in i.facts.nodes if n["cuda_available"] or n["nvml_gpus"]]
    problems = []
    for n in gpu_nodes:
        got = i.facts.captures.get(n["hostname"], {})
        problems += [
            f"{n['hostname']}: {name}: {got.get(name, 'not captured')}"
            for name in CAPTURES
            if got.get(name) != "ok"
        ]
        if n["cuda_available"] and n["nvml_gpus"] != n["cuda_device_count"]:
            problems.append(
                f"{n['hostname']}: NVML lists {n['nvml_gpus']} GPU(s), CUDA sees "
                f"{n['cuda_device_count']}"
            )
    if not gpu_nodes:
        problems.append("no node with a GPU answered the probe")
    hosts = ", ".join(n["hostname"] for n in gpu_nodes)
    return _result(problems, f"{', '.join(CAPTURES)} captured on {hosts}; NVML matches CUDA")


def _fleet(i: Inputs) -> Decision:
    """Suspects never fail it: naming them is the fleet check's job."""
    if i.facts.fleet is None:
        return "fail", "the fleet check was not run"
    if problems := fleet_problems(i.facts.fleet):
        return "fail", "; ".join([*problems, suspects_text(i.facts.fleet)])
    return "pass", fleet_detail(i.facts.fleet)


def _fleet_gpu(i: Inputs) -> Decision:
    if i.facts.fleet is None:
        return "fail", "the fleet check was not run"
    if problems := fleet_gpu_problems(i.facts.fleet):
        return "fail", "; ".join(problems)
    return "pass", fleet_gpu_detail(i.facts.fleet)


def _one_rank(i: Inputs) -> Decision:
    problems = _trained(i.runs) or _missing(i.runs, i.expected)
    figures = [f"{_n(r['tokens_per_s'])} tokens/s ({r['backend']})" for r in i.runs]
    return _result(problems, ", ".join(figures))


def _one_rank_launchers(i: Inputs) -> Decision:
    problems = _trained(i.runs) or _missing(i.runs, i.expected)
    return _result(problems, start_up_text(i.facts, i.plan, ("one_rank", "one_rank_alt")))


def _shared_gpu_fork(i: Inputs) -> Decision:
    problems = _trained(i.runs) + _missing(i.runs, i.expected)
    problems += _shared_gpu_problems(i.runs)
    return _result(problems, start_up_text(i.facts, i.plan, ("two_rank", "two_rank_fork")))


def _mfu_text(r: dict) -> str:
    """MFU with its peak, or why it is unknown (the GPU has no datasheet peak in the table)."""
    if r["mfu"] is not None and r["mfu"] > 0:
        return f"MFU {r['mfu']:.3f} (peak {_n(r['peak_tflops'], '.0f')} TFLOP/s)"
    return f"MFU unknown: {r['peak_source'] or 'no peak for this GPU'}"


def _one_rank_gpu_figures(i: Inputs) -> Decision:
    """Fails on what a working GPU path always gives (NCCL, peak memory, MFU where the peak is
    known); MFU without a peak and the telemetry mode (``absent`` under MIG, fewer readings on
    old drivers) are what the hardware allows, so they are reported, not failed."""
    problems = []
    for r in i.runs:
        if r["backend"] != "nccl":
            problems.append(f"backend {r['backend']}, expected nccl")
        if not r["peak_mem_bytes"] or r["peak_mem_bytes"] <= 0:
            problems.append("no peak memory")
        if r["peak_tflops"] and not (r["mfu"] and r["mfu"] > 0):
            problems.append(f"no MFU though the peak is known ({r['peak_tflops']} TFLOP/s)")
    figures = [
        f"{_mfu_text(r)}, peak memory {_n((r['peak_mem_bytes'] or 0) / 1e9, '.2f')} GB, "
        f"telemetry {r['telemetry'] or '-'}, {r['gpu_name']}"
        for r in i.runs
    ]
    return _result(problems or _missing(i.runs, i.expected), ", ".join(figures))


def _two_rank_of(strategy: str) -> Callable[[Inputs], Decision]:
    def decide(i: Inputs) -> Decision:
        strategy_runs = [r for r in i.runs if r["strategy"] == strategy]
        wanted = [(s, g) for s, g in i.expected if s == strategy]
        problems = _trained(strategy_runs) + _missing(strategy_runs, wanted)
        figures = [f"ga {r['grad_accum']}: {_n(r['tokens_per_s'])} tokens/s" for r in strategy_runs]
        return _result(problems, ", ".join(figures))

    return decide


def _shared_gpu_problems(runs: list[dict]) -> list[str]:
    return [
        f"{r['strategy']} grad_accum {r['grad_accum']}: link_class {r['link_class']}, "
        f"backend {r['backend']}"
        for r in runs
        if r["link_class"] != "shared-gpu" or r["backend"] != "nccl"
    ]


def _rehearsal_shared_gpu(i: Inputs) -> Decision:
    problems = _shared_gpu_problems(i.runs)
    return _result(problems or _missing(i.runs, i.expected), "shared-gpu, nccl")


def _two_gpu(i: Inputs) -> Decision:
    problems = _trained(i.runs) + _missing(i.runs, i.expected)
    problems += [
        f"{r['strategy']} grad_accum {r['grad_accum']}: backend {r['backend']}"
        for r in i.runs
        if r["backend"] != "nccl"
    ]
    transports = sorted({r["effective_transport"] or "unknown" for r in i.runs})
    return _result(problems, f"{len(i.runs)} runs, transports {', '.join(transports)}")


def _fsdp2_problems(r: dict, gpu: bool) -> list[str]:
    """One FSDP2 run's problems beyond training: the backend the mode needs, a grad_accum the
    accumulation check can judge, the bytes per step against theory, the check's verdict."""
    name = f"{r['strategy']} grad_accum {r['grad_accum']}"
    problems = []
    if gpu and r["backend"] != "nccl":
        problems.append(f"{name}: backend {r['backend']}, expected nccl")
    if r["grad_accum"] < 2:
        problems.append(f"{name}: grad_accum below 2 has no non-final micro-batch to check")
    measured, expected = r["comm_bytes_per_step"], r["expected_comm_bytes_per_step"]
    if measured is None or expected is None:
        problems.append(
            f"{name}: bytes per step measured {_n(measured)}, expected {_n(expected)} "
            f"({r['comm_note'] or 'no note'})"
        )
    elif measured != expected:
        problems.append(f"{name}: {measured:.0f} B per step sent, theory {expected:.0f} B")
    if r["accum_check"] != "ok":
        problems.append(f"{name}: accumulation check {r['accum_check'] or 'not stored'}")
    return problems


def _fsdp2(i: Inputs) -> Decision:
    """Pass: the run trained, sent per step exactly the bytes ``fsdp_theory`` expects, and its
    non-final micro-batches sent what FSDP2's sync flavour promises (``accum_check`` ok)."""
    problems = _trained(i.runs) + _missing(i.runs, i.expected)
    for r in i.runs:
        if r["status"] == "ok":
            problems += _fsdp2_problems(r, i.plan.mode == "gpu")
    figures = [
        f"{r['strategy']} sync {r['grad_sync']} ga {r['grad_accum']}: "
        f"{_n(r['comm_bytes_per_step'])} B per step = theory, accum_check {r['accum_check']}, "
        f"{_n(r['tokens_per_s'])} tokens/s ({r['backend']})"
        for r in i.runs
    ]
    return _result(problems, ", ".join(figures))


def _nvme_offload(i: Inputs) -> Decision:
    problems = _trained(i.runs) + _missing(i.runs, i.expected)
    problems += [
        f"no swap files written ({r['nvme_swap_files']})"
        for r in i.runs
        if r["status"] == "ok" and not r["nvme_swap_files"]
    ]
    return _result(problems, ", ".join(f"{r['nvme_swap_files']} swap files" for r in i.runs))


def _hang_problems(i: Inputs, nccl_dump: bool) -> list[str]:
    if len(i.runs) != 1:
        return [f"{len(i.runs)} runs stored, expected 1"]
    (r,) = i.runs
    if r["status"] != "failed":
        return [f"status {r['status']}, expected failed"]
    rows = [d for d in i.facts.diagnostics if d["run_id"] == r["run_id"]]
    stacks = {d["rank"] for d in rows if d["has_stack"]}
    problems = []
    if stacks != set(range(r["world_size"])):
        problems.append(f"stacks stored for ranks {sorted(stacks)} of {r['world_size']}")
    if nccl_dump and not any(d["has_nccl_trace"] for d in rows):
        problems.append("no NCCL flight-recorder dump stored")
    return problems


def _hang(i: Inputs) -> Decision:
    return _result(_hang_problems(i, nccl_dump=False), "failed, every rank's stack")


def _hang_flight_recorder(i: Inputs) -> Decision:
    problems = _hang_problems(i, nccl_dump=True)
    return _result(problems, "failed, stacks and NCCL flight-recorder dump stored")


DECIDERS: dict[str, Callable[[Inputs], Decision]] = {
    "doctor": _doctor,
    "topo": _topo,
    "gpu_captures": _gpu_captures,
    "fleet": _fleet,
    "fleet_gpu": _fleet_gpu,
    "one_rank": _one_rank,
    "one_rank_launchers": _one_rank_launchers,
    "one_rank_gpu_figures": _one_rank_gpu_figures,
    **{
        name: _two_rank_of(name.removeprefix("two_rank_"))
        for name in CHECK_NAMES
        if name.startswith("two_rank_")
    },  # fmt: skip
    "rehearsal_shared_gpu": _rehearsal_shared_gpu,
    "shared_gpu_fork": _shared_gpu_fork,
    "two_gpu": _two_gpu,
    "fsdp2": _fsdp2,
    "nvme_offload": _nvme_offload,
    "hang": _hang,
    "hang_flight_recorder": _hang_flight_recorder,
}
"""Check name -> the function that decides it from :class:`Inputs`; one per check of
``selftest_plan.CHECKS`` (``test_selftest_plan`` checks they agree)."""


def _decide_one(name: str, sweep_key: str | None, facts: Facts, plan: SelftestPlan) -> Decision:
    if sweep_key is not None:
        sweep = facts.sweeps.get(sweep_key)
        if sweep is None:
            return "fail", f"sweep {sweep_name(sweep_key)} was not run"
        if not sweep.ran:
            # a node without libaio cannot run the NVMe check, as one GPU cannot run two_gpu
            return ("not run" if sweep.node_lacks else "fail"), sweep.why_not
        runs, expected = list(sweep.runs), planned_runs(plan.sweeps[sweep_key])
    else:
        runs, expected = [], []
    return DECIDERS[name](Inputs(facts, plan, runs, expected))


def decide(facts: Facts, plan: SelftestPlan) -> list[Verdict]:
    """One verdict per planned check, in :data:`CHECKS`' order: a check the plan skips is
    ``not run`` with its reason; the others are decided by :data:`DECIDERS`."""
    out = []
    for c in plan.checks:
        if c.check not in DECIDERS:
            raise ValueError(f"check {c.check!r}: no rule; allowed: {', '.join(DECIDERS)}")
        if not c.run:
            result, detail = "not run", c.why_not
        else:
            result, detail = _decide_one(c.check, c.sweep, facts, plan)
        out.append(Verdict(c.check, result, detail))
    return out


def exit_ok(verdicts: list[Verdict]) -> bool:
    """Exit 0 only if every check that ran passed (at least one ran)."""
    ran = [v for v in verdicts if v.result != "not run"]
    return bool(ran) and all(v.result == "pass" for v in ran)
