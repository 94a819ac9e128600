"""``linksweep selftest``'s plan and verdict, pure: which checks exist and which need CUDA
(:data:`CHECKS`, the one table), the sweep files each mode runs (:func:`sweep_specs`), and pass,
fail or not run for each check from the facts the command stored and read back (:func:`decide`).

A check that needs what this cluster lacks is ``not run`` with the reason (``no CUDA``), never
passed: a GPU result is never faked. The command (``orchestrator/commands/selftest.py``) does the
I/O: it runs doctor, the probes, a fleet check and the sweeps, then reads the database with
:data:`RUNS_SQL`, :data:`DIAGNOSTICS_SQL` and the fleet SQL (``orchestrator/selftest_fleet.py``,
which also decides the ``fleet`` and ``fleet_gpu`` checks) into :class:`Facts`.

May import: selftest_fleet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from orchestrator.selftest_fleet import (
    FleetFacts,
    fleet_detail,
    fleet_gpu_detail,
    fleet_gpu_problems,
    fleet_problems,
    suspects_text,
)

Needs = Literal["", "cuda", "2 gpus"]
Result = Literal["pass", "fail", "not run"]
STRATEGIES = ("ddp", "zero1", "zero2", "zero3")
GRAD_ACCUMS = (1, 8)  # the sync-frequency axis' two ends: DDP/ZeRO-1 sync once, ZeRO-2/3 each
HANG_FAULT = "1:1:hang"  # rank 1 blocks at step 1 (workloads/train.py LINKSWEEP_INJECT_FAULT)


@dataclass(frozen=True)
class Check:
    name: str
    needs: Needs
    """``cuda``: a GPU that torch can use on some node; ``2 gpus``: two on one node."""
    sweep: str | None
    """The sweep (a key of :func:`sweep_specs`) whose stored runs decide it; None: no sweep."""
    what: str


CHECKS: tuple[Check, ...] = (
    Check("doctor", "", None, "linksweep doctor exits 0: nothing invalidates a link comparison"),
    Check("topo", "", None, "every node probed; on GPU nodes nvidia-smi topo -m parsed"),
    Check(
        "gpu_captures",
        "cuda",
        None,
        "nvidia-smi topo -m and -q captured here; NVML lists as many GPUs as CUDA sees per node",
    ),
    Check(
        "fleet",
        "",
        None,
        "linksweep fleet (default network, --pairs all) finishes: every node's compute probe, "
        "intra-node and inter-node all_reduce, health; suspects are listed, not failed",
    ),
    Check(
        "fleet_gpu",
        "cuda",
        None,
        "the fleet check's GPU paths: compute probe on CUDA, NVML PCIe gen/width idle and under "
        "load, intra-node all_reduce over NCCL on nodes with 2+ GPUs",
    ),
    Check(
        "one_rank",
        "",
        "one_rank",
        "one rank trains: ok, timed steps, tokens/s (CPU: gpt2-tiny fp32 on gloo; GPU: gpt2 "
        "bf16 on NCCL)",
    ),
    Check(
        "one_rank_gpu_figures",
        "cuda",
        "one_rank",
        "the one-rank GPU run: backend nccl, MFU, peak memory, NVML telemetry",
    ),
    *(
        Check(
            f"two_rank_{s}",
            "",
            "two_rank",
            f"two ranks, {s}, grad_accum 1 and 8: ok, timed steps, tokens/s (CPU: gloo; GPU: "
            "two ranks sharing one GPU, ranks_per_gpu 2)",
        )
        for s in STRATEGIES
    ),
    Check(
        "rehearsal_shared_gpu",
        "cuda",
        "two_rank",
        "the two-rank GPU runs went over NCCL on one GPU: link_class shared-gpu",
    ),
    Check(
        "two_gpu",
        "2 gpus",
        "two_gpu",
        "DDP and ZeRO-1/2/3 at grad_accum 1 and 8 on two GPUs of one node, over NCCL",
    ),
    Check(
        "nvme_offload",
        "",
        "nvme",
        "ZeRO-3 with offload nvme trains and swaps to nvme_path (CPU: where libaio builds)",
    ),
    Check(
        "hang",
        "",
        "hang",
        f"a forced hang ({HANG_FAULT}, short run_timeout_s) is stored as a failed run with every "
        "rank's stack",
    ),
    Check(
        "hang_flight_recorder",
        "cuda",
        "hang",
        "the hung GPU run's NCCL flight-recorder dump is stored",
    ),
)
CHECK_NAMES = tuple(c.name for c in CHECKS)
FLEET_CHECKS = ("fleet", "fleet_gpu")
"""Decided from the selftest's fleet check (:class:`Facts` ``fleet``), not from a sweep."""

