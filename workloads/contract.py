"""The Ray boundary, defined once: what a rank is given and what it gives back.

The driver (``orchestrator/``) builds a :class:`RunConfig` or :class:`LinkbenchConfig`, a Ray
actor (``workloads/rank.py``) runs it on every rank, and each rank returns one
:class:`RankRecord`. Frozen dataclasses with units in field names (``_s`` seconds, ``_bytes``
bytes, ``_wall_s`` Unix time in seconds); nothing else crosses the process boundary. The driver
may import this module; it imports nothing from linksweep.

Vocabulary (the same in code, tables and docs):

sweep      one sweep file submitted once; a row in ``sweeps``.
variant    one grid point: a strategy and one value of every axis of the catalog
           (``workloads/catalog.py``: grad_accum, offload, ..., link, placement).
run        one variant x one repeat: fresh Ray actors, one process group, warmup then timed steps.
repeat     the 1-based index of a run among its variant's runs.
step       one optimizer step (= grad_accum micro-steps); "timed step" excludes warmup.
link       a named connectivity variant: environment variables set on every rank before start
           (e.g. NCCL_P2P_DISABLE=1), because NCCL and gloo read them once per process.
transport  what the communication library really used (P2P, SHM, NET/Socket, gloo/tcp).
placement  pack: all ranks on one node (STRICT_PACK); spread: one rank per node (STRICT_SPREAD).

May import: nothing (the standard library only).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

# Collective names as stored (``comms.op``, ``link_bench.op``). DeepSpeed and torch spell them in
# several ways; ``canonical_op`` maps every spelling onto these.
CANONICAL_OPS = (
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "all_to_all",
    "broadcast",
    "reduce",
)

_ALIASES: dict[str, str] = {
    # torch / DeepSpeed spellings of the same collective
    "allreduce": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "inference_all_reduce": "all_reduce",
    "allgather": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "all_gather_base": "all_gather",
    "_all_gather_base": "all_gather",
    "allgather_coalesced": "all_gather",
    "all_gather_coalesced": "all_gather",
    "all_gather_single": "all_gather",
    "allgather_fn": "all_gather",
    "reducescatter": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_base": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_coalesced": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter",
    "reduce_scatter_fn": "reduce_scatter",
    "alltoall": "all_to_all",
    "all_to_all_single": "all_to_all",
}


def canonical_op(op: str) -> str:
    """Canonical collective name for a torch / DeepSpeed / NCCL spelling.

    DeepSpeed comms-logger names in debug mode look like ``"all_reduce | [Caller Func: f]"``:
    the part before ``|`` is used. Raises ValueError for anything that is not a collective.
    """
    name = op.split("|", 1)[0].strip().lower()
    if name in CANONICAL_OPS:
        return name
    if name in _ALIASES:
        return _ALIASES[name]
    raise ValueError(
        f"unknown collective {op!r}; known: {sorted(CANONICAL_OPS)} and aliases {sorted(_ALIASES)}"
    )


# --------------------------------------------------------------------------------------------
# In: what a rank is given.


@dataclass(frozen=True)
class RunConfig:
    """One training run, the same on every rank."""

    run_id: str
    strategy: str
    """A name of the catalog (``workloads/catalog.py``)."""
    grad_accum: int
    """Micro-steps per optimizer step."""
    bucket_mb: int | None
    """DDP bucket_cap_mb; None: DDP's own default (25 MiB, and its smaller first bucket).
    DeepSpeed's bucket sizes are already in ``ds_config``."""
    offload: str
    """none | cpu | nvme (ZeRO only)."""
    model: str
    dataset: str
    precision: str
    """fp32 | bf16"""
    seq_len: int
    micro_batch_size: int
    """Samples per rank per micro-step."""
    steps: int
    """Timed optimizer steps."""
    warmup_steps: int
    """Optimizer steps before timing (returned, flagged warmup)."""
    seed: int
    lr: float
    profile_steps: int
    """Optimizer steps whose collectives are counted (0: none): the last warmup steps when there
    are more warmup steps than this, else a pass after the timed ones (``workloads/train.py``)."""
    pg_timeout_s: float
    """torch.distributed process-group timeout."""
    nvme_dir: str | None = None
    """NVMe offload's swap folder for this run (created and removed by the rank)."""
    ds_config: dict[str, Any] | None = None
    """DeepSpeed's config (DeepSpeed's own JSON format) for ZeRO strategies; None for DDP."""
    overlap_comm: str = "default"
    """default | true | false. DDP false: gradients all-reduced after backward, not during it
    (ZeRO's value is already in ``ds_config``)."""
    reshard_after_forward: bool = True
    """fsdp / hsdp: the transformer blocks' ``reshard_after_forward`` (``workloads/fsdp.py``)."""
    grad_sync: str | None = None
    """each | last | replicate_last, what the non-final micro-batches of an accumulation window
    reduce; None: the strategy's default (ddp last, fsdp and hsdp each). ZeRO: None."""
    hsdp_shard_size: int | None = None
    """hsdp: ranks per shard group, resolved by the planner; None for the other strategies."""
    trace_steps: int = 0
    """Optimizer steps traced with ``torch.profiler`` after the timed ones (0: none); never in
    a step-time figure, never inside the profiled pass (``workloads/train.py``)."""
    axes: dict[str, Any] = field(default_factory=dict)
    """Every axis of the variant as stored (``workloads/catalog.py``: the variant key, with the
    placeholder where an axis does not apply): how an axis added to the catalog reaches the
    strategy that reads it, with no field added here."""


