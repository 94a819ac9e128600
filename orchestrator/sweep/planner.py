"""From a validated spec to the ordered list of runs, what each rank is given, and whether the
cluster can hold them.

One job: the plan. From the spec and plain facts about the cluster's nodes to what runs: the
variants and their order, run ids, each run's config and env, whether the cluster can hold the
runs, and where each rank of a run stands (local rank, visible GPUs). No I/O.

Pure: works on the spec and on plain descriptions of the cluster's nodes (:class:`NodeCapacity`),
so it is tested without Ray. Builds the ``workloads.contract`` configs the ranks receive.

A sweep's loop asks the planner once (:func:`plan_sweep`) and gets a :class:`SweepPlan`: every
run as a :class:`RunPlan` (its slot: plan entry and run id; its :class:`Launch`: config, env,
world size, placement, bundle, timeout and the nodes kept off), each link microbenchmark the
same way, and how ranks start. Nothing after it reads the spec to start a run.

May import: ds_config, exclusions, spec, workloads.catalog, workloads.contract.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.sweep.ds_config import ZeroVariant, deepspeed_config, default_bucket_mb
from orchestrator.sweep.exclusions import describe_exclusions, excluded_node_ids, usable_nodes
from orchestrator.sweep.spec import RANK_FORM, SpecError, SweepSpec
from workloads import catalog
from workloads.contract import (
    NCCL_TRACE_PREFIX,
    LinkbenchConfig,
    NodeInfo,
    RunConfig,
)

NCCL_DEBUG_DEFAULTS = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH,ENV"}
LEARNING_RATE = 1e-3  # any sane value: we time steps, we do not train to convergence
PROFILE_STEPS = 1  # profiled optimizer steps that count collectives (the last warmup step if >1)


class Variant:
    """One grid point: the strategy, grad_accum, link and placement, and a value for every other
    axis of the catalog (``v.offload``, ``v.grad_sync``, ...), each as stored: the axis's
    placeholder where it does not apply, the strategy's default where the grid named none.
    Frozen and hashable; equal variants have equal values of every axis.

    ``hsdp_shard_size`` is not a key (the spec and the placement decide it) but rides along:
    the ranks of a hybrid strategy need it."""

    __slots__ = ("_values", "hsdp_shard_size")

    def __init__(
        self,
        strategy: str,
        grad_accum: int,
        link: str,
        placement: str,
        hsdp_shard_size: int | None = None,
        **axes: Any,
    ) -> None:
        catalog.strategy(strategy)  # an unknown name is an error here, not a ZeRO run later
        unknown = set(axes) - set(catalog.AXES)
        if unknown:
            raise TypeError(f"Variant: unknown axes {sorted(unknown)}; known: {list(catalog.AXES)}")
        given = {"strategy": strategy, "grad_accum": grad_accum, "link": link,
                 "placement": placement, **axes}  # fmt: skip
        values: dict[str, Any] = {}
        for name, a in catalog.AXES.items():
            value = given.get(name)
            if isinstance(value, bool) and a.sql_type == "VARCHAR":
                value = str(value).lower()
            if not catalog.applies(name, {**given, **values}):
                value = a.na
            elif value is None:
                value = catalog.default(name, strategy)
            values[name] = value
        if values["bucket_mb"] == "default":  # the framework's own, as the grid's default
            values["bucket_mb"] = default_bucket_mb(strategy, "fp32")
        object.__setattr__(self, "_values", tuple(values.items()))
        object.__setattr__(self, "hsdp_shard_size", hsdp_shard_size)

    def __getattr__(self, name: str) -> Any:
        for key, value in object.__getattribute__(self, "_values"):
            if key == name:
                return value
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Variant is frozen")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Variant):
            return NotImplemented
        return (self._values, self.hsdp_shard_size) == (other._values, other.hsdp_shard_size)

    def __hash__(self) -> int:
        return hash((self._values, self.hsdp_shard_size))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._values)
        return f"Variant({inner}, hsdp_shard_size={self.hsdp_shard_size!r})"

    def replace(self, **changes: Any) -> Variant:
        """A copy with some values changed (axes or ``hsdp_shard_size``)."""
        values = {**dict(self._values), "hsdp_shard_size": self.hsdp_shard_size, **changes}
        return Variant(**values)

    @property
    def axes(self) -> dict[str, Any]:
        """Every axis's value, in the catalog's order (the variant key)."""
        return dict(self._values)

    @property
    def label(self) -> str:
        """``zero3 offload=cpu ga=8 link=slow pack bucket=25MB``: the strategy, then every axis
        that applies and is not the strategy's default, then grad_accum, link, placement."""
        parts = [self.strategy]
        for name, value in self._values:
            a = catalog.AXES[name]
            if name in ("strategy", "grad_accum", "link", "placement", "bucket_mb"):
                continue
            if value != a.na and value != catalog.default(name, self.strategy):
                parts.append(f"{a.short if name != 'offload' else name}={value}")
        parts += [f"ga={self.grad_accum}", f"link={self.link}", self.placement]
        if self.bucket_mb != catalog.AXES["bucket_mb"].na:
            parts.append(f"bucket={self.bucket_mb}MB")
        return " ".join(parts)

    def to_dict(self) -> dict:
        return {**dict(self._values), "hsdp_shard_size": self.hsdp_shard_size}


