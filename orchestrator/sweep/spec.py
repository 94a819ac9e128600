"""The sweep file: one typed spec, validated before anything runs.

A sweep file is YAML whose keys are the public interface (docs/sweep-file.md). It maps onto frozen
pydantic models with ``extra="forbid"``; closed choices are ``Literal``s. Every error names the
field, the bad value and what is allowed, and :func:`load_spec` raises :class:`SpecError` carrying
all of them at once, so a user fixes a file in one go.

One job: the sweep file's schema and every check a file gets before anything runs (field by
field, then across fields: which axes apply to which strategies, what FSDP2 refuses).

Pure: reads one file, touches no Ray, no database.

May import: pydantic, yaml, workloads.fsdp.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from workloads.fsdp import DEFAULT_GRAD_SYNC, FSDP_STRATEGIES, GRAD_SYNC, mesh_shape

Strategy = Literal["ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp"]
Placement = Literal["pack", "spread"]
Offload = Literal["none", "cpu", "nvme"]
ModelName = Literal["gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt2-tiny"]
Precision = Literal["fp32", "bf16"]
Overlap = Literal["default", "true", "false"]
GradDtype = Literal["fp32", "bf16"]
GRAD_DTYPE_NA = "n/a"
"""``ddp_grad_dtype`` of a ZeRO variant, where it does not apply: a value rather than NULL, so
that the variant key matches with SQL ``=`` (resume, statistics, deletes) as every other key.
``grad_sync`` of a ZeRO variant and ``reshard_after_forward`` of a non-FSDP2 one take it too."""
GradSync = Literal["each", "last", "replicate_last"]

# The sync-frequency rule, the one place it is written: which flavours each strategy offers and
# which it runs when the grid does not say (DDP: no_sync until the last micro-batch, today's
# behaviour; FSDP2: its own default, reduce every micro-batch). ZeRO has no such axis: DeepSpeed
# decides what a non-final micro-batch sends.
SYNC_FLAVOURS: dict[str, tuple[str, ...]] = {"ddp": ("each", "last"), **GRAD_SYNC}
DEFAULT_SYNC: dict[str, str] = {"ddp": "last", **{s: DEFAULT_GRAD_SYNC for s in FSDP_STRATEGIES}}


def default_grad_sync(strategy: str) -> str:
    """The flavour a strategy runs when the grid lists none; ``n/a`` for ZeRO."""
    return DEFAULT_SYNC.get(strategy, GRAD_DTYPE_NA)


Preset = Literal["serialized"]

DATASETS_BY_NAME = ("wikitext-2-raw-v1", "builtin")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
RANK_FORM = "{rank}"
"""The one substitution a link env value may hold: the rank's number, filled in per rank when
it starts (``orchestrator/planner.rank_env_for``)."""
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# The variant rule, the one place it is written: which strategies each offload applies to.
OFFLOAD_STRATEGIES: dict[str, tuple[str, ...]] = {
    "none": ("ddp", "zero1", "zero2", "zero3", *FSDP_STRATEGIES),
    "cpu": ("zero1", "zero2", "zero3", *FSDP_STRATEGIES),  # FSDP2: CPUOffloadPolicy
    "nvme": ("zero3",),  # DeepSpeed swaps to NVMe only with ZeRO stage 3; FSDP2 has no NVMe
}
OFFLOAD_RULE = {
    "none": "applies to every strategy",
    "cpu": "applies to ZeRO and FSDP2 only (zero1, zero2, zero3, fsdp, hsdp)",
    "nvme": "needs zero3 (DeepSpeed swaps to NVMe only with ZeRO stage 3)",
}


def offload_applies(strategy: str, offload: str) -> bool:
    """Can ``strategy`` run with ``offload``? (DDP: none only; nvme: zero3 only.)"""
    return strategy in OFFLOAD_STRATEGIES[offload]


class SpecError(ValueError):
    """A sweep file that cannot run. ``errors`` holds one readable line per problem."""

    def __init__(self, errors: list[str], path: str | None = None):
        self.errors = errors
        self.path = path
        where = f"{path}: " if path else ""
        super().__init__(where + "invalid sweep file\n" + "\n".join(f"  - {e}" for e in errors))


def _as_list(value: Any) -> Any:
    """A grid key takes a scalar (one value) or a list."""
    return value if isinstance(value, list) else [value]


class Grid(BaseModel):
    """The cartesian product a sweep runs; every key is optional."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    strategy: list[Strategy] = Field(default=["ddp"], min_length=1)
    """ddp = torch DDP; zero1/2/3 = DeepSpeed ZeRO stage 1/2/3; fsdp = PyTorch FSDP2
    (``fully_shard`` on each transformer block and the root); hsdp = FSDP2 on a 2-D mesh,
    replicate x shard (the shard group: ``hsdp_shard_size`` ranks)."""
    grad_accum: list[int] = Field(default=[1], min_length=1)
    """Micro-steps per optimizer step (the sync-frequency axis)."""
    link: list[str] | None = None
    """Names from ``links``; default: every link, in file order."""
    placement: list[Placement] = Field(default=["pack"], min_length=1)
    """pack: all ranks on one node; spread: one rank per node."""
    offload: list[Offload] = Field(default=["none"], min_length=1)
    """ZeRO only: where optimizer state (and with zero3 + nvme, parameters) lives."""
    bucket_mb: list[int | Literal["default"]] = Field(default=["default"], min_length=1)
    """DDP bucket_cap_mb and DeepSpeed reduce/allgather bucket size, in MiB (2**20 bytes, the
    unit of DDP's ``bucket_cap_mb``): one value is one byte count in both frameworks (DeepSpeed
    gets ``bucket_mb * 2**20 / bytes per gradient element`` elements); ``default``: each
    framework's own (DDP 25 MiB, DeepSpeed 5e8 elements)."""
    overlap_comm: list[Overlap] = Field(default=["default"], min_length=1)
    """default: each framework's own (DDP overlaps; DeepSpeed overlaps for ZeRO-3 only);
    true / false: ZeRO's overlap_comm; DDP false all-reduces the gradients after backward."""
    ddp_grad_dtype: list[GradDtype] = Field(default=["fp32"], min_length=1)
    """DDP only: the dtype DDP all-reduces gradients in. fp32: DDP's default (its gradients'
    dtype: fp32 under bf16 autocast too, since the parameters stay fp32); bf16: torch's
    ``bf16_compress_hook``, half the bytes, the dtype ZeRO sends in a bf16 run. Listing it
    needs ddp in ``strategy``; ZeRO variants do not expand over it (their dtypes follow
    ``precision`` and the ``deepspeed:`` block's ``communication_data_type``)."""
    reshard_after_forward: list[bool] = Field(default=[True], min_length=1)
    """FSDP2 strategies only: true frees a transformer block's parameters after forward and
    gathers them again in backward (as ZeRO-3); false keeps them until backward (as ZeRO-2).
    The root keeps FSDP2's default. Listing it needs fsdp or hsdp in ``strategy``; other
    strategies do not expand over it."""
    grad_sync: list[GradSync] | None = None
    """Sync frequency in an accumulation window's non-final micro-batches: each (reduce every
    micro-batch), last (only on the last: DDP's ``no_sync``, FSDP2's
    ``set_requires_gradient_sync``), replicate_last (hsdp: reduce-scatter every micro-batch,
    all-reduce across replicas on the last). Default: each strategy's own (ddp last, fsdp and
    hsdp each). Not for ZeRO (DeepSpeed decides); a value expands the strategies offering it."""
    linkbench: bool = False
    """Run the link microbenchmark once per link x placement before the training runs."""

    @field_validator(
        "strategy",
        "reshard_after_forward",
        "grad_sync",
        "grad_accum",
        "link",
        "placement",
        "offload",
        "bucket_mb",
        "overlap_comm",
        "ddp_grad_dtype",
        mode="before",
    )
    @classmethod
    def _scalar_to_list(cls, value: Any) -> Any:
        return None if value is None else _as_list(value)

    @field_validator("overlap_comm", mode="before")
    @classmethod
    def _yaml_bools(cls, values: list) -> list:
        # YAML reads true/false as booleans; the axis' values are the words
        return [str(v).lower() if isinstance(v, bool) else v for v in values]

    @field_validator(
        "grad_accum",
        "bucket_mb",
        "overlap_comm",
        "ddp_grad_dtype",
        "reshard_after_forward",
        "grad_sync",
    )
    @classmethod
    def _positive(cls, values: list | None) -> list | None:
        if values is None:
            return values
        bad = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v < 1]
        if bad:
            raise ValueError(f"must be integers >= 1, got {bad}")
        if len(set(values)) != len(values):
            raise ValueError(f"values must be distinct, got {values}")
        return values


