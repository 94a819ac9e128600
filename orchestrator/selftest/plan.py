"""``linksweep selftest``'s plan, pure. One job: from what each node shows, the checks, sweep
files and time a selftest gets. Which checks exist (:data:`CHECKS`, the one table), and,
from what each node shows (:class:`NodeFacts`), which of them run, on which nodes and GPUs,
which are skipped and why, the sweep files they run and how long that takes
(:func:`plan_selftest` -> :class:`SelftestPlan`). ``linksweep selftest --dry-run`` prints it
(``orchestrator/selftest/plan_text.py``) and the command runs exactly its sweeps; the verdict after
the run (pass, fail, not run) is ``orchestrator/selftest/verdicts.py``.

A node's GPUs count as Ray offers them (``ray.nodes()`` Resources ``GPU``), not as CUDA lists
them: Ray caps a node's GPUs at the ``CUDA_VISIBLE_DEVICES`` it started with, and a sweep gets
only what Ray offers, so ``CUDA_VISIBLE_DEVICES=0`` on an 8-GPU box plans one-GPU checks only.
A check needing what the cluster lacks is skipped with the reason, never passed.

Time: each sweep's estimate is its runs x (the per-run start cost + (warmup + timed steps) x
grad_accum x the expected micro-step time of its mode), plus a per-sweep start; the constants
below carry their reasons. Every run also gets ``run_timeout_s`` (:func:`run_timeout_for`), so a
selftest that hangs anywhere still ends, by :attr:`SelftestPlan.bound_s` at the latest.

May import: orchestrator.sweep.planner, orchestrator.sweep.spec, workloads.catalog.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from workloads import catalog

Needs = Literal["", "gpu", "cuda", "2 gpus", "2 devices"]
# Which strategies selftest runs is a sweep file's content (as ``sweeps/``), read from the
# catalog by family so that no name is typed here: every built-in DDP and ZeRO strategy in the
# two-rank checks, the first DDP one alone, the deepest ZeRO stage for --quick and NVMe.
_BUILT_IN = [s for s in catalog.STRATEGIES.values() if s.workload.startswith("workloads.")]
_DDP = next(s.name for s in _BUILT_IN if s.family == catalog.DDP)
_ZERO3 = max((s for s in _BUILT_IN if s.zero_stage), key=lambda s: s.zero_stage).name
STRATEGIES = tuple(s.name for s in _BUILT_IN if s.family in (catalog.DDP, catalog.ZERO))
GRAD_ACCUMS = (1, 8)  # the sync-frequency axis' two ends: DDP/ZeRO-1 sync once, ZeRO-2/3 each
HANG_FAULT = "1:1:hang"  # rank 1 blocks at step 1 (workloads/train.py LINKSWEEP_INJECT_FAULT)
FSDP2_GRID = {
    "strategy": catalog.names(catalog.FSDP2)[0],
    "grad_accum": 2,
    "grad_sync": "last",
    "placement": "pack",
}
"""The FSDP2 check's one run: grad_accum 2, so the accumulation check has a non-final
micro-batch to judge; ``grad_sync: last``, so that micro-batch goes through FSDP2's own switch
(``set_requires_gradient_sync``) and must send all-gathers only (a sync switch that does
nothing sends reduce-scatters there, and the check fails)."""
FSDP2_SHARED_GPU_REFUSED = (
    "FSDP2 needs 2 GPUs on one node: two ranks sharing one GPU (ranks_per_gpu: 2) is refused "
    "for fsdp/hsdp"
)
"""Why the FSDP2 check is not run on a one-GPU node (``sweep/spec.py`` ``fsdp_errors`` refuses
``ranks_per_gpu: 2`` with fsdp; ``test_selftest_plan`` checks the refusal still holds)."""
QUICK_STRATEGY = _ZERO3
"""``--quick``'s one two-rank (and two-GPU) run: ZeRO-3 at grad_accum 1 goes through DeepSpeed,
its parameter gathers and the device DeepSpeed picks for each rank, so one run exercises most of
what DDP's would and more."""