@dataclass(frozen=True)
class PlannedRun:
    """One run: a variant and its repeat, at position ``seq`` in execution order."""

    seq: int
    repeat: int
    variant: Variant


@dataclass(frozen=True)
class RunSlot:
    """One run to execute: its plan entry, its run id, and the failed run it supersedes (a
    resumed sweep's, ``resume.remaining_slots``)."""

    planned: PlannedRun
    run_id: str
    attempt: int = 1
    supersedes: str | None = None


def expand_grid(spec: SweepSpec) -> list[Variant]:
    """Cartesian product of the grid's axes (the catalog's order), in file order.

    Per strategy, an axis it does not apply to takes its placeholder (one variant, whatever the
    grid lists: ZeRO's ``grad_sync`` is ``n/a``); a value it does not offer is skipped, or,
    where it offers a single value, replaced by it (DDP's offload is ``none`` whatever the
    offload list says; FSDP2's bucket is 0); values no listed strategy offers, and values a
    strategy refuses, were refused by the spec already. ``bucket_mb`` ``default`` becomes the
    framework's own size (``default_bucket_mb``).
    """
    g = spec.grid
    axes = [a for a in catalog.AXES.values() if a.name != "strategy"]
    lists = [spec.grid_links if a.name == "link" else (getattr(g, a.name) or [None]) for a in axes]
    seen: set[Variant] = set()
    out: list[Variant] = []
    for strategy in g.strategy:
        for point in itertools.product(*lists):
            v = _variant(spec, strategy, dict(zip((a.name for a in axes), point, strict=True)))
            if v is not None and v not in seen:
                seen.add(v)
                out.append(v)
    return out


def _variant(spec: SweepSpec, strategy: str, point: dict[str, Any]) -> Variant | None:
    """One grid point as the variant it runs, or None where a value does not apply."""
    for name, value in list(point.items()):
        offered = catalog.offered(name, strategy)
        if value is None or offered is None or offered == ():
            continue
        if isinstance(value, bool):
            value = str(value).lower()
        if value not in offered and value not in catalog.AXES[name].extra:
            if len(offered) != 1:
                return None  # e.g. nvme for zero1, replicate_last for ddp
            value = offered[0]  # e.g. DDP's offload: none
        elif len(offered) == 1:
            value = offered[0]  # FSDP2's bucket: 0, whatever the grid's "default" says
        point[name] = value
    if point.get("bucket_mb") == "default":
        point["bucket_mb"] = default_bucket_mb(
            strategy, spec.precision, spec.deepspeed, spec.deepspeed_preset
        )
    v = Variant(strategy, **point)
    if not catalog.strategy(strategy).hybrid:
        return v
    return v.replace(hsdp_shard_size=hsdp_shard_size(spec, v))


def plan_runs(spec: SweepSpec) -> list[PlannedRun]:
    """Interleave repeats round robin: every variant's repeat 1, then every variant's repeat 2...

    Drift on a shared machine (thermals, neighbours) then spreads over all variants instead of
    biasing the ones that happened to run last.
    """
    variants = expand_grid(spec)
    runs = []
    for repeat in range(1, spec.repeats + 1):
        for v in variants:
            runs.append(PlannedRun(seq=len(runs) + 1, repeat=repeat, variant=v))
    return runs


def link_placements(spec: SweepSpec) -> list[tuple[str, str]]:
    """The (link, placement) pairs the link microbenchmark measures."""
    return list(itertools.product(spec.grid_links, spec.grid.placement))