@dataclass(frozen=True)
class LinkbenchConfig:
    """One link microbenchmark: collectives of power-of-two sizes up to ``max_bytes``."""

    run_id: str
    max_bytes: int
    pg_timeout_s: float


# --------------------------------------------------------------------------------------------
# Out: what a rank gives back.


@dataclass(frozen=True)
class StepRecord:
    """One optimizer step on one rank."""

    step: int
    warmup: bool
    step_time_s: float
    """Device-synchronised wall time of the step on this rank."""
    samples: int
    tokens: int
    loss: float


@dataclass(frozen=True)
class CommRecord:
    """Collectives of one (op, size) issued by one rank during the profiled pass, in total.

    ``msg_bytes`` follows nccl-tests: the full buffer (all_reduce: the tensor; all_gather: the
    gathered output; reduce_scatter: the unscattered input).
    """

    op: str
    """A name of ``CANONICAL_OPS``."""
    msg_bytes: int
    count: int
    total_time_s: float
    dtype: str | None = None
    """The elements' dtype on the link (``fp32``, ``bf16``, ...); None where not recorded."""
    group_size: int | None = None
    """Ranks in the process group it ran on (HSDP's run on its shard and replicate groups);
    None where not recorded: the world."""


@dataclass(frozen=True)
class TelemetrySample:
    """One NVML reading of one GPU. A field is None when NVML does not support it there."""

    t_s: float
    """Seconds since the sampler started (monotonic clock)."""
    temp_c: float | None
    power_w: float | None
    sm_clock_mhz: float | None
    reasons: int
    """Clock-event reason bitmask (0 when unreadable)."""


@dataclass(frozen=True)
class TelemetryRecord:
    """NVML over one rank's timed steps, or why there is none (``status`` 'absent: ...')."""

    status: str
    samples: tuple[TelemetrySample, ...] = ()
    violation_ns: dict[str, int] = field(default_factory=dict)
    """Nanoseconds in power / thermal violation during the window, by policy."""


@dataclass(frozen=True)
class LinkbenchRecord:
    """One collective at one size: per-iteration times (max over ranks), or why it was skipped."""

    op: str
    backend: str
    msg_bytes: int | None
    times_s: tuple[float, ...] = ()
    impl: str | None = None
    """The torch function used (all_gather has several, depending on the torch version)."""
    skipped_reason: str | None = None


