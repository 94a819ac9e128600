"""The sweep file: one typed spec, validated before anything runs.

A sweep file is YAML whose keys are the public interface (docs/sweep-file.md). It maps onto frozen
pydantic models with ``extra="forbid"``; closed choices are ``Literal``s. Every error names the
field, the bad value and what is allowed, and :func:`load_spec` raises :class:`SpecError` carrying
all of them at once, so a user fixes a file in one go.

One job: the sweep file's schema and every check a file gets before anything runs (field by
field, then across fields: which axes apply to which strategies, what FSDP2 refuses).

Pure: reads one file, touches no Ray, no database.

May import: overrides, pydantic, yaml, workloads.catalog, workloads.fsdp.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from orchestrator.sweep.overrides import OverrideError, apply_overrides
from workloads import catalog
from workloads.fsdp import mesh_shape

Placement = Literal["pack", "spread"]
ModelName = Literal["gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt2-tiny"]
Precision = Literal["fp32", "bf16"]
GRAD_DTYPE_NA = catalog.NA
"""An axis's value where it does not apply (``catalog.NA``): a value rather than NULL, so that
the variant key matches with SQL ``=`` (resume, statistics, deletes) as every other key."""


def default_grad_sync(strategy: str) -> str:
    """The flavour a strategy runs when the grid lists none; ``n/a`` where it has no such axis."""
    return catalog.default("grad_sync", strategy)


Preset = Literal["serialized"]

DATASETS_BY_NAME = ("wikitext-2-raw-v1", "builtin")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
RANK_FORM = "{rank}"
"""The one substitution a link env value may hold: the rank's number, filled in per rank when
it starts (``orchestrator/planner.rank_env_for``)."""
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def offload_applies(strategy: str, offload: str) -> bool:
    """Can ``strategy`` run with ``offload``? (the catalog's offered values)"""
    return offload in (catalog.offered("offload", strategy) or ())


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


# --------------------------------------------------------------------------------------------
# The grid: one field per catalog axis, built from the catalog (workloads/catalog.py).


def _axis_type(a: catalog.Axis) -> Any:
    """The type of one value of the axis: a Literal of its values, or int (and its words)."""
    if a.name == "strategy":
        return Literal[catalog.names()]
    if a.values is not None:
        return Literal[a.values]
    if a.extra:
        return int | Literal[a.extra]
    return int


def _axis_field(a: catalog.Axis) -> tuple[Any, Any]:
    if a.name == "link":  # names from ``links``, checked across fields
        return list[str] | None, Field(default=None, description="Names from ``links``; "
                                       "default: every link, in file order.")  # fmt: skip
    if a.default is None:  # each strategy's own default (grad_sync)
        return list[_axis_type(a)] | None, Field(default=None, description=a.doc)
    return list[_axis_type(a)], Field(default=[a.default], min_length=1, description=a.doc)


def _scalar_to_list(cls, value: Any) -> Any:
    return None if value is None else _as_list(value)


def _words(cls, values: Any) -> Any:
    # YAML reads true/false as booleans; a text axis's values are the words
    if not isinstance(values, list):
        return values
    return [str(v).lower() if isinstance(v, bool) else v for v in values]


def _checked(cls, values: list | None, info: ValidationInfo) -> list | None:
    if values is None:
        return values
    a = catalog.AXES.get(info.field_name)
    low = a.minimum if a is not None and a.minimum is not None else None
    bad = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and low is not None
           and v < low]  # fmt: skip
    if bad:
        raise ValueError(f"must be integers >= {low}, got {bad}")
    if len(set(values)) != len(values):
        raise ValueError(f"values must be distinct, got {values}")
    return values