@dataclass(frozen=True)
class NodeCapacity:
    """What one alive Ray node offers (from ``ray.nodes()``)."""

    node_id: str
    cpus: float
    gpus: float


CPU_SHARE_STEP = 0.01
"""Fractional CPU bundles are rounded down to this, so that world_size of them fit the node."""


def cpus_per_gpu(nodes: list[NodeCapacity]) -> int:
    """CPUs a GPU rank's bundle asks for: the floor of the smallest CPUs-per-GPU ratio among
    the GPU nodes, so a bundle fits beside every GPU of every GPU node, and at least 1: a GPU
    rank's host thread launches its kernels and a ZeRO rank with offload ``cpu``/``nvme`` runs
    its optimizer on the host, and the thread count (OMP_NUM_THREADS) follows the bundle. A
    ``{GPU: 1}`` bundle with no CPU gave every GPU rank one thread, so offload timed one core."""
    ratios = [n.cpus / n.gpus for n in nodes if n.gpus >= 1]
    return max(1, math.floor(min(ratios) + 1e-9)) if ratios else 1


def rank_resources(
    nodes: list[NodeCapacity], world_size: int = 1, ranks_per_gpu: int = 1
) -> dict[str, float]:
    """One rank's bundle. Where the cluster has GPUs: ``{GPU: 1, CPU: k}``, k =
    :func:`cpus_per_gpu`; with ``ranks_per_gpu`` 2 (the one-GPU rehearsal) each of the two ranks
    takes half the GPU and half of k (rounded down to ``CPU_SHARE_STEP``, at least one step).
    On a CPU-only cluster one CPU, or, where the largest node has fewer CPUs than
    ``world_size``, an equal share of that node's CPUs (rounded down to ``CPU_SHARE_STEP``), so
    the run still packs onto one node: e.g. 8 ranks of 0.25 CPU on a 2-core machine
    (oversubscribed, one thread each; for scale tests on CPU)."""
    if any(n.gpus >= 1 for n in nodes):
        k = cpus_per_gpu(nodes)
        if ranks_per_gpu == 1:
            return {"GPU": 1.0, "CPU": float(k)}
        share = math.floor(k / ranks_per_gpu / CPU_SHARE_STEP + 1e-9) * CPU_SHARE_STEP
        return {"GPU": 1.0 / ranks_per_gpu, "CPU": round(max(share, CPU_SHARE_STEP), 2)}
    largest = max((n.cpus for n in nodes), default=0.0)
    if world_size <= largest:
        return {"CPU": 1.0}
    share = math.floor(largest / world_size / CPU_SHARE_STEP) * CPU_SHARE_STEP
    return {"CPU": round(share, 2)} if share >= CPU_SHARE_STEP else {"CPU": 1.0}


def launcher_for(spec: SweepSpec, bundle: dict[str, float]) -> str:
    """How this sweep's ranks start: ``fork`` (per-node fork-server launcher; on GPUs each
    forked rank gets the GPU ids Ray fixed for its bundle, ``raycluster.runs.bundle_gpu_ids``)
    or ``actors`` (fresh Ray actors per run), as ``spec.launcher`` says. ``auto`` is fork on
    CPU-only clusters and stays actors where ranks get GPUs: fork on a GPU node has been
    checked only on Ray's logical GPUs so far, not by selftest's fork checks on a real GPU
    node; ``auto`` becomes fork there once such a node has run them green."""
    if spec.launcher == "auto":
        return "actors" if "GPU" in bundle else "fork"
    return spec.launcher


def check_capacity(
    spec: SweepSpec, nodes: list[NodeCapacity], excluded: Sequence[Mapping] = ()
) -> None:
    """Reject placements the cluster can never satisfy, before any run starts.

    pack (STRICT_PACK) needs one node holding world_size rank bundles; spread (STRICT_SPREAD)
    needs world_size / ranks_per_node distinct nodes holding ranks_per_node each. A bundle's every resource counts (a GPU
    bundle's CPUs too). ``ranks_per_gpu`` 2 needs a GPU. Excluded nodes
    (``exclusions.resolve_exclusions``) do not count; when too little is left, the error names
    them.
    """
    if not nodes:
        raise SpecError(["the Ray cluster has no alive nodes"])
    excluded = [r for r in excluded if r.get("node_id")]  # unmatched entries exclude nothing
    nodes = usable_nodes(nodes, excluded)
    if not nodes:
        raise SpecError(
            [
                f"exclude_nodes: every alive node is excluded ({describe_exclusions(excluded)});"
                " allowed: leave at least the nodes the sweep needs"
            ]
        )
    try:
        _check_capacity(spec, nodes)
    except SpecError as exc:
        if excluded:
            exc.errors.append(
                f"exclude_nodes: these counts leave out {len(excluded)} excluded node(s): "
                f"{describe_exclusions(excluded)}"
            )
        raise SpecError(exc.errors) from None