# Where a run's seconds go, in the order they happen. Measured in the rank: process_start
# (actors requested -> the rank's process runs linksweep code; the driver's clock minus the rank's,
# one machine's clock on one node), imports (torch, transformers, deepspeed), cuda_init (the
# rank's CUDA context on its device; absent on CPU), pg_init, model_data_build, strategy_init
# (DDP wrap or deepspeed.initialize), compile (``compile: true``: the untimed steps in which
# torch.compile builds its graphs; absent otherwise), warmup, timed_steps,
# profiled_pass (the profiled steps, wherever they ran; warmup excludes them), traced_steps
# (trace: {steps: N}, under torch.profiler), rank_teardown. Measured by the driver: placement (placement group reserved),
# teardown (actors killed, group removed), commit (the run's transaction).
PHASES = (
    "placement",
    "process_start",
    "imports",
    "cuda_init",
    "pg_init",
    "model_data_build",
    "strategy_init",
    "compile",
    "warmup",
    "timed_steps",
    "profiled_pass",
    "traced_steps",
    "rank_teardown",
    "teardown",
    "commit",
)


@dataclass(frozen=True)
class PhaseTiming:
    """Seconds one rank (or the driver) spent in one phase of a run (a name of ``PHASES``)."""

    phase: str
    seconds: float


@dataclass(frozen=True)
class TraceRecord:
    """The traced steps: each one's time (timed as a timed step, under the profiler) and the
    profiler's Chrome/Perfetto trace of them, gzip-compressed; each step is a ``ProfilerStep#k``
    span in it. Its ``ts`` + ``baseTimeNanoseconds`` is the rank's wall clock (CLOCK_REALTIME, as
    ``time.time_ns`` reads it); the clock fields say how that clock stood against rank 0's."""

    step_times_s: tuple[float, ...]
    chrome_trace_gz: bytes
    clock_offset_ns: int | None = None
    """This rank's clock minus rank 0's at the same instant (``workloads/clocks.py``), measured
    just before the traced steps: a time t this rank read is t - offset on rank 0's clock.
    Rank 0: 0. None: not measured (a one-rank run)."""
    clock_uncertainty_ns: int | None = None
    """Half the round trip of the exchange the offset came from: the true offset is within
    this of ``clock_offset_ns`` (a bound by causality, not a standard error)."""


@dataclass(frozen=True)
class TrainingRecord:
    """What one rank measured in a training run."""

    steps: tuple[StepRecord, ...]
    n_params: int
    data_source: str
    """Where the text came from, e.g. 'builtin (hub unreachable)'."""
    tokenizer: str
    first_step_wall_s: float
    """Unix time when the first (warmup) step started."""
    peak_mem_bytes: int
    """Peak over the timed steps, reset at the first and read after the last, for every
    strategy alike: GPU allocator peak on GPU; process peak RSS (``VmHWM``) on CPU."""
    comms: tuple[CommRecord, ...]
    """Collectives of the profiled pass, totals over ``profile_steps`` steps."""
    profile_steps: int
    """Steps the profiled pass covered (0: no profiled pass)."""
    telemetry: TelemetryRecord
    nvme_swap_files: int
    """Files DeepSpeed wrote to this rank's own swap folders (offload nvme), counted at the end."""
    ds_config: dict[str, Any] | None = None
    """ZeRO: the config DeepSpeed parsed, after its defaults (rank 0's engine); None for DDP."""
    device_name: str | None = None
    """The GPU's name as the driver reports it (NVML's name, e.g. 'NVIDIA H100 80GB HBM3');
    None on CPU."""
    tf32: bool = False
    """fp32 matmuls ran on TF32 tensor cores (``torch.backends.cuda.matmul.allow_tf32``)."""
    phases: tuple[PhaseTiming, ...] = ()
    """model_data_build, strategy_init, warmup, timed_steps, profiled_pass, rank_teardown."""
    non_final_bytes: dict[str, int] | None = None
    """Bytes by op the non-final micro-batches of an accumulation window sent, per optimizer
    step of the profiled pass (``collectives.AccumulationProbe``); None: no profiled pass."""
    trace: TraceRecord | None = None
    """The traced steps (``RunConfig.trace_steps``); None: not traced."""
    step_collectives: tuple[tuple[str, int, int], ...] = ()
    """The last profiled step's collectives in issue order: (op, message bytes, group size)
    (``collectives.AccumulationProbe``); what names a traced step's intervals. Empty: no
    profiled pass."""
    optimizer_impl: str | None = None
    """The optimizer implementation that stepped (``workloads/optimizer.py`` ``implementation``):
    ``torch.optim.AdamW(fused=True)``, ``deepspeed.ops.adam.DeepSpeedCPUAdam``, ...; None: a
    strategy that does not say (a plugin's)."""
    compile_backend: str | None = None
    """``compile: true``: the ``torch.compile`` backend (``workloads/compiling.py``); None: eager."""
    compile_cache: str | None = None
    """Inductor's FX graph cache in the compile step: cold | warm | ``n/a: <backend>``."""
    recompiles_timed: int | None = None
    """Graphs compiled during the timed steps (0: they ran the graphs of the compile step)."""
    recompiles_profiled: int | None = None
    """Graphs compiled during the profiled step(s)."""
    graph_calls_timed_step: float | None = None
    """Compiled-graph calls per timed step."""
    graph_calls_profiled_step: float | None = None
    """Compiled-graph calls per profiled step (0: it ran eager, under the recorder's dispatch
    mode; its collectives are the compiled step's, issued outside the compiled regions)."""