class Trace(BaseModel):
    """``trace: {steps: N}``: N optimizer steps traced with ``torch.profiler`` after the timed
    ones (``workloads/train.py``); kept out of every step-time figure."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    steps: int = Field(ge=1, le=20)
    """Traced steps per run: enough to see a step's shape; each rank's trace grows with them."""


class SweepSpec(BaseModel):
    """A validated sweep file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    """Sweep name, letters/digits/._- (stored in ``sweeps.name``)."""
    model: ModelName = "gpt2-tiny"
    """gpt2 sizes with random init; gpt2-tiny is a small config for CPU."""
    dataset: str = "builtin"
    """wikitext-2-raw-v1 | builtin | path to a local text file."""
    precision: Precision = "fp32"
    seq_len: int = Field(default=128, ge=8, le=1024)
    """Tokens per sample; gpt2 has 1024 positions."""
    micro_batch_size: int = Field(default=2, ge=1)
    """Samples per rank per micro-step."""
    steps: int = Field(default=10, ge=1)
    """Timed optimizer steps per run."""
    warmup_steps: int = Field(default=2, ge=0)
    """Optimizer steps before timing; stored, flagged warmup, never in summaries."""
    repeats: int = Field(default=2, ge=1)
    """Runs per variant, interleaved round robin across variants."""
    world_size: int = Field(default=2, ge=1)
    """Ranks: one GPU each (two with ``ranks_per_gpu: 2``), or one worker process each on CPU."""
    ranks_per_gpu: Literal[1, 2] = 1
    """1: each rank has a GPU of its own. 2: the one-GPU rehearsal: two ranks (world_size 2,
    pack) share one GPU, each with its own ``NCCL_HOSTID`` so NCCL treats them as two hosts and
    talks over NET; it checks the whole NCCL path on one GPU, and its runs (``link_class``
    ``shared-gpu``) are never shown as a link measurement. Needs GPUs."""
    ranks_per_node: int | None = Field(default=None, ge=2)
    """Placement spread: how many ranks each node takes (``world_size`` must divide by it, and
    be larger); default one. ``world_size: 4`` with ``ranks_per_node: 2`` puts two ranks on each
    of two nodes: the ranks of a node talk over its own links, the nodes over the network, and
    hsdp's default shard group (the ranks of one node) keeps its replicate dimension on the
    network. Needs 'spread' in ``grid.placement`` (pack puts every rank on one node already)."""
    links: dict[str, dict[str, str]] = Field(default_factory=lambda: {"default": {}})
    """Named connectivity variants: env vars set on every rank before start. A value may hold
    ``{rank}``, replaced by each rank's number when it starts (e.g. ``NCCL_HOSTID:
    "host-{rank}"``); no other ``{...}`` form is allowed (``RANK_FORM``)."""
    baseline_link: str | None = None
    """The link slowdowns are measured against; default: the first in ``links``."""
    grid: Grid = Field(default_factory=Grid)
    nvme_path: str = "/tmp/linksweep-nvme"
    """Where NVMe offload swaps; each run gets a fresh subfolder, removed afterwards."""
    run_timeout_s: float = Field(default=1800.0, gt=0)
    """A run still going after this long is killed and stored as failed (hang guard)."""
    linkbench_max_mb: int | None = Field(default=None, ge=1)
    """Largest link-microbenchmark message, MiB; default 16 on CPU (gloo), 256 on GPU."""
    seed: int = 0
    """Seed for model init and data order, the same in every run."""
    deepspeed: dict[str, Any] | None = None
    """DeepSpeed config keys deep-merged into every ZeRO run's config (checked by DeepSpeed's
    own config models before anything runs; keys the variant sets are refused)."""
    deepspeed_preset: Preset | None = None
    """serialized: the former pinned study config (no overlap, every parameter gathered)."""
    peak_tflops: float | None = Field(default=None, gt=0)
    """Peak dense TFLOP/s per GPU for MFU, overriding the built-in table (orchestrator/analysis/flops.py)."""
    exclude_nodes: list[str] = Field(default_factory=list)
    """Nodes no rank is placed on: each a Ray node id (hex), an IP or a hostname (a hostname
    several nodes share excludes all of them); matched against the nodes alive when the sweep
    starts (and again on resume), stored in ``sweeps.excluded_nodes``. An entry no alive node
    matches is a warning. ``linksweep run --exclude-suspects FLEET_ID`` adds a fleet check's
    suspect nodes (``orchestrator/sweep/exclusions.py``)."""
    hsdp_shard_size: int | None = Field(default=None, ge=1)
    """hsdp: ranks per shard group (the replicate groups cross them); ``world_size`` must divide
    by it. Default: the ranks of one node (placement pack: ``world_size``, one shard group;
    spread: ``ranks_per_node``). Required with placement spread and no ``ranks_per_node``:
    there the ranks of one node are one rank, a shard group of one would shard nothing (every
    rank a whole replica, DDP by another name), so the sweep is refused before anything runs
    rather than measuring that."""
    trace: Trace | None = None
    """Trace each run's rank with ``torch.profiler`` for ``steps`` extra optimizer steps after the
    timed ones: the traces are kept beside the database (``<db>.traces/``, table ``traces``) and
    their communication/compute overlap stored (``trace_overlap``); the traced steps' own time
    against the timed steps' is the profiler's overhead (``runs.trace_overhead``). Off by
    default."""
    launcher: Literal["auto", "fork", "actors"] = "auto"
    """How ranks start. fork: a launcher actor per node per sweep forks each run's ranks from a
    fork server with torch/transformers/deepspeed imported (no imports paid per run); actors:
    fresh Ray actors per run (pays the imports every run); auto: fork on CPU-only clusters,
    actors on GPU clusters (fork has not been run on a GPU yet)."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME_RE.match(value):
            raise ValueError(f"must match {NAME_RE.pattern} (letters, digits, '.', '_', '-')")
        return value

    @field_validator("links", mode="before")
    @classmethod
    def _links(cls, value: Any) -> Any:
        if not isinstance(value, dict) or not value:
            raise ValueError("must be a non-empty mapping of link name -> {ENV_VAR: value}")
        out: dict[str, dict[str, str]] = {}
        for name, env in value.items():
            if not isinstance(name, str) or not NAME_RE.match(name):
                raise ValueError(f"link name {name!r} must match {NAME_RE.pattern}")
            env = {} if env is None else env
            if not isinstance(env, dict):
                raise ValueError(f"link {name!r} must map env var names to values, got {env!r}")
            clean: dict[str, str] = {}
            for key, val in env.items():
                if not isinstance(key, str) or not ENV_NAME_RE.match(key):
                    raise ValueError(f"link {name!r}: {key!r} is not an environment variable name")
                if isinstance(val, (dict, list)) or val is None:
                    raise ValueError(
                        f"link {name!r}: {key} must be a string or number, got {val!r}"
                    )
                clean[key] = str(val).lower() if isinstance(val, bool) else str(val)
                rest = clean[key].replace(RANK_FORM, "")
                if "{" in rest or "}" in rest:
                    raise ValueError(
                        f"link {name!r}: {key}={clean[key]!r} holds a {{...}} form other than "
                        f"{RANK_FORM}; allowed: {RANK_FORM} (the rank's number) only"
                    )
            out[name] = clean
        return out

    @field_validator("exclude_nodes", mode="before")
    @classmethod
    def _exclude_nodes(cls, value: Any) -> Any:
        values = [] if value is None else _as_list(value)
        bad = [v for v in values if not isinstance(v, str) or not v.strip()]
        if bad:
            raise ValueError(
                f"entries must be non-empty strings (a Ray node id, an IP or a hostname); bad "
                f"entries: {bad!r} (quote a numeric hostname)"
            )
        return [v.strip() for v in values]

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, value: str) -> str:
        if value in DATASETS_BY_NAME:
            return value
        if os.path.isfile(value):
            return value
        raise ValueError(
            f"{value!r} is neither one of {list(DATASETS_BY_NAME)} nor an existing text file"
        )

    @model_validator(mode="after")
    def _cross_field(self) -> SweepSpec:
        errors = []
        names = list(self.links)
        for link in self.grid.link or []:
            if link not in self.links:
                errors.append(f"grid.link: unknown link {link!r}; links defined: {names}")
        if self.baseline_link is not None and self.baseline_link not in self.links:
            errors.append(
                f"baseline_link: unknown link {self.baseline_link!r}; links defined: {names}"
            )
        for offload in self.grid.offload:
            if not any(offload_applies(s, offload) for s in self.grid.strategy):
                errors.append(
                    f"grid.offload: {offload!r} {OFFLOAD_RULE[offload]}; "
                    f"grid.strategy is {self.grid.strategy}"
                )
        if "ddp_grad_dtype" in self.grid.model_fields_set and "ddp" not in self.grid.strategy:
            errors.append(
                f"grid.ddp_grad_dtype: {self.grid.ddp_grad_dtype} applies to ddp only "
                f"(allowed values: {list(get_args(GradDtype))}); grid.strategy is "
                f"{self.grid.strategy} (add ddp, or remove grid.ddp_grad_dtype)"
            )
        errors.extend(fsdp_errors(self))
        zero = [st for st in self.grid.strategy if st.startswith("zero")]
        for key in ("deepspeed", "deepspeed_preset"):
            if getattr(self, key) is not None and not zero:
                errors.append(
                    f"{key}: applies to ZeRO runs only; grid.strategy is {self.grid.strategy} "
                    "(add zero1, zero2 or zero3, or remove it)"
                )
        if "spread" in self.grid.placement and self.world_size < 2:
            errors.append("grid.placement: 'spread' needs world_size >= 2")
        errors.extend(_ranks_per_node_errors(self))
        if self.ranks_per_gpu == 2:
            if self.world_size != 2:
                errors.append(
                    f"ranks_per_gpu: 2 (two ranks on one GPU) needs world_size 2, got "
                    f"{self.world_size}: sharing a GPU is reported not to work cleanly beyond two "
                    "ranks; allowed: world_size 2, or ranks_per_gpu 1"
                )
            if "spread" in self.grid.placement:
                errors.append(
                    "grid.placement: 'spread' puts the ranks on different nodes, but "
                    "ranks_per_gpu 2 shares one GPU; allowed with ranks_per_gpu 2: 'pack'"
                )
        if errors:
            raise ValueError("\n".join(errors))
        return self

    @property
    def grid_links(self) -> list[str]:
        return list(self.grid.link) if self.grid.link else list(self.links)

    @property
    def baseline(self) -> str:
        return self.baseline_link or next(iter(self.links))

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def fsdp_errors(spec: SweepSpec) -> list[str]:
    """What the FSDP2 strategies and the sync-frequency axes refuse, one line each, naming the
    field and what is allowed: every check runs before anything starts."""
    g = spec.grid
    fsdp = [st for st in g.strategy if st in FSDP_STRATEGIES]
    errors = []
    if "reshard_after_forward" in g.model_fields_set and not fsdp:
        errors.append(
            f"grid.reshard_after_forward: applies to the FSDP2 strategies only "
            f"({list(FSDP_STRATEGIES)}); grid.strategy is {g.strategy} (add fsdp or hsdp, or "
            "remove grid.reshard_after_forward)"
        )
    errors.extend(_grad_sync_errors(g))
    errors.extend(_hsdp_errors(spec))
    if not fsdp:
        return errors
    why = f"grid.strategy lists {fsdp}"
    if "nvme" in g.offload:
        errors.append(
            f"grid.offload: 'nvme' is refused for the FSDP2 strategies ({why}): FSDP2 has no "
            "NVMe offload, only CPUOffloadPolicy; allowed with fsdp/hsdp: none, cpu"
        )
    if any(b != "default" for b in g.bucket_mb):
        errors.append(
            f"grid.bucket_mb: {g.bucket_mb} is refused for the FSDP2 strategies ({why}): FSDP2 "
            "has no bucket size (it reduces per fully_shard unit); allowed with fsdp/hsdp: "
            "default"
        )
    if any(o != "default" for o in g.overlap_comm):
        errors.append(
            f"grid.overlap_comm: {g.overlap_comm} is refused for the FSDP2 strategies ({why}): "
            "FSDP2 has no overlap switch (it always overlaps); allowed with fsdp/hsdp: default"
        )
    if spec.ranks_per_gpu == 2:
        errors.append(
            f"ranks_per_gpu: 2 is refused for the FSDP2 strategies ({why}): the one-GPU "
            "rehearsal is run with DDP and ZeRO only; allowed with fsdp/hsdp: 1"
        )
    return errors


def _grad_sync_errors(g: Grid) -> list[str]:
    """grad_sync listed for ZeRO alone, or a flavour no listed strategy offers."""
    if g.grad_sync is None:
        return []
    offering = [st for st in g.strategy if st in SYNC_FLAVOURS]
    if not offering:
        return [
            f"grid.grad_sync: applies to ddp, fsdp and hsdp only (ZeRO's sync is DeepSpeed's "
            f"own); grid.strategy is {g.strategy} (add ddp, fsdp or hsdp, or remove "
            "grid.grad_sync)"
        ]
    errors = []
    for flavour in g.grad_sync:
        if not any(flavour in SYNC_FLAVOURS[st] for st in offering):
            allowed = {st: list(SYNC_FLAVOURS[st]) for st in offering}
            errors.append(
                f"grid.grad_sync: {flavour!r} is offered by none of {offering}; allowed values "
                f"per strategy: {allowed}"
            )
    return errors


def _ranks_per_node_errors(spec: SweepSpec) -> list[str]:
    """ranks_per_node without 'spread', or one that does not divide world_size into 2+ nodes."""
    k, n = spec.ranks_per_node, spec.world_size
    if k is None:
        return []
    if "spread" not in spec.grid.placement:
        return [
            f"ranks_per_node: applies to grid.placement 'spread'; grid.placement is "
            f"{spec.grid.placement} (add spread, or remove ranks_per_node)"
        ]
    if n % k or k >= n:
        allowed = [d for d in range(2, n) if n % d == 0]
        return [
            f"ranks_per_node: {k} with world_size {n} does not split the ranks over two nodes or "
            f"more; allowed with world_size {n}: {allowed or 'none (world_size is prime)'}"
        ]
    return []


def _hsdp_errors(spec: SweepSpec) -> list[str]:
    """hsdp_shard_size set without hsdp, or a world size it does not divide; hsdp placed
    spread without it (the default shard group, the ranks of one node, is then one rank)."""
    size = spec.hsdp_shard_size
    divisors = [d for d in range(1, spec.world_size + 1) if spec.world_size % d == 0]
    if size is None:
        spread = "spread" in spec.grid.placement and spec.ranks_per_node is None
        if "hsdp" in spec.grid.strategy and spread:
            return [
                "hsdp_shard_size: required for strategy hsdp with grid.placement 'spread': the "
                "default shard group, the ranks of one node, is one rank when every rank has a "
                "node of its own, so nothing would be sharded; allowed: hsdp_shard_size set "
                f"(with world_size {spec.world_size}: {divisors}), ranks_per_node set (2 or "
                "more ranks on each node), or grid.placement 'pack' alone"
            ]
        return []
    if "hsdp" not in spec.grid.strategy:
        return [
            f"hsdp_shard_size: applies to hsdp only; grid.strategy is {spec.grid.strategy} "
            "(add hsdp, or remove hsdp_shard_size)"
        ]
    try:
        mesh_shape("hsdp", spec.world_size, size)
    except ValueError as exc:
        return [f"hsdp_shard_size: {exc}; allowed with world_size {spec.world_size}: {divisors}"]
    return []


def _allowed_keys(loc: tuple) -> list[str]:
    model: type[BaseModel] = {"grid": Grid, "trace": Trace}.get(
        str(loc[:1][0]) if loc else "", SweepSpec
    )
    return list(model.model_fields)


def _format_error(err: dict) -> list[str]:
    loc = tuple(err.get("loc", ()))
    field = ".".join(str(p) for p in loc) or "(file)"
    kind = err.get("type")
    value = err.get("input")
    if kind == "extra_forbidden":
        return [f"{field}: unknown key; allowed keys here: {_allowed_keys(loc[:-1])}"]
    if kind == "missing":
        return [f"{field}: required key is missing"]
    if kind == "literal_error":
        allowed = err.get("ctx", {}).get("expected", "")
        return [f"{field}: {value!r} is not allowed; allowed values: {allowed}"]
    msg = err.get("msg", "invalid")
    msg = msg.removeprefix("Value error, ")
    if "\n" in msg:  # several cross-field problems in one validator
        return msg.split("\n")
    shown = "" if isinstance(value, dict) else f" (got {value!r})"
    return [f"{field}: {msg}{shown}"]


def parse_spec(data: Any, path: str | None = None) -> SweepSpec:
    """Validate an already-loaded YAML document."""
    if not isinstance(data, dict):
        raise SpecError(
            [f"the file must be a YAML mapping of keys, got {type(data).__name__}"], path
        )
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as exc:
        lines: list[str] = []
        for err in exc.errors():
            lines.extend(_format_error(err))
        raise SpecError(lines, path) from None


def load_spec(path: str | os.PathLike) -> SweepSpec:
    """Read and validate a sweep file; raise :class:`SpecError` naming every problem."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise SpecError([f"cannot read the sweep file: {exc.strerror}"], str(path)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError([f"not valid YAML: {exc}"], str(path)) from None
    # A relative dataset path is relative to the sweep file, like an include would be.
    if isinstance(data, dict) and isinstance(data.get("dataset"), str):
        ds = data["dataset"]
        if ds not in DATASETS_BY_NAME and not os.path.isabs(ds) and not os.path.exists(ds):
            candidate = p.parent / ds
            if candidate.exists():
                data["dataset"] = str(candidate)
    return parse_spec(data, str(path))


ALLOWED = {
    "strategy": list(get_args(Strategy)),
    "placement": list(get_args(Placement)),
    "offload": list(get_args(Offload)),
    "model": list(get_args(ModelName)),
    "precision": list(get_args(Precision)),
    "overlap_comm": list(get_args(Overlap)),
    "ddp_grad_dtype": list(get_args(GradDtype)),
    "grad_sync": list(get_args(GradSync)),
    "reshard_after_forward": [True, False],
    "deepspeed_preset": list(get_args(Preset)),
    "ranks_per_gpu": [1, 2],
}