def _check_capacity(spec: SweepSpec, nodes: list[NodeCapacity]) -> None:
    if spec.ranks_per_gpu == 2 and not any(n.gpus >= 1 for n in nodes):
        raise SpecError(
            [
                "ranks_per_gpu: 2 (two ranks sharing one GPU) needs a GPU, and this Ray cluster "
                "advertises none; allowed on a CPU-only cluster: ranks_per_gpu 1"
            ]
        )
    res = rank_resources(nodes, spec.world_size, spec.ranks_per_gpu)
    kind = "GPU" if "GPU" in res else "CPU"
    have = {"GPU": lambda n: n.gpus, "CPU": lambda n: n.cpus}
    per_node = [int(min(have[r](nd) / need for r, need in res.items()) + 1e-9) for nd in nodes]
    unit = f"{kind}(s)" if len(res) == 1 else f"{kind}(s) for rank bundles of {res}"
    errors = []
    n = spec.world_size
    if "pack" in spec.grid.placement and max(per_node) < n:
        errors.append(
            f"grid.placement: 'pack' puts world_size={n} ranks on one node, but the largest "
            f"node has {max(per_node)} {unit}; allowed: world_size <= {max(per_node)} or "
            "placement 'spread'"
        )
    k = spec.ranks_per_node or 1
    usable = sum(1 for c in per_node if c >= k)
    if "spread" in spec.grid.placement and usable < n // k:
        how = "each of them on its own node" if k == 1 else f"{k} to a node (ranks_per_node)"
        errors.append(
            f"grid.placement: 'spread' puts world_size={n} ranks {how}, on {n // k} nodes, but "
            f"the cluster has {usable} node(s) with {k} {unit}; allowed: world_size <= "
            f"{usable * k} or placement 'pack'"
        )
    if errors:
        raise SpecError(errors)


# --------------------------------------------------------------------------------------------
# Ids, environment and the configs ranks receive.