@dataclass(frozen=True)
class DeviceDecision:
    """What a rank started on (``workloads.device.choose_device``), stored per rank in
    ``runs.nodes`` and named in a failed rank's error."""

    backend: str
    """nccl | gloo"""
    device: str
    """``cuda:<i>`` (i: position among ``cuda_visible_devices``) or ``cpu``."""
    cuda_visible_devices: str
    """The value the rank set before touching CUDA; ``""``: every GPU hidden (CPU rank)."""
    nvml_id: str | None
    """Ray's GPU id of this rank, what telemetry samples: an index (``"3"``), a UUID
    (``"GPU-..."``) or a MIG id (``"MIG-..."``); None on CPU."""

    @property
    def cuda_index(self) -> int | None:
        """The CUDA device index (``cuda:1`` -> 1); None on CPU."""
        kind, _, index = self.device.partition(":")
        return int(index) if kind == "cuda" and index else None

    def describe(self) -> str:
        """One line for an error text: ``backend=nccl device=cuda:1 CUDA_VISIBLE_DEVICES=0,1
        nvml_id=1``."""
        return (
            f"backend={self.backend} device={self.device} "
            f"CUDA_VISIBLE_DEVICES={self.cuda_visible_devices!r} nvml_id={self.nvml_id}"
        )

    def note(self, rank: int) -> str:
        """The line a failed rank adds to its exception (``rank 1 device: backend=...``): the
        run's stored error names the device, and :func:`noted_decisions` reads it back."""
        return f"rank {rank} device: {self.describe()}"


_NOTE = re.compile(
    r"^rank (\d+) device: backend=(\S+) device=(\S+) CUDA_VISIBLE_DEVICES='([^']*)' "
    r"nvml_id=(\S+)$",
    re.MULTILINE,
)


def noted_decisions(error: str | None) -> dict[int, DeviceDecision]:
    """The device decisions named in a run's error text (:meth:`DeviceDecision.note` lines),
    by rank: a rank that failed returns no record, and this is how its decision still reaches
    ``runs.nodes``. Only ranks whose note the text carries (the driver keeps the full text of
    the lowest failed rank)."""
    found = {}
    for m in _NOTE.finditer(error or ""):
        rank, backend, device, cvd, nvml_id = m.groups()
        found[int(rank)] = DeviceDecision(
            backend, device, cvd, None if nvml_id == "None" else nvml_id
        )
    return found


@dataclass(frozen=True)
class RankRecord:
    """Everything one rank returns: where it ran, and its training or microbenchmark record."""

    rank: int
    local_rank: int
    backend: str
    """nccl | gloo"""
    device: str
    created_wall_s: float
    """Unix time when the rank's actor was created."""
    nccl_log: str | None = None
    """This rank's NCCL_DEBUG output (NCCL runs only)."""
    training: TrainingRecord | None = None
    linkbench: tuple[LinkbenchRecord, ...] = ()
    phases: tuple[PhaseTiming, ...] = ()
    """Measured around the workload: imports, pg_init, rank_teardown (process-group part)."""
    device_decision: DeviceDecision | None = None
    """The device this rank chose (``workloads.device.choose_device``)."""