# The facts, read back with orchestrator.store.read_query from the selftest's own database (it
# holds only the selftest's sweeps, so no parameter is needed).
RUNS_SQL = """
SELECT s.name AS sweep, r.run_id, r.strategy, r.grad_accum, r.offload, r.world_size,
       r.status, r.error, r.backend, r.n_steps, r.tokens_per_s, r.mfu, r.peak_mem_bytes,
       r.telemetry, r.link_class, r.ranks_per_gpu, r.nvme_swap_files, r.gpu_name,
       r.effective_transport, r.nccl_version
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


def sweep_name(key: str) -> str:
    return f"selftest-{key}"


def sweep_specs(cuda: bool, n_gpus: int) -> dict[str, dict]:
    """The sweep files the selftest runs, as dicts (the command writes each as YAML), keyed as
    :data:`CHECKS` names them. CPU: gpt2-tiny, fp32, seq 32, 2 timed steps (the whole selftest
    in a few minutes on 2 cores). GPU: gpt2 bf16 for figures that mean something; two ranks
    share the one GPU (``ranks_per_gpu: 2``) when no node has two."""
    if cuda:
        base = {"model": "gpt2", "precision": "bf16", "seq_len": 512, "micro_batch_size": 4}
        base |= {"steps": 10, "warmup_steps": 3}
        hang_timeout_s = 120.0  # CUDA init and NCCL setup come before the hang
    else:
        base = {"model": "gpt2-tiny", "precision": "fp32", "seq_len": 32, "micro_batch_size": 2}
        base |= {"steps": 2, "warmup_steps": 1}
        hang_timeout_s = 20.0
    base |= {"dataset": "builtin", "repeats": 1, "links": {"default": {}}}
    shared_gpu = {"ranks_per_gpu": 2} if cuda else {}
    pair = {} if cuda and n_gpus >= 2 else shared_gpu
    every = {"strategy": list(STRATEGIES), "grad_accum": list(GRAD_ACCUMS), "placement": "pack"}

    def spec(key: str, **keys) -> dict:
        return {"name": sweep_name(key), **base, **keys}

    out = {
        "one_rank": spec("one_rank", world_size=1, grid={"strategy": "ddp", "grad_accum": 1}),
        "two_rank": spec("two_rank", world_size=2, **shared_gpu, grid=every),
    }
    if cuda and n_gpus >= 2:
        out["two_gpu"] = spec("two_gpu", world_size=2, grid=every)
    out["nvme"] = spec(
        "nvme", world_size=1, grid={"strategy": "zero3", "offload": "nvme", "grad_accum": 1}
    )
    out["hang"] = spec(
        "hang",
        world_size=2,
        **pair,
        **{"steps": 3, "warmup_steps": 1},
        links={"hang": {"LINKSWEEP_INJECT_FAULT": HANG_FAULT}},
        run_timeout_s=hang_timeout_s,
        grid={"strategy": "ddp", "grad_accum": 1},
    )
    return out


@dataclass(frozen=True)
class SweepFacts:
    """One selftest sweep: whether it ran (``why_not`` when it did not) and what it stored."""

    ran: bool
    why_not: str = ""
    runs: tuple[dict, ...] = ()
    """Rows of :data:`RUNS_SQL` for this sweep."""


@dataclass(frozen=True)
class Facts:
    """Everything the verdict needs, gathered by the command; plantable in tests."""

    cuda: bool
    """Some node's torch sees CUDA (the node probes' ``cuda_available``)."""
    n_gpus: int
    """The most GPUs CUDA sees on one node."""
    doctor_exit: int
    doctor_problems: str = ""
    nodes: tuple[dict, ...] = ()
    """Per node: hostname, error, cuda_available, cuda_device_count, topo_ok, topo_status,
    topo_gpus (GPUs in the parsed matrix), nvml_gpus (NVML inventory length)."""
    captures: dict[str, str] = field(default_factory=dict)
    """Local raw captures: name -> ``ok`` or why not (``nvidia-smi topo -m``, ``nvidia-smi -q``)."""
    sweeps: dict[str, SweepFacts] = field(default_factory=dict)
    diagnostics: tuple[dict, ...] = ()
    """Rows of :data:`DIAGNOSTICS_SQL` (has_stack, has_nccl_trace per run and rank)."""
    fleet: FleetFacts | None = None
    """The selftest's fleet check; None: not run (``--quick``)."""