def new_sweep_id(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def run_id_for(sweep_id: str, seq: int) -> str:
    return f"{sweep_id}-r{seq:04d}"


def fresh_slots(sweep_id: str, planned: list[PlannedRun]) -> list[RunSlot]:
    """A new sweep's slots: every planned run, first attempt (``resume.remaining_slots``: a
    resumed sweep's)."""
    return [RunSlot(p, run_id_for(sweep_id, p.seq)) for p in planned]


def linkbench_id_for(sweep_id: str, link: str, placement: str) -> str:
    return f"{sweep_id}-lb-{link}-{placement}"


def link_env_defaults(link_env: dict[str, str]) -> dict[str, str]:
    """What every process measuring over a link gets unless the link sets it (runs and the
    fleet check alike): ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and ``NCCL_NVLS_ENABLE=0`` when the
    link sets ``NCCL_P2P_DISABLE=1`` (see :func:`run_env`)."""
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if link_env.get("NCCL_P2P_DISABLE", "").strip() == "1":
        env["NCCL_NVLS_ENABLE"] = "0"
    return env


def run_env(spec: SweepSpec, link: str, run_id: str, cpus_per_rank: int) -> dict[str, str]:
    """Env for every rank of a run: the link's variables, plus NCCL logging unless the link sets
    its own (the user's value wins), plus thread counts matching the rank's CPU share.

    Also, each unless the link sets it: ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (CUDA orders devices
    fastest first by default; in PCI order CUDA index i is NVML / nvidia-smi index i, which Ray's
    ids and telemetry use); ``NCCL_NVLS_ENABLE=0`` when the link sets ``NCCL_P2P_DISABLE=1``
    (no P2P means no NVLink at all: NVLS is set up apart from P2P and would still carry data
    over NVSwitch; NCCL honours only ``1``); with ``ranks_per_gpu`` 2,
    ``NCCL_HOSTID=linksweep-rank{rank}`` (ranks with distinct host ids look like different
    hosts to NCCL and talk over NET, not through the one GPU they share). Values may hold
    ``{rank}``, filled in per rank by :func:`rank_env_for`.
    """
    link_env = spec.links[link]
    env = dict(NCCL_DEBUG_DEFAULTS)
    env["NCCL_DEBUG_FILE"] = f"/tmp/linksweep-nccl-{run_id}-%h-%p.log"
    env["OMP_NUM_THREADS"] = str(max(1, cpus_per_rank))
    env["TOKENIZERS_PARALLELISM"] = "false"
    env.update(link_env_defaults(link_env))
    if spec.ranks_per_gpu == 2:
        env["NCCL_HOSTID"] = f"linksweep-rank{RANK_FORM}"
    # Ray starts workers at nice 15; ranks compete with everything else on a shared machine at
    # the priority a bare torchrun would have (bench/bench_overhead.py compares the two).
    env["RAY_worker_niceness"] = "0"
    env.update(nccl_flight_recorder_env(run_id))
    env.update(link_env)
    return env


def rank_env_for(env: dict[str, str], rank: int) -> dict[str, str]:
    """One rank's env: ``{rank}`` in every value replaced by the rank's number (the only
    ``{...}`` form a link value may hold, ``spec.RANK_FORM``)."""
    return {k: v.replace(RANK_FORM, str(rank)) for k, v in env.items()}


def nccl_flight_recorder_env(run_id: str) -> dict[str, str]:
    """PyTorch's NCCL flight recorder for a run: keep a trace of recent collectives and dump it
    on a watchdog timeout, or when its trigger pipe is written (a hang, workloads/diag.py)."""
    prefix = f"{NCCL_TRACE_PREFIX}{run_id}-"
    return {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix,
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": prefix,
    }


def nvme_dir_for(spec: SweepSpec, v: Variant, run_id: str) -> str | None:
    return os.path.join(spec.nvme_path, run_id) if v.offload == "nvme" else None


def run_config(spec: SweepSpec, v: Variant, run_id: str) -> RunConfig:
    """What every rank of one run receives: everything it needs, nothing it must look up."""
    nvme_dir = nvme_dir_for(spec, v, run_id)
    given_bucket = v.bucket_mb if v.bucket_mb in spec.grid.bucket_mb else None  # else "default"
    ds_config = None
    if catalog.strategy(v.strategy).zero_stage is not None:  # DeepSpeed runs it
        zero = ZeroVariant(
            strategy=v.strategy,
            grad_accum=v.grad_accum,
            micro_batch_size=spec.micro_batch_size,
            world_size=spec.world_size,
            precision=spec.precision,
            offload=v.offload,
            # the grid's explicit sizes only; "default" leaves DeepSpeed's (or the block's)
            bucket_mb=given_bucket,
            nvme_path=nvme_dir,
            overlap_comm=v.overlap_comm,
        )
        ds_config = deepspeed_config(
            zero,
            user=spec.deepspeed,
            preset=spec.deepspeed_preset,
            comms_logger=False,  # enabled only for the profiled pass (workloads/ds_comms.py)
        )
    return RunConfig(
        run_id=run_id,
        strategy=v.strategy,
        grad_accum=v.grad_accum,
        bucket_mb=given_bucket,
        offload=v.offload,
        overlap_comm=v.overlap_comm,
        model=spec.model,
        dataset=spec.dataset,
        precision=spec.precision,
        seq_len=spec.seq_len,
        micro_batch_size=spec.micro_batch_size,
        steps=spec.steps,
        warmup_steps=spec.warmup_steps,
        seed=spec.seed,
        lr=LEARNING_RATE,
        profile_steps=PROFILE_STEPS,
        pg_timeout_s=pg_timeout_s(spec),
        nvme_dir=nvme_dir,
        ds_config=ds_config,
        reshard_after_forward=v.reshard_after_forward != "false",
        grad_sync=_applied(v, "grad_sync", None),
        hsdp_shard_size=hsdp_shard_size(spec, v),
        trace_steps=spec.trace.steps if spec.trace else 0,
        axes=v.axes,
    )


def _applied(v: Variant, axis: str, otherwise: Any) -> Any:
    """The variant's value of an axis for a ``RunConfig`` field, ``otherwise`` where the axis
    does not apply (the field's own default)."""
    value = getattr(v, axis)
    return otherwise if value == catalog.AXES[axis].na else value


def hsdp_shard_size(spec: SweepSpec, v: Variant) -> int | None:
    """An hsdp run's shard group size: the variant's, else the spec's, else the ranks of one
    node (pack: every rank; spread: ``ranks_per_node``); None for every other strategy. Spread without a size is refused
    by the spec (a shard group of one rank shards nothing); a variant that reaches here so
    raises ValueError rather than planning such a run."""
    if not catalog.strategy(v.strategy).hybrid:
        return None
    if v.hsdp_shard_size is not None:
        return v.hsdp_shard_size
    if spec.hsdp_shard_size is not None:
        return spec.hsdp_shard_size
    if v.placement == "spread" and spec.ranks_per_node is not None:
        return spec.ranks_per_node
    if v.placement != "pack":
        raise ValueError(
            f"hsdp_shard_size: required for hsdp placed {v.placement!r} (the ranks of one node "
            "are one rank there); allowed: a divisor of world_size, or placement 'pack'"
        )
    return spec.world_size


PG_TIMEOUT_MARGIN_S = 60.0


def pg_timeout_s(spec: SweepSpec) -> float:
    """The process group's collective timeout: past the run's own deadline, so a hang is
    caught by ``run_timeout_s`` while every rank is still alive and its stack can be read
    (a shorter one made the waiting rank raise and exit first, taking its stack with it)."""
    return spec.run_timeout_s + PG_TIMEOUT_MARGIN_S


def linkbench_config(spec: SweepSpec, run_id: str, gpu: bool) -> LinkbenchConfig:
    max_mb = spec.linkbench_max_mb or (256 if gpu else 16)
    return LinkbenchConfig(run_id=run_id, max_bytes=max_mb * 2**20, pg_timeout_s=pg_timeout_s(spec))


# --------------------------------------------------------------------------------------------
# The sweep's plan: everything each run needs, decided once.


@dataclass(frozen=True)
class Launch:
    """What Ray needs to start one run's ranks (``raycluster.runs.execute_run``)."""

    config: RunConfig | LinkbenchConfig
    env: dict[str, str]
    """Every rank's env (:func:`run_env`), per-rank values in their ``{rank}`` form."""
    world_size: int
    placement: str
    bundle: dict[str, float]
    """One rank's resources (:func:`rank_resources`)."""
    timeout_s: float
    excluded_ids: tuple[str, ...] = ()
    """Node ids no bundle may land on (``exclusions.excluded_ids``)."""
    ranks_per_bundle: int = 1
    """Ranks sharing one placement-group bundle, hence one node: ``ranks_per_node`` for spread,
    else 1. Rank r is in bundle ``r // ranks_per_bundle``."""

    @property
    def run_id(self) -> str:
        return self.config.run_id

    @property
    def bundles(self) -> list[dict[str, float]]:
        """The placement group's bundles: one per ``ranks_per_bundle`` ranks, each holding their
        resources together (so they land on one node)."""
        k = self.ranks_per_bundle
        return [{r: v * k for r, v in self.bundle.items()}] * (self.world_size // k)


@dataclass(frozen=True)
class RunPlan:
    """One training run of the sweep: its slot (plan entry, run id, attempt) and its launch."""

    slot: RunSlot
    launch: Launch

    @property
    def planned(self) -> PlannedRun:
        return self.slot.planned

    @property
    def run_id(self) -> str:
        return self.slot.run_id


@dataclass(frozen=True)
class LinkbenchPlan:
    """One link microbenchmark (a link x placement) and its launch."""

    link: str
    placement: str
    launch: Launch


@dataclass(frozen=True)
class SweepPlan:
    """What a sweep runs, from one call (:func:`plan_sweep`)."""

    sweep_id: str
    runs: list[RunPlan]
    """The runs still to run, in order (a resumed sweep: those ``resume.remaining_slots`` left)."""
    linkbenches: list[LinkbenchPlan]
    """Each (link, placement) of the link microbenchmark; [] when the grid has none."""
    launcher: str | None
    """``fork`` or ``actors`` (:func:`launcher_for`); None when there is no run to start."""
    planned: list[PlannedRun]
    """The spec's whole plan (:func:`plan_runs`), run or not: a resumed sweep refreshes the
    figures of every variant group from it."""
    excluded_ids: tuple[str, ...] = ()


def plan_sweep(
    spec: SweepSpec,
    bundle: dict[str, float],
    resume: tuple[str, list[RunSlot]] | None = None,
    excluded: Sequence[Mapping] = (),
) -> SweepPlan:
    """The sweep's plan: a new sweep id and every planned run (``resume``: its id and the slots
    left, ``ledger.resume_plan``, run ids kept), each with its :class:`Launch` (config, env with
    ``bundle``'s CPUs as threads, placement, timeout, off the ``excluded`` nodes), and the link
    microbenchmarks when the grid asks for them."""
    planned = plan_runs(spec)
    if resume is None:
        sweep_id = new_sweep_id()
        slots = fresh_slots(sweep_id, planned)
    else:
        sweep_id, slots = resume
    launch = _Launches(spec, dict(bundle), excluded_node_ids(excluded))
    runs = [RunPlan(s, launch.run(s)) for s in slots]
    benches = launch.linkbenches(sweep_id) if spec.grid.linkbench else []
    launcher = launcher_for(spec, bundle) if runs else None
    return SweepPlan(sweep_id, runs, benches, launcher, planned, launch.excluded_ids)


def plan_linkbench(
    spec: SweepSpec, bundle: dict[str, float], excluded: Sequence[Mapping] = ()
) -> SweepPlan:
    """``linksweep linkbench``'s plan: a new sweep id, no training run, every link x placement
    measured off the ``excluded`` nodes."""
    sweep_id = new_sweep_id()
    launch = _Launches(spec, dict(bundle), excluded_node_ids(excluded))
    return SweepPlan(sweep_id, [], launch.linkbenches(sweep_id), None, [], launch.excluded_ids)


@dataclass(frozen=True)
class _Launches:
    """Builds each :class:`Launch` of one sweep: what all its runs share, then each run's own."""

    spec: SweepSpec
    bundle: dict[str, float]
    excluded_ids: tuple[str, ...]

    def run(self, slot: RunSlot) -> Launch:
        v = slot.planned.variant
        return self._launch(run_config(self.spec, v, slot.run_id), v.link, v.placement)

    def linkbenches(self, sweep_id: str) -> list[LinkbenchPlan]:
        out = []
        for link, placement in link_placements(self.spec):
            run_id = linkbench_id_for(sweep_id, link, placement)
            cfg = linkbench_config(self.spec, run_id, gpu="GPU" in self.bundle)
            out.append(LinkbenchPlan(link, placement, self._launch(cfg, link, placement)))
        return out

    def _launch(self, config: RunConfig | LinkbenchConfig, link: str, placement: str) -> Launch:
        s = self.spec
        env = run_env(s, link, config.run_id, int(self.bundle.get("CPU", 1)))
        k = s.ranks_per_node if placement == "spread" and s.ranks_per_node else 1
        return Launch(config, env, s.world_size, placement, self.bundle, s.run_timeout_s,
                      self.excluded_ids, k)  # fmt: skip


# --------------------------------------------------------------------------------------------
# Where a run's ranks landed (what the run produced: ``raycluster.result.RunResult``).


@dataclass(frozen=True)
class RankPlacement:
    """Where one rank of a run ran (stored as ``runs.nodes``)."""

    rank: int
    node_id: str
    hostname: str
    ip: str
    gpu_ids: tuple[str, ...]
    pid: int
    local_rank: int
    visible_gpus: tuple[str, ...] | None
    """Every GPU id of the run's ranks on this rank's node (what the rank may see)."""


def place_ranks(infos: list[NodeInfo]) -> list[RankPlacement]:
    """Local rank of each rank, and the GPU ids of the run's ranks on each rank's node. Pure."""
    by_node: dict[str, list[int]] = {}
    for i, info in enumerate(infos):
        by_node.setdefault(info.node_id, []).append(i)
    local = [0] * len(infos)
    gpus: list[tuple[str, ...] | None] = [None] * len(infos)
    for ranks in by_node.values():
        node_gpus = tuple(g for r in ranks for g in infos[r].gpu_ids)
        for lr, r in enumerate(ranks):
            local[r] = lr
            gpus[r] = node_gpus or None
    return [
        RankPlacement(
            rank=i,
            node_id=info.node_id,
            hostname=info.hostname,
            ip=info.ip,
            gpu_ids=info.gpu_ids,
            pid=info.pid,
            local_rank=local[i],
            visible_gpus=gpus[i],
        )
        for i, info in enumerate(infos)
    ]