@dataclass(frozen=True)
class NodeInfo:
    """Where a rank's actor landed (asked before the run starts)."""

    node_id: str
    hostname: str
    ip: str
    gpu_ids: tuple[str, ...]
    """GPU ids Ray assigned to this actor."""
    pid: int


@dataclass(frozen=True)
class NodeReport:
    """What one node's probe found (``workloads/probe.py``), completed by the driver with its
    view of the node from Ray; every field has a default so that a failed probe, or a
    hand-written dict in a test (``orchestrator.topology.discovery.as_report``), is still a report."""

    node_id: str
    """Ray node id (hex)."""
    hostname: str | None = None
    """``socket.gethostname()`` on the node; from ``ray.nodes()`` if the probe failed."""
    ip: str | None = None
    """Ray's node manager address."""
    cpus: float = 0.0
    """Logical CPUs Ray advertises on the node (``ray.nodes()`` Resources)."""
    gpus: float = 0.0
    """Logical GPUs Ray advertises on the node; may differ from the physical count."""
    topo_text: str | None = None
    """``nvidia-smi topo -m`` output, verbatim; None when there is none."""
    topo_status: str = "not probed"
    """``"ok"``, why nvidia-smi gave no text, or ``"topo parse error: line N: ..."``."""
    nvml_ok: bool = False
    """NVML initialised and listed GPUs on the node."""
    nvml_status: str = ""
    """``nvml_available``'s text: ``"2 GPU(s), driver 550.54"`` or why NVML is absent."""
    inventory: list[dict[str, Any]] = field(default_factory=list)
    """``nvml_inventory()``: one dict per GPU (index, name, PCIe, power limits, temp_c...)."""
    driver_version: str | None = None
    """``nvmlSystemGetDriverVersion``, e.g. ``"550.54.15"``."""
    cuda_version: str | None = None
    """Highest CUDA version the driver supports (``nvmlSystemGetCudaDriverVersion``): ``"12.4"``."""
    cuda_available: bool = False
    """``torch.cuda.is_available()`` in the probe's child process."""
    cuda_device_count: int = 0
    p2p: list[list[bool | None]] | None = None
    """``p2p[i][j]``: ``torch.cuda.can_device_access_peer(i, j)``, PCI bus order; None on the
    diagonal. None when CUDA is not available."""
    cuda_status: str = ""
    """``"ok"`` or why there is no P2P matrix (CUDA unavailable, torch missing, probe timed out)."""
    nccl_version: str | None = None
    """``torch.cuda.nccl.version()`` as ``"2.21.5"``; None without CUDA."""
    bf16_native: bool | None = None
    """Every GPU torch sees computes bf16 in hardware (compute capability 8.0 or newer, or
    ROCm); None without CUDA. The selftest's GPU sweeps train in fp32 where it is False."""
    torch_version: str | None = None
    torch_cuda: str | None = None
    """CUDA toolkit torch was built with (``torch.version.cuda``); None for CPU builds."""
    error: str | None = None
    """Why the probe itself failed (task error, node died, no answer in time); None if it ran."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# Hang diagnosis (a run that reaches run_timeout_s): where each rank writes what it was doing.
STACK_FILE_PREFIX = "/tmp/linksweep-stack-"
"""Each rank's faulthandler file: ``{prefix}{run_id}-r{rank}.txt`` (workloads/diag.py)."""
NCCL_TRACE_PREFIX = "/tmp/linksweep-nccl-trace-"
"""PyTorch's NCCL flight recorder: dump ``{prefix}{run_id}-{rank}``, trigger pipe ``...{rank}.pipe``
(TORCH_NCCL_DEBUG_INFO_TEMP_FILE / TORCH_NCCL_DEBUG_INFO_PIPE_FILE = ``{prefix}{run_id}-``)."""


@dataclass(frozen=True)
class RankDiagnostic:
    """What one rank of a hung run was doing, captured on its node before it was killed."""

    rank: int
    pid: int
    python_stack: str | None = None
    """Every thread's Python stack (faulthandler, dumped on SIGUSR1)."""
    nccl_trace: bytes | None = None
    """The NCCL flight recorder's dump (a pickle, PyTorch's format), when one was written."""
    error: str | None = None
    """Why a part is missing."""