@dataclass(frozen=True)
class Check:
    name: str
    needs: Needs
    """``gpu``: a GPU on some node (NVML or CUDA sees one); ``cuda``: a GPU that torch can use
    and Ray offers on some node; ``2 gpus``: two such on one node; ``2 devices``: a device per
    rank for two ranks (CPU: two gloo ranks; GPU: two GPUs on one node, for a strategy that
    refuses two ranks sharing one GPU)."""
    sweep: str | None
    """The sweep (a key of :func:`sweep_specs`) whose stored runs decide it; None: no sweep."""
    what: str


def _two_rank(s: str) -> Check:
    return Check(
        f"two_rank_{s}",
        "",
        "two_rank",
        f"two ranks, {s}, grad_accum 1 and 8: ok, timed steps, tokens/s (CPU: gloo; GPU: two "
        "ranks sharing one GPU, ranks_per_gpu 2)",
    )


CHECKS: tuple[Check, ...] = (
    Check("doctor", "", None, "linksweep doctor exits 0: nothing invalidates a link comparison"),
    Check("topo", "", None, "every node probed; on GPU nodes nvidia-smi topo -m parsed"),
    Check(
        "gpu_captures",
        "gpu",
        None,
        "nvidia-smi topo -m and -q captured on every GPU node; NVML lists as many GPUs as CUDA "
        "sees per node",
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
        "one_rank_launchers",
        "",
        "one_rank_alt",
        "the one-rank run again with the other launcher (CPU: fresh Ray actors; GPU: a rank "
        "forked on the GPU Ray reserved for its bundle): ok; start-up per run of each launcher",
    ),
    Check(
        "one_rank_gpu_figures",
        "cuda",
        "one_rank",
        "the one-rank GPU run: backend nccl, peak memory; MFU where the GPU's peak is known, "
        "telemetry as it was read",
    ),
    *(_two_rank(s) for s in STRATEGIES),
    Check(
        "rehearsal_shared_gpu",
        "cuda",
        "two_rank",
        "the two-rank GPU runs went over NCCL on one GPU: link_class shared-gpu",
    ),
    Check(
        "shared_gpu_fork",
        "cuda",
        "two_rank_fork",
        "the two-rank runs sharing one GPU again on forked ranks (launcher: fork): every run "
        "ok, over NCCL on one GPU (link_class shared-gpu); start-up per run beside fresh actors'",
    ),
    Check(
        "two_gpu",
        "2 gpus",
        "two_gpu",
        "DDP and ZeRO-1/2/3 at grad_accum 1 and 8 on two GPUs of one node, over NCCL",
    ),
    Check(
        "fsdp2",
        "2 devices",
        "fsdp2",
        "two ranks, FSDP2 (fsdp, grad_sync last) at grad_accum 2: ok; bytes per step equal "
        "theory (runs.comm_bytes_per_step = expected); the accumulation check (runs.accum_check) "
        "ok (CPU: gloo; GPU: two GPUs of one node, over NCCL)",
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
"""Decided from the selftest's fleet check, not from a sweep."""
QUICK_SKIPS = (*FLEET_CHECKS, *(f"two_rank_{s}" for s in STRATEGIES if s != QUICK_STRATEGY))
"""What ``--quick`` leaves out: the fleet check (its own command, and its time grows with the
nodes) and the two-rank strategies but :data:`QUICK_STRATEGY`."""

# --- Expected times (seconds), the plan's estimate ---------------------------------------------
CPU_MICRO_STEP_S = 0.1
"""gpt2-tiny fp32, seq 32, micro-batch 2 on gloo, two ranks on the 2-core CI machine: measured
0.04-0.08 s a micro-step (ZeRO-3 at grad_accum 8: 0.67 s a step), 0.2 s for ZeRO-2 at
grad_accum 1; 0.1 s covers a loaded machine."""
GPU_MICRO_STEP_S = 0.1
"""gpt2 bf16, seq 512, micro-batch 4 (2048 tokens, ~1.6 TFLOP fwd+bwd): ~5 ms on an H100; 0.1 s
is a T4/A10G-class GPU at ~15 TFLOP/s achieved, the slowest the plan expects. Two ranks sharing
a GPU take twice as long (:func:`estimate_run_s`). Measured on one H200 (torch 2.11): 37 ms a
step for one rank (MFU 4.4%: launch-bound at this size, not the datasheet's 5 ms); two ranks
sharing it, whose NCCL talks over sockets, 0.28-0.61 s (docs/measurements/2026-11-27-first-gpu-h200)."""
CPU_RUN_START_S = 5.0
"""A CPU run's start: ranks forked from the fork server (imports already paid), gloo rendezvous,
model build, DeepSpeed's engine: measured 0.3-4.7 s (``runs.startup_s``), 8.2 s with NVMe."""
CPU_ACTORS_RUN_START_S = 12.0
"""A CPU run on fresh Ray actors: a worker process starts and imports torch and transformers
(5-8 s on 2 cores) before the rest of :data:`CPU_RUN_START_S`."""
GPU_RUN_START_S = 40.0
"""A GPU run's start: fresh Ray actors import torch, transformers and DeepSpeed (~15 s), CUDA and
NCCL initialise, DeepSpeed builds its engine (~10 s); 40 s leaves room on a cold node. Measured
on one H200 (16 cores): 17-19 s for DDP, 22-27 s for ZeRO (``runs.startup_s``)."""
GPU_FORK_RUN_START_S = 15.0
"""A GPU run of forked ranks: no imports, CUDA and NCCL initialise, the engine builds (the goal
is 3 s a run; not yet measured on a GPU). The sweep's first run also waits for the node's
launcher to import everything once (~15 s): this is the average of a few runs."""
SWEEP_START_S = 5.0
"""Per sweep: topology discovery (the node probe imports torch: ~2 s), the link
microbenchmark, the fork server's start on CPU: measured ~2 s a sweep on CPU."""
PROBES_S = 20.0
"""Doctor, the node probes and the nvidia-smi captures, once (each probe ~2-5 s, in parallel;
measured 12 s on CPU with an embedded Ray's start)."""
FLEET_S_PER_NODE = 25.0
"""The fleet check: 8.5-22 s on one CPU node (compute probe, start, health, intra-node);
more pairs add busbw rounds. Per node, an upper estimate for a small cluster."""
RUN_TIMEOUT_FACTOR = 5.0
"""A selftest run gets five times its expected time before it is called a hang."""
MIN_RUN_TIMEOUT_S = 180.0
"""...and never less than 3 min: a cold node's first import of torch and DeepSpeed can take
over a minute on its own."""
HANG_TIMEOUT_S = {"cpu": 10.0, "gpu": 120.0}
"""The forced hang's ``run_timeout_s``: past start-up (a forked CPU rank reaches its first step
in 1-3 s on 2 cores; GPU: CUDA init and NCCL setup come before the hang), then the wait is the
check's whole cost. A timeout that struck before the hang would still pass the check (a failed
run with every rank's stack): the check is about what a hang leaves, not where it struck."""
HANG_COLLECT_S = 15.0
"""After the forced hang's timeout: every rank's stack and NCCL dump read, actors killed (5 s on
CPU; NCCL's dump and killing CUDA actors take longer)."""
AIO_BUILD_S = 600.0
"""Added to the NVMe sweep's timeout: its rank JIT-builds DeepSpeed's async_io op where no
build is cached (about 6 min on 2 cores; on a GPU node a CUDA extension, which nvcc builds in
minutes too), and a run cut off mid-build would fail the check for the machine's build time."""


def sweep_name(key: str) -> str:
    return f"selftest-{key}"


def base_workload(cuda: bool, bf16: bool = True) -> dict:
    """The sweeps' common keys. GPU: gpt2 in bf16 where every GPU computes bf16 in hardware,
    else fp32 (V100 and T4 emulate bf16: the run would time the emulation, not the GPU)."""
    if cuda:
        precision = "bf16" if bf16 else "fp32"
        base = {"model": "gpt2", "precision": precision, "seq_len": 512, "micro_batch_size": 4}
        base |= {"steps": 10, "warmup_steps": 3}
    else:
        base = {"model": "gpt2-tiny", "precision": "fp32", "seq_len": 32, "micro_batch_size": 2}
        base |= {"steps": 2, "warmup_steps": 1}
    return base | {"dataset": "builtin", "repeats": 1, "links": {"default": {}}}


RUN_START_S = {
    ("cpu", "fork"): CPU_RUN_START_S,
    ("cpu", "actors"): CPU_ACTORS_RUN_START_S,
    ("gpu", "actors"): GPU_RUN_START_S,
    ("gpu", "fork"): GPU_FORK_RUN_START_S,
}
"""A run's expected start by (mode, launcher)."""


def launchers(cuda: bool) -> tuple[str, str]:
    """(the launcher ``auto`` picks in this mode, the other one), as ``planner.launcher_for``
    decides it (today: fork on CPU, fresh actors on GPUs)."""
    from orchestrator.sweep.planner import launcher_for
    from orchestrator.sweep.spec import parse_spec

    bundle = {"GPU": 1.0, "CPU": 1.0} if cuda else {"CPU": 1.0}
    default = launcher_for(parse_spec({"name": "launchers", "links": {"default": {}}}), bundle)
    return default, "actors" if default == "fork" else "fork"


def estimate_run_s(spec: dict, grad_accum: int) -> float:
    """One run of ``spec`` at ``grad_accum``, expected: its start plus every step it takes (the
    forced hang: its timeout plus the collection of stacks)."""
    gpu = spec["model"] == "gpt2"  # the GPU sweeps' model; CPU's is gpt2-tiny (base_workload)
    if "hang" in spec["links"]:
        return HANG_TIMEOUT_S["gpu" if gpu else "cpu"] + HANG_COLLECT_S
    micro = GPU_MICRO_STEP_S * spec.get("ranks_per_gpu", 1) if gpu else CPU_MICRO_STEP_S
    steps = spec["steps"] + spec["warmup_steps"]
    launcher = spec.get("launcher", "auto")
    launcher = launchers(gpu)[0] if launcher == "auto" else launcher
    return RUN_START_S["gpu" if gpu else "cpu", launcher] + steps * grad_accum * micro


def run_timeout_for(spec: dict) -> float:
    """``run_timeout_s`` for a selftest sweep: :data:`RUN_TIMEOUT_FACTOR` x its longest run."""
    longest = max(estimate_run_s(spec, g) for g in _grid_list(spec, "grad_accum"))
    return round(max(MIN_RUN_TIMEOUT_S, RUN_TIMEOUT_FACTOR * longest))


def _grid_list(spec: dict, key: str) -> list:
    value = spec["grid"][key]
    return list(value) if isinstance(value, list) else [value]


def planned_runs(spec: dict) -> list[tuple[str, int]]:
    """(strategy, grad_accum) of every run the sweep file asks for (one repeat each)."""
    return [(s, g) for s in _grid_list(spec, "strategy") for g in _grid_list(spec, "grad_accum")]


def sweep_specs(
    cuda: bool,
    n_gpus: int,
    quick: bool = False,
    peak_tflops: float | None = None,
    bf16: bool = True,
) -> dict[str, dict]:
    """The sweep files the selftest runs, as dicts (the command writes each as YAML), keyed as
    :data:`CHECKS` names them. CPU: gpt2-tiny, fp32, seq 32, 2 timed steps (the whole selftest
    in a few minutes on 2 cores). GPU: gpt2 bf16 for figures that mean something; two ranks
    share one GPU (``ranks_per_gpu: 2``) for the rehearsal, and for the hang when no node has
    two. The one-rank run goes twice, once per launcher (:func:`launchers`), and on GPU so do
    the two ranks sharing a GPU (``two_rank`` on fresh actors, ``two_rank_fork`` forked): each
    launcher's start-up per run, side by side. FSDP2's one run (:data:`FSDP2_GRID`) on two GPUs of one node, or gloo on CPU; none
    where the most GPUs on a node is one (FSDP2 refuses two ranks on one GPU). ``n_gpus``: the
    most GPUs Ray offers on one CUDA node. ``quick``: one run per sweep (:data:`QUICK_STRATEGY`
    at grad_accum 1 for the two-rank sweeps). ``peak_tflops``: the GPU sweeps' MFU peak.
    ``bf16``: the GPUs compute bf16 in hardware (else the GPU sweeps train in fp32)."""
    base = base_workload(cuda, bf16)
    if cuda and peak_tflops is not None:
        base["peak_tflops"] = peak_tflops
    shared_gpu = {"ranks_per_gpu": 2} if cuda else {}
    pair = {} if cuda and n_gpus >= 2 else shared_gpu
    every = {"strategy": list(STRATEGIES), "grad_accum": list(GRAD_ACCUMS), "placement": "pack"}
    if quick:
        every = {"strategy": QUICK_STRATEGY, "grad_accum": 1, "placement": "pack"}

    def spec(key: str, **keys) -> dict:
        out = {"name": sweep_name(key), **base, **keys}
        out.setdefault("run_timeout_s", run_timeout_for(out))
        return out

    default, alt = launchers(cuda)
    one = {"world_size": 1, "grid": {"strategy": _DDP, "grad_accum": 1}}
    out = {
        "one_rank": spec("one_rank", launcher=default, **one),
        "one_rank_alt": spec("one_rank_alt", launcher=alt, **one),
        "two_rank": spec("two_rank", world_size=2, launcher=default, **shared_gpu, grid=every),
    }
    if cuda:  # the same two ranks sharing one GPU, forked: each launcher's start-up
        out["two_rank_fork"] = spec(
            "two_rank_fork", world_size=2, launcher="fork", **shared_gpu, grid=every
        )
    if cuda and n_gpus >= 2:
        out["two_gpu"] = spec("two_gpu", world_size=2, grid=every)
    if not cuda or n_gpus >= 2:  # FSDP2 refuses ranks_per_gpu 2: no one-GPU rehearsal
        out["fsdp2"] = spec("fsdp2", world_size=2, grid=dict(FSDP2_GRID))
    nvme_grid = {"strategy": _ZERO3, "offload": "nvme", "grad_accum": 1}
    nvme_timeout = run_timeout_for({**base, "grid": nvme_grid}) + AIO_BUILD_S
    out["nvme"] = spec("nvme", world_size=1, run_timeout_s=nvme_timeout, grid=nvme_grid)
    out["hang"] = spec(
        "hang",
        world_size=2,
        **pair,
        **{"steps": 3, "warmup_steps": 1},
        links={"hang": {"LINKSWEEP_INJECT_FAULT": HANG_FAULT}},
        run_timeout_s=HANG_TIMEOUT_S["gpu" if cuda else "cpu"],
        grid={"strategy": _DDP, "grad_accum": 1},
    )
    return out


def estimate_sweep_s(spec: dict) -> float:
    """A sweep's expected time: its start and every run it asks for."""
    return SWEEP_START_S + sum(estimate_run_s(spec, g) for _, g in planned_runs(spec))


# --- The plan: node facts in, planned checks out -----------------------------------------------


@dataclass(frozen=True)
class NodeFacts:
    """What the plan needs of one node (``from_report`` reads it off a discovery report)."""

    hostname: str
    ip: str = ""
    cuda_available: bool = False
    """torch on the node sees CUDA (the probe's child process)."""
    ray_gpus: float = 0.0
    """GPUs Ray offers on the node (``ray.nodes()`` Resources ``GPU``): what a sweep can get."""
    gpu_names: tuple[str, ...] = ()
    """NVML's names of the node's physical GPUs (all of them, whatever Ray offers)."""
    nvidia_smi: bool = False
    """``nvidia-smi`` runs on the node."""
    cpus: float = 0.0
    """CPUs Ray offers on the node."""
    error: str | None = None
    """Why the node's probe failed; such a node is listed but counts for nothing."""
    bf16_native: bool | None = None
    """Every GPU torch sees here computes bf16 in hardware (compute capability 8.0 or newer);
    None: not known (no CUDA, or a probe that did not say)."""

    @property
    def usable_gpus(self) -> int:
        """GPUs a sweep can use here: those Ray offers, where torch sees CUDA."""
        return int(self.ray_gpus + 1e-9) if self.cuda_available and self.error is None else 0

    @property
    def has_gpu(self) -> bool:
        """A physical GPU is here (NVML names one, or CUDA sees one), usable or not."""
        return self.error is None and (bool(self.gpu_names) or self.cuda_available)

    @classmethod
    def from_report(cls, r: Any) -> NodeFacts:
        """From a ``workloads.contract.NodeReport`` (discovery's, Ray's GPUs filled in)."""
        no_smi = (r.topo_status or "").startswith(("nvidia-smi not found", "not probed"))
        return cls(
            hostname=r.hostname or r.ip or r.node_id,
            ip=r.ip or "",
            cuda_available=bool(r.cuda_available),
            ray_gpus=float(r.gpus or 0),
            gpu_names=tuple(str(g.get("name") or "?") for g in r.inventory),
            nvidia_smi=r.error is None and not no_smi,
            cpus=float(r.cpus or 0),
            error=r.error,
            bf16_native=getattr(r, "bf16_native", None),
        )


@dataclass(frozen=True)
class PlannedCheck:
    check: str
    run: bool
    why_not: str = ""
    """Why it is skipped (``no CUDA``, ``--quick``...); empty when it runs."""
    nodes: tuple[str, ...] = ()
    """Hostnames it runs on; for a sweep, those Ray may place it on (it picks one)."""
    gpus: int = 0
    """GPUs one run of its sweep uses (0: CPU); for other checks, the GPUs it looks at."""
    sweep: str | None = None
    """The key of :attr:`SelftestPlan.sweeps` whose runs decide it; None: no sweep."""


@dataclass(frozen=True)
class SelftestPlan:
    mode: Literal["cpu", "gpu"]
    """``gpu`` where some node has CUDA and Ray offers a GPU there; the sweeps follow it."""
    n_gpus: int
    """The most GPUs Ray offers on one CUDA node."""
    quick: bool
    nodes: tuple[NodeFacts, ...]
    checks: tuple[PlannedCheck, ...]
    """One per :data:`CHECKS`, in its order."""
    sweeps: dict[str, dict]
    """The sweep files it runs, key -> spec dict; exactly those, nothing else."""
    fleet: bool
    """Whether the fleet check runs."""
    estimate_s: float
    """Expected wall time: probes, fleet and every sweep (see the module's constants)."""
    bound_s: float
    """The latest it ends: probes, fleet, and every run taking its whole ``run_timeout_s``."""

    def check(self, name: str) -> PlannedCheck:
        return next(c for c in self.checks if c.check == name)


def _why_lacking(needs: Needs, nodes: Sequence[NodeFacts], n_gpus: int) -> str | None:
    if needs == "gpu" and not any(n.has_gpu for n in nodes):
        return "no GPU on any node (NVML and CUDA see none)"
    if needs in ("cuda", "2 gpus") and n_gpus == 0:
        hidden = [n.hostname for n in nodes if n.cuda_available and n.error is None]
        if hidden:
            return (
                f"no CUDA GPU that Ray offers (CUDA on {', '.join(hidden)}, Ray offers no GPU "
                "there: start Ray with --num-gpus)"
            )
        return "no CUDA"
    if needs == "2 devices" and n_gpus == 1:
        return f"{FSDP2_SHARED_GPU_REFUSED}; {n_gpus} GPU offered by Ray on the node with most"
    if needs == "2 gpus" and n_gpus < 2:
        why = f"{n_gpus} GPU offered by Ray on the node with most; needs 2 on one node"
        capped = [n for n in nodes if n.usable_gpus and len(n.gpu_names) > n.usable_gpus]
        if capped:
            n = capped[0]
            why += (
                f" ({n.hostname} has {len(n.gpu_names)}; Ray offers {n.usable_gpus}: the "
                "CUDA_VISIBLE_DEVICES Ray started with)"
            )
        return why
    return None


def _sweep_gpus(spec: dict | None, mode: str) -> int:
    if spec is None or mode == "cpu":
        return 0
    return 1 if spec.get("ranks_per_gpu") == 2 else spec["world_size"]


def only_errors(only: Sequence[str]) -> list[str]:
    """``--only`` names that are no check, each named with the allowed values."""
    return [
        f"--only {name!r}: no such check; allowed: {', '.join(CHECK_NAMES)}"
        for name in only
        if name not in CHECK_NAMES
    ]


def plan_selftest(
    nodes: Sequence[NodeFacts],
    quick: bool = False,
    peak_tflops: float | None = None,
    only: Sequence[str] = (),
) -> SelftestPlan:
    """The selftest this cluster gets: every check of :data:`CHECKS`, run or skipped with why,
    its nodes and GPUs, the sweeps it runs, and the time it takes. Pure: the command, the dry
    run and the simulated-hardware tests call it with the same facts.

    ``nodes``: one :class:`NodeFacts` per alive Ray node. ``quick``: one run per sweep
    (``QUICK_STRATEGY`` at grad_accum 1 for the two-rank kinds; one of each kind: one rank, two
    ranks, two GPUs, FSDP2, NVMe, hang) and no fleet check. ``peak_tflops``: MFU's peak for the
    GPU sweeps (for GPUs the peak table lacks). ``only``: these checks (:data:`CHECK_NAMES`)
    and no other; the rest read ``not run: not in --only``, and only the sweeps the named
    checks are decided from run (a check decided from a sweep that runs anyway, as
    ``one_rank_gpu_figures`` from ``one_rank``, is still judged)."""
    if problems := only_errors(only):
        raise ValueError("; ".join(problems))
    if peak_tflops is not None and not peak_tflops > 0:
        raise ValueError(f"peak_tflops: {peak_tflops!r}; allowed: a number of TFLOP/s above 0")
    n_gpus = max((n.usable_gpus for n in nodes), default=0)
    mode: Literal["cpu", "gpu"] = "gpu" if n_gpus >= 1 else "cpu"
    bf16 = all(n.bf16_native is not False for n in nodes if n.usable_gpus)
    sweeps = sweep_specs(mode == "gpu", n_gpus, quick, peak_tflops, bf16)
    answered = tuple(n.hostname for n in nodes if n.error is None)
    checks = []
    for c in CHECKS:
        why = _why_lacking(c.needs, nodes, n_gpus)
        spec = sweeps.get(c.sweep) if c.sweep else None
        if why is None and quick and c.name in QUICK_SKIPS:
            why = "--quick"
        if why is None and c.sweep and spec is None:
            why = f"no sweep {c.sweep} in this mode"
        need = _sweep_gpus(spec, mode)
        if c.name == "gpu_captures":
            on, gpus = tuple(n.hostname for n in nodes if n.has_gpu), 0
        elif mode == "gpu" and (spec is not None or c.needs in ("cuda", "2 gpus")):
            on = tuple(n.hostname for n in nodes if n.usable_gpus >= max(need, 1))
            gpus = need
        else:
            on, gpus = answered, need
        checks.append(PlannedCheck(c.name, why is None, why or "", on, gpus, c.sweep))
    fleet = not quick
    if only:
        wanted = {c.sweep for c in checks if c.run and c.check in only and c.sweep}
        sweeps = {k: v for k, v in sweeps.items() if k in wanted}
        fleet = fleet and any(name in only for name in FLEET_CHECKS)
        checks = [
            c
            if c.check in only
            or (c.run and c.sweep in sweeps)
            or (c.run and c.sweep is None and c.check not in FLEET_CHECKS)  # ran anyway
            else dataclasses.replace(c, run=False, why_not=c.why_not or "not in --only")
            for c in checks
        ]
    probes = PROBES_S + (FLEET_S_PER_NODE * len(answered) if fleet else 0.0)
    estimate = probes + sum(estimate_sweep_s(s) for s in sweeps.values())
    bound = probes + sum(
        SWEEP_START_S + len(planned_runs(s)) * (s["run_timeout_s"] + HANG_COLLECT_S)
        for s in sweeps.values()
    )
    return SelftestPlan(
        mode, n_gpus, quick, tuple(nodes), tuple(checks), sweeps, fleet, estimate, bound
    )