@dataclass(frozen=True)
class Verdict:
    check: str
    result: Result
    detail: str

    def line(self) -> str:
        return f"not run: {self.detail}" if self.result == "not run" else self.result


def lacking(needs: Needs, cuda: bool, n_gpus: int) -> str | None:
    """Why a check needing ``needs`` cannot run here, or None."""
    if needs and not cuda:
        return "no CUDA"
    if needs == "2 gpus" and n_gpus < 2:
        return f"{n_gpus} GPU on the node with most; needs 2 on one node"
    return None


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


def _result(problems: list[str], ok_detail: str) -> tuple[Result, str]:
    return ("fail", "; ".join(problems)) if problems else ("pass", ok_detail)


def _expect(runs: list[dict], strategies, grad_accums) -> list[str]:
    have = {(r["strategy"], r["grad_accum"]) for r in runs}
    return [
        f"{s} grad_accum {g}: no run stored"
        for s in strategies
        for g in grad_accums
        if (s, g) not in have
    ]


def _one_rank_gpu(runs: list[dict]) -> list[str]:
    problems = []
    for r in runs:
        if r["backend"] != "nccl":
            problems.append(f"backend {r['backend']}, expected nccl")
        if not r["mfu"] or r["mfu"] <= 0:
            problems.append(f"no MFU ({r['mfu']}; gpu {r['gpu_name']})")
        if not r["peak_mem_bytes"] or r["peak_mem_bytes"] <= 0:
            problems.append("no peak memory")
        if r["telemetry"] != "nvml":
            problems.append(f"telemetry {r['telemetry']!r}, expected nvml")
    return problems


def _hang(runs: list[dict], diagnostics: tuple[dict, ...], cuda: bool) -> list[str]:
    if len(runs) != 1:
        return [f"{len(runs)} runs stored, expected 1"]
    (r,) = runs
    if r["status"] != "failed":
        return [f"status {r['status']}, expected failed"]
    rows = [d for d in diagnostics if d["run_id"] == r["run_id"]]
    stacks = {d["rank"] for d in rows if d["has_stack"]}
    problems = []
    if stacks != set(range(r["world_size"])):
        problems.append(f"stacks stored for ranks {sorted(stacks)} of {r['world_size']}")
    if cuda and not any(d["has_nccl_trace"] for d in rows):
        problems.append("no NCCL flight-recorder dump stored")
    return problems