def _grid_model() -> type[BaseModel]:
    axes = [a for a in catalog.AXES.values() if a.grid or a.name == "link"]
    text = [a.name for a in axes if a.sql_type == "VARCHAR" and a.values is not None]
    fields: dict[str, Any] = {a.name: _axis_field(a) for a in axes}
    fields["linkbench"] = (
        bool,
        Field(default=False, description="Run the link microbenchmark once per link x "
              "placement before the training runs."),
    )  # fmt: skip
    names = [a.name for a in axes]
    validators = {
        "_scalar_to_list": field_validator(*names, mode="before")(_scalar_to_list),
        "_words": field_validator(*text, mode="before")(_words),
        "_checked": field_validator(*names)(_checked),
    }
    return create_model(
        "Grid",
        __config__=ConfigDict(extra="forbid", frozen=True),
        __doc__="The cartesian product a sweep runs, one key per catalog axis; every key is "
        "optional.",
        __validators__=validators,
        **fields,
    )


Grid = _grid_model()
"""The grid (``grid:`` in a sweep file): one list-valued key per axis of the catalog."""


def _renamed(grid: Any) -> tuple[Any, list[str]]:
    """A grid still naming an axis by its former key (``Axis.renamed_from``): the values mapped
    to the new key, and a line saying so."""
    if not isinstance(grid, dict):
        return grid, []
    notes = []
    grid = dict(grid)
    for a in catalog.AXES.values():
        if a.renamed_from is None or a.renamed_from[0] not in grid:
            continue
        old, mapping = a.renamed_from
        values = _as_list(grid.pop(old))
        if a.name in grid:
            raise SpecError([f"grid.{old}: renamed {a.name}; the file gives both: keep {a.name}"])
        unknown = [v for v in values if v not in mapping]
        if unknown:
            raise SpecError(
                [f"grid.{old} (now {a.name}): {unknown} not allowed; allowed values: "
                 f"{list(mapping)}"]
            )  # fmt: skip
        grid[a.name] = [mapping[v] for v in values]
        notes.append(
            f"grid.{old} is now grid.{a.name}: read {values} as {grid[a.name]} (write "
            f"{a.name} in the file)"
        )
    return grid, notes


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
    fresh Ray actors per run (pays the imports every run); on GPUs each forked rank sees exactly
    the GPUs Ray reserved for its bundle. auto: fork on CPU-only clusters, actors on GPU clusters
    (fork on GPUs is checked on Ray's logical GPUs, not yet by selftest on a real GPU node)."""

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
        errors.extend(axis_errors(self))
        errors.extend(_hybrid_errors(self))
        if not deepspeed_runs(self):
            for key in ("deepspeed", "deepspeed_preset"):
                if getattr(self, key) is not None:
                    errors.append(
                        f"{key}: applies to ZeRO runs only; grid.strategy is "
                        f"{self.grid.strategy} (add {_or(catalog.names(catalog.ZERO))}, or remove "
                        "it)"
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

    _notes: list[str] = PrivateAttr(default_factory=list)

    @property
    def notes(self) -> list[str]:
        """What reading the file changed that its author should know (a renamed key)."""
        return list(self._notes)

    @property
    def grid_links(self) -> list[str]:
        return list(self.grid.link) if self.grid.link else list(self.links)

    @property
    def baseline(self) -> str:
        return self.baseline_link or next(iter(self.links))

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def deepspeed_runs(spec: SweepSpec) -> list[str]:
    """The listed strategies DeepSpeed runs (those with a ZeRO stage): what the ``deepspeed:``
    block, its preset and DeepSpeed's own config check apply to."""
    return [st for st in spec.grid.strategy if catalog.strategy(st).zero_stage is not None]


def _or(items: Any) -> str:
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def _allowed_words(a: catalog.Axis, offered: tuple | None) -> list[Any]:
    """What a grid may list for a strategy offering ``offered``: closed values as they are; an
    open axis collapsed to one stored value reads as its words (bucket_mb ``default``)."""
    if offered is None:
        return ["integers", *a.extra]
    closed = [v for v in offered if a.values is not None and v in a.values]
    return closed or list(a.extra) or [a.default]


def axis_errors(spec: SweepSpec) -> list[str]:
    """What the catalog's axes refuse, one line each, naming the field and what is allowed:

    - an axis listed for strategies it does not apply to alone (``grid.reshard_after_forward``
      with no FSDP2 strategy);
    - a value no listed strategy offers (``offload: cpu`` with ddp alone; ``grad_sync:
      replicate_last`` without hsdp);
    - an axis listed where the axis it requires takes none of its values (``Axis.requires``:
      ``powersgd_rank`` without ``grad_compression`` powersgd);
    - a value a listed strategy refuses rather than skips (``Strategy.refuses``: FSDP2 has no
      bucket size, no overlap switch, no NVMe), and ``ranks_per_gpu: 2`` for a strategy that is
      not run on a shared GPU (``Strategy.shared_gpu``).
    """
    g = spec.grid
    listed = list(g.strategy)
    errors = []
    for a in catalog.grid_axes():
        values = getattr(g, a.name)
        if values is None:
            continue
        explicit = a.name in g.model_fields_set
        takers = [st for st in listed if catalog.offered(a.name, st) != ()]
        if not takers:
            if explicit:
                owners = [st for st in catalog.names() if catalog.offered(a.name, st) != ()]
                why = f" ({a.elsewhere})" if a.elsewhere else ""
                if a.values is not None:
                    why += f" (allowed values: {list(a.values)})"
                errors.append(
                    f"grid.{a.name}: applies to {_owners(owners)}{why}; grid.strategy is {listed} "
                    f"(add {_or(owners)}, or remove grid.{a.name})"
                )
            continue
        errors.extend(_value_errors(a, values, takers))
        errors.extend(_unmet(g, a) if explicit else [])
        errors.extend(_refusals(a, values, takers))
        errors.extend(_conflicts(g, a, values, takers))
        errors.extend(_warmup_errors(spec, a, values, takers))
    unshared = [st for st in listed if not catalog.strategy(st).shared_gpu]
    if spec.ranks_per_gpu == 2 and unshared:
        alike = [st for st in catalog.names() if not catalog.strategy(st).shared_gpu]
        errors.append(
            f"ranks_per_gpu: 2 is refused for {_who(unshared)} (grid.strategy lists {unshared}):"
            f" the one-GPU rehearsal is run with {' and '.join(_shared())} only; allowed with "
            f"{'/'.join(alike)}: 1"
        )
    return errors


def _who(strategies: list[str]) -> str:
    """``the FSDP2 strategies`` where they share a family, else their names."""
    families = {catalog.family_of(st) for st in strategies}
    if len(families) == 1:
        return f"the {catalog.FAMILIES[families.pop()]} strategies"
    return str(strategies)


def _owners(strategies: list[str]) -> str:
    """``ZeRO and FSDP2 only (zero1, zero2, zero3, fsdp, hsdp)`` where the strategies are whole
    families, else ``zero3 only``."""
    fams = list(dict.fromkeys(catalog.family_of(st) for st in strategies))
    whole = all(set(catalog.names(f)) <= set(strategies) for f in fams)
    if whole and len(strategies) > 1:
        return f"{' and '.join(catalog.FAMILIES[f] for f in fams)} only ({', '.join(strategies)})"
    return f"{', '.join(strategies)} only"


def _shared() -> list[str]:
    """Family names of the strategies run on a shared GPU (``DDP and ZeRO``)."""
    fams = dict.fromkeys(s.family for s in catalog.STRATEGIES.values() if s.shared_gpu)
    return [catalog.FAMILIES[f] for f in fams]


def _value_errors(a: catalog.Axis, values: list, takers: list[str]) -> list[str]:
    """Values of a closed axis that none of the listed strategies it applies to offers."""
    if a.values is None:
        return []
    errors = []
    for value in values:
        if any(value in (catalog.offered(a.name, st) or ()) for st in takers):
            continue
        if any(a.name in catalog.strategy(st).refuses for st in takers):
            continue  # said by _refusals, with the reason
        owners = [st for st in catalog.names() if value in (catalog.offered(a.name, st) or ())]
        allowed = {st: list(catalog.offered(a.name, st) or ()) for st in takers}
        errors.append(
            f"grid.{a.name}: {value!r} applies to {_owners(owners)}, and none of them is "
            f"listed (grid.strategy is {takers}); allowed values per strategy: {allowed}"
        )
    return errors


def _unmet(g: Any, a: catalog.Axis) -> list[str]:
    """An axis listed where the axis it requires (``Axis.requires``) takes none of the values
    it applies under (``powersgd_rank`` without ``grad_compression`` powersgd): every variant
    would store its placeholder, and the listed values would silently go unused."""
    if a.requires is None:
        return []
    other, needed = a.requires
    listed = getattr(g, other) or [catalog.default(other)]
    if any(v in needed for v in listed):
        return []
    return [
        f"grid.{a.name}: applies only where grid.{other} is {_or(needed)}; grid.{other} is "
        f"{listed} (add {_or(needed)} to grid.{other}, or remove grid.{a.name})"
    ]


def _conflicts(g: Any, a: catalog.Axis, values: list, takers: list[str]) -> list[str]:
    """A listed value of ``a`` that may not run beside a listed value of another axis
    (``Axis.conflicts``) for a strategy both apply to: the grid would make that variant."""
    errors = []
    for value, (other, bad, why) in a.conflicts.items():
        if value not in values:
            continue
        clash = [v for v in (getattr(g, other) or [catalog.default(other)]) if v in bad]
        both = [st for st in takers if catalog.offered(other, st) != ()]
        if clash and both:
            errors.append(
                f"grid.{a.name}: {value!r} is refused with grid.{other} {clash} ({why}); "
                f"allowed: one of them, in two sweeps"
            )
    return errors


def _warmup_errors(spec: SweepSpec, a: catalog.Axis, values: list, takers: list[str]) -> list[str]:
    """A listed value that needs more warmup steps than the file gives (``Axis.warmup``), for
    the grid's grad_accum and sync flavours."""
    errors = []
    for value, rule in a.warmup.items():
        if value not in values:
            continue
        need = catalog.resolve(rule)
        points = [
            (ga, sync) for st in takers for ga in spec.grid.grad_accum
            for sync in (spec.grid.grad_sync or [catalog.default("grad_sync", st)])
            if sync in (catalog.offered("grad_sync", st) or (sync,))
        ]  # fmt: skip
        worst = max((need(ga, sync) for ga, sync in points), key=lambda n: n[0])
        if spec.warmup_steps < worst[0]:
            errors.append(
                f"warmup_steps: {spec.warmup_steps} is too few for grid.{a.name} {value!r}: "
                f"{worst[1]}; allowed: warmup_steps >= {worst[0]}"
            )
    return errors


def _refusals(a: catalog.Axis, values: list, takers: list[str]) -> list[str]:
    """Values a listed strategy refuses (``Strategy.refuses``), one line per reason."""
    by_reason: dict[str, list[str]] = {}
    for st in takers:
        reason = catalog.strategy(st).refuses.get(a.name)
        offered = catalog.offered(a.name, st)
        allowed = _allowed_words(a, offered)
        if reason and any(v not in allowed for v in values):
            by_reason.setdefault(reason, []).append(st)
    errors = []
    for reason, sts in by_reason.items():
        allowed = _allowed_words(a, catalog.offered(a.name, sts[0]))
        alike = [st for st in catalog.names() if catalog.strategy(st).refuses.get(a.name) == reason]
        bad = [v for v in values if v not in allowed]
        errors.append(
            f"grid.{a.name}: {bad if len(bad) > 1 else repr(bad[0])} is refused for {_who(sts)} "
            f"(grid.strategy lists {sts}): {reason}; allowed with {'/'.join(alike)}: "
            f"{', '.join(map(str, allowed))}"
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


def _hybrid_errors(spec: SweepSpec) -> list[str]:
    """hsdp_shard_size set without a hybrid strategy (``Strategy.hybrid``: shards within groups,
    replicates across them), or a world size it does not divide; a hybrid strategy placed
    spread without it (the default shard group, the ranks of one node, is then one rank)."""
    hybrid = [st for st in spec.grid.strategy if catalog.strategy(st).hybrid]
    size = spec.hsdp_shard_size
    divisors = [d for d in range(1, spec.world_size + 1) if spec.world_size % d == 0]
    if size is None:
        spread = "spread" in spec.grid.placement and spec.ranks_per_node is None
        if hybrid and spread:
            return [
                f"hsdp_shard_size: required for strategy {_or(hybrid)} with grid.placement "
                "'spread': the "
                "default shard group, the ranks of one node, is one rank when every rank has a "
                "node of its own, so nothing would be sharded; allowed: hsdp_shard_size set "
                f"(with world_size {spec.world_size}: {divisors}), ranks_per_node set (2 or "
                "more ranks on each node), or grid.placement 'pack' alone"
            ]
        return []
    if not hybrid:
        owners = [s.name for s in catalog.STRATEGIES.values() if s.hybrid]
        return [
            f"hsdp_shard_size: applies to {_or(owners)} only; grid.strategy is "
            f"{spec.grid.strategy} (add {_or(owners)}, or remove hsdp_shard_size)"
        ]
    try:
        mesh_shape(hybrid[0], spec.world_size, size)
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


def stored_as_current(stored: dict[str, Any]) -> dict[str, Any]:
    """A spec as an older linksweep stored it (its JSON, ``sweeps.spec``) as this one writes it:
    a renamed grid key under its new name (``Axis.renamed_from``), an axis added since at its
    default. What ``--resume`` compares the file with, so a sweep started before an axis was
    added or renamed resumes. A grid this linksweep cannot read is returned as stored (the
    comparison then names what differs)."""
    out = dict(stored)
    try:
        grid, _ = _renamed(stored.get("grid") or {})
        out["grid"] = Grid.model_validate(grid).model_dump(mode="json")
    except (SpecError, ValidationError):
        pass
    return out


def parse_spec(data: Any, path: str | None = None) -> SweepSpec:
    """Validate an already-loaded YAML document."""
    if not isinstance(data, dict):
        raise SpecError(
            [f"the file must be a YAML mapping of keys, got {type(data).__name__}"], path
        )
    data = dict(data)
    data["grid"], notes = _renamed(data.get("grid", {}))
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        lines: list[str] = []
        for err in exc.errors():
            lines.extend(_format_error(err))
        raise SpecError(lines, path) from None
    spec._notes.extend(notes)
    return spec


def load_spec(path: str | os.PathLike, overrides: Sequence[str] = ()) -> SweepSpec:
    """Read and validate a sweep file, with ``overrides`` (``KEY=VALUE``, ``run --set``;
    ``orchestrator/sweep/overrides.py``) set first; raise :class:`SpecError` naming every
    problem."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise SpecError([f"cannot read the sweep file: {exc.strerror}"], str(path)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError([f"not valid YAML: {exc}"], str(path)) from None
    try:
        data = apply_overrides(data, overrides)
    except OverrideError as exc:
        raise SpecError(exc.problems, str(path)) from None
    # A relative dataset path is relative to the sweep file, like an include would be.
    if isinstance(data, dict) and isinstance(data.get("dataset"), str):
        ds = data["dataset"]
        if ds not in DATASETS_BY_NAME and not os.path.isabs(ds) and not os.path.exists(ds):
            candidate = p.parent / ds
            if candidate.exists():
                data["dataset"] = str(candidate)
    return parse_spec(data, str(path))


ALLOWED = {
    "strategy": list(catalog.names()),
    **{a.name: list(a.values) for a in catalog.grid_axes() if a.values is not None},
    "model": list(get_args(ModelName)),
    "precision": list(get_args(Precision)),
    "deepspeed_preset": list(get_args(Preset)),
    "ranks_per_gpu": [1, 2],
}