def _decide_one(check: Check, facts: Facts) -> tuple[Result, str]:
    sweep = facts.sweeps.get(check.sweep) if check.sweep else None
    if check.sweep is not None:
        if sweep is None:
            return "fail", f"sweep {sweep_name(check.sweep)} was not run"
        if not sweep.ran:
            # NVMe offload needs DeepSpeed's async_io (libaio): on CPU a machine without it
            # cannot run the check; on a GPU node refusing it is the finding (issue 22, item 8)
            if check.name == "nvme_offload" and not facts.cuda:
                return "not run", sweep.why_not
            return "fail", sweep.why_not
    runs = list(sweep.runs) if sweep else []
    name = check.name
    if name == "doctor":
        ok = facts.doctor_exit == 0
        return ("pass", "exit 0") if ok else ("fail", facts.doctor_problems or "exit 1")
    if name == "topo":
        problems = [f"{n['hostname']}: {n['error']}" for n in facts.nodes if n["error"]]
        problems += [
            f"{n['hostname']}: topo {n['topo_status']}"
            for n in facts.nodes
            if n["cuda_available"] and not n["topo_ok"]
        ]
        problems += [  # CUDA_VISIBLE_DEVICES may hide GPUs from CUDA, never from nvidia-smi
            f"{n['hostname']}: topo -m shows {n['topo_gpus']} GPU(s), CUDA sees "
            f"{n['cuda_device_count']}"
            for n in facts.nodes
            if n["topo_ok"] and n["topo_gpus"] < n["cuda_device_count"]
        ]
        if not facts.nodes:
            problems.append("no node answered the probe")
        gpus = sum(n["cuda_device_count"] for n in facts.nodes)
        return _result(problems, f"{len(facts.nodes)} node(s), {gpus} GPU(s) seen by CUDA")
    if name == "gpu_captures":
        problems = [f"{k}: {v}" for k, v in facts.captures.items() if v != "ok"]
        problems += [
            f"{n['hostname']}: NVML lists {n['nvml_gpus']} GPU(s), CUDA sees "
            f"{n['cuda_device_count']}"
            for n in facts.nodes
            if n["cuda_available"] and n["nvml_gpus"] != n["cuda_device_count"]
        ]
        return _result(problems, ", ".join(facts.captures) + " captured; NVML matches CUDA")
    if name in FLEET_CHECKS:
        if facts.fleet is None:
            return "fail", "the fleet check was not run"
        if name == "fleet":  # suspects never fail it: they are named either way
            if problems := fleet_problems(facts.fleet):
                return "fail", "; ".join([*problems, suspects_text(facts.fleet)])
            return "pass", fleet_detail(facts.fleet)
        if problems := fleet_gpu_problems(facts.fleet):
            return "fail", "; ".join(problems)
        return "pass", fleet_gpu_detail(facts.fleet)
    if name == "one_rank":
        problems = _trained(runs) or _expect(runs, ["ddp"], [1])
        figures = [f"{_n(r['tokens_per_s'])} tokens/s ({r['backend']})" for r in runs]
        return _result(problems, ", ".join(figures))
    if name == "one_rank_gpu_figures":
        problems = _one_rank_gpu(runs) or _expect(runs, ["ddp"], [1])
        figures = [
            f"MFU {_n(r['mfu'], '.3f')}, peak {_n((r['peak_mem_bytes'] or 0) / 1e9, '.2f')} GB, "
            f"{r['gpu_name']}"
            for r in runs
        ]
        return _result(problems, ", ".join(figures))
    if name.startswith("two_rank_"):
        strategy = name.removeprefix("two_rank_")
        mine = [r for r in runs if r["strategy"] == strategy]
        problems = _trained(mine) + _expect(mine, [strategy], GRAD_ACCUMS)
        figures = [f"ga {r['grad_accum']}: {_n(r['tokens_per_s'])} tokens/s" for r in mine]
        return _result(problems, ", ".join(figures))
    if name == "rehearsal_shared_gpu":
        problems = [
            f"{r['strategy']} grad_accum {r['grad_accum']}: link_class {r['link_class']}, "
            f"backend {r['backend']}"
            for r in runs
            if r["link_class"] != "shared-gpu" or r["backend"] != "nccl"
        ]
        return _result(problems or _expect(runs, STRATEGIES, GRAD_ACCUMS), "shared-gpu, nccl")
    if name == "two_gpu":
        problems = _trained(runs) + _expect(runs, STRATEGIES, GRAD_ACCUMS)
        problems += [
            f"{r['strategy']} grad_accum {r['grad_accum']}: backend {r['backend']}"
            for r in runs
            if r["backend"] != "nccl"
        ]
        transports = sorted({r["effective_transport"] or "unknown" for r in runs})
        return _result(problems, f"{len(runs)} runs, transports {', '.join(transports)}")
    if name == "nvme_offload":
        problems = _trained(runs) + _expect(runs, ["zero3"], [1])
        problems += [
            f"no swap files written ({r['nvme_swap_files']})"
            for r in runs
            if r["status"] == "ok" and not r["nvme_swap_files"]
        ]
        return _result(problems, ", ".join(f"{r['nvme_swap_files']} swap files" for r in runs))
    if name == "hang":
        return _result(_hang(runs, facts.diagnostics, cuda=False), "failed, every rank's stack")
    if name == "hang_flight_recorder":
        problems = _hang(runs, facts.diagnostics, cuda=True)
        return _result(problems, "failed, stacks and NCCL flight-recorder dump stored")
    raise ValueError(f"check {name!r}: no rule; allowed: {', '.join(CHECK_NAMES)}")


QUICK_SWEEPS = ("one_rank",)
"""The sweeps ``--quick`` runs (besides doctor and the probes, which always run; the fleet check
does not run)."""


def decide(facts: Facts, quick: bool = False) -> list[Verdict]:
    """One verdict per check of :data:`CHECKS`, in its order; with ``quick``, a check whose
    sweep ``--quick`` leaves out is ``not run: --quick``, never failed."""
    out = []
    for check in CHECKS:
        why = lacking(check.needs, facts.cuda, facts.n_gpus)
        skipped = check.name in FLEET_CHECKS or check.sweep not in (None, *QUICK_SWEEPS)
        if why is None and quick and skipped:
            why = "--quick"
        result, detail = ("not run", why) if why else _decide_one(check, facts)
        out.append(Verdict(check.name, result, detail))
    return out


def exit_ok(verdicts: list[Verdict]) -> bool:
    """Exit 0 only if every check that ran passed (at least one ran)."""
    ran = [v for v in verdicts if v.result != "not run"]
    return bool(ran) and all(v.result == "pass" for v in ran)
