"""The catalog: every strategy and every variant axis, declared once.

A strategy is one way of splitting the training work (DDP, a ZeRO stage, FSDP2, ...); an axis is
one thing a sweep varies (``grad_accum``, ``offload``, ``grad_sync``, ...): together, one value
of every axis is a *variant*, and the axes' names are the variant key (the columns a run, a
variant's figures and a comparison are matched on). Everything else derives from this module:
the sweep file's allowed values and refusals (``orchestrator/sweep/spec.py``), the planner's
``n/a`` rules, labels, titles and table columns, the variant key's SQL columns and the
migration that adds a new axis's column (``orchestrator/store/``), compare's key, the link
model's groups, and which class a rank builds (``workloads/rank.py``).

Where a name lives: this file and nowhere else in ``orchestrator/`` and ``workloads/`` (display
text, docs, tests, ``sweeps/`` and ``bench/`` aside). Code that must know a *kind* of strategy
asks for its family (``family_of``) or reads a field of its entry; code that needs what a
strategy sends resolves its ``theory``; a rank resolves its ``workload``. Both are dotted paths
(``module:attribute``), because the driver and the ranks each import only their own side:
workloads never import the driver.

Adding a strategy or an axis: ``docs/development.md`` ("Add a strategy", "Add an axis").
A plugin module named in ``LINKSWEEP_CATALOG_PLUGINS`` (comma-separated module names) is
imported at the end of this module and may call :func:`add_strategy` / :func:`add_axis`: so a
new entry reaches the driver, the ranks Ray starts (they inherit the environment) and the
store alike, before anything reads the catalog. The test that adds a strategy and an axis with
no other module touched does exactly that (``tests/integration/test_catalog_extension.py``).

Pure data and lookups; no torch, no I/O.

May import: nothing (the standard library only).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NA = "n/a"
"""A text axis's value where it does not apply (ZeRO's ``grad_sync``, DDP's reshard setting): a
value rather than NULL, so that the variant key matches with SQL ``=`` as every other key does.
An integer axis names its own placeholder (:attr:`Axis.na`)."""

PLUGINS_ENV = "LINKSWEEP_CATALOG_PLUGINS"
BASE_SCHEMA_VERSION = 16
"""The newest schema version written by a hand-written migration (``store/migrations.py``):
the store's version is this or the newest axis's ``since``, whichever is larger. A hand-written
step raises it; the axes' derived steps are keyed on their own ``since``."""


@dataclass(frozen=True)
class Strategy:
    """One parallelism strategy."""

    name: str
    """As the sweep file and the database spell it (``ddp``, ``zero3``)."""
    family: str
    """ddp | zero | fsdp2: what kind of engine runs it. Axes apply by family, and code that
    must treat a kind of strategy alike (DeepSpeed's config for every ZeRO stage) asks this."""
    display: str
    """Its name for people: ``DDP``, ``ZeRO-3``, ``FSDP2``."""
    title: str
    """A report section's title (a longer name where one helps)."""
    workload: str
    """``module:Class`` of the rank-side strategy (``workloads/``) a rank builds."""
    theory: str
    """``module:function`` (``orchestrator/analysis/theories.py``) giving the bytes a step is
    expected to send and what the non-final micro-batches promise."""
    values: Mapping[str, tuple] = field(default_factory=dict)
    """Per axis, the values this strategy offers where they differ from the axis's own (DDP's
    offload: none only; hsdp's grad_sync adds replicate_last)."""
    defaults: Mapping[str, Any] = field(default_factory=dict)
    """Per axis, the value this strategy runs when the grid names none, where it differs from
    the axis's default (DDP's grad_sync: last; FSDP2's: each)."""
    refuses: Mapping[str, str] = field(default_factory=dict)
    """Per axis, why a value this strategy does not offer is an error when the grid lists it
    (rather than a value it skips): FSDP2 has no bucket size, no overlap switch, no NVMe."""
    named: tuple[str, ...] = ()
    """Axes always named beside this strategy's name, default or not (FSDP2's flavour: each of
    its flavours sends different bytes); other axes are named where not their default."""
    zero_stage: int | None = None
    """ZeRO: DeepSpeed's ``zero_optimization.stage``."""
    shared_gpu: bool = True
    """May run as two ranks sharing one GPU (``ranks_per_gpu: 2``, the one-GPU rehearsal)."""
    hybrid: bool = False
    """Shards within groups of ``hsdp_shard_size`` ranks and replicates across them (a 2-D
    replicate x shard mesh); False: shards over (or replicates to) every rank."""
    doc: str = ""


@dataclass(frozen=True)
class Axis:
    """One variant axis: a grid key, a column of every table keyed by variant."""

    name: str
    """The grid key and the column."""
    sql_type: str
    """VARCHAR | INTEGER: the column's type."""
    values: tuple | None
    """Allowed values; None: open (integers, checked by ``minimum``)."""
    default: Any
    """The grid's default (one value)."""
    families: tuple[str, ...] | None = None
    """The strategy families it applies to; None: every strategy."""
    strategies: tuple[str, ...] | None = None
    """Narrower still: the strategies (by name) it applies to; None: every one of its
    families."""
    requires: tuple[str, tuple] | None = None
    """(axis, values): applies only where that other axis takes one of those values (a PowerSGD
    rank applies only where the compression is PowerSGD)."""
    na: Any = NA
    """Its value where it does not apply."""
    minimum: int | None = None
    """Open integer axes: the smallest value allowed."""
    extra: tuple = ()
    """Words an open axis allows besides integers (bucket_mb's ``default``)."""
    label: str = ""
    """The short name in labels and column heads (``sync`` -> ``sync=each``); default: name."""
    words: Mapping[Any, str] | str = "{name} {value}"
    """How a value reads in a sentence: a format (``{name}``, ``{value}``) or per-value words."""
    in_strategy_name: bool = False
    """Named beside the strategy (``ZeRO-3+cpu``, ``FSDP2 (reshard, sync each)``) rather than
    as a series' own word."""
    doc: str = ""
    since: int = 0
    """Schema version whose migration added the column: the next version when the axis is
    added. Axes since v13 get their column from statements the store derives from the entry
    (``store/migrations.py`` ``derived``; old rows read the default where the axis applies,
    else the placeholder); older ones were migrated by hand."""
    renamed_from: tuple[str, Mapping[Any, Any]] | None = None
    """(old grid key and column, old value -> new value): a sweep file still saying the old key
    is read with a message, and the derived migration fills the column from the old one."""
    grid: bool = True
    """A grid key (False: a key column the spec fills elsewhere, as ``link``)."""
    elsewhere: str = ""
    """Why the strategies it does not apply to have no such setting (said when a sweep lists
    the axis for them alone)."""
    conflicts: Mapping[Any, tuple[str, tuple, str]] = field(default_factory=dict)
    """value -> (other axis, its values, why): a variant may not combine them; a grid that
    lists both is refused before anything runs."""
    warmup: Mapping[Any, str] = field(default_factory=dict)
    """value -> ``module:function(grad_accum, grad_sync) -> (warmup steps, why)``: the fewest
    warmup steps a variant with that value needs (PowerSGD compresses only from its start
    iteration on, and the profiled and timed steps must already compress)."""

    @property
    def short(self) -> str:
        return self.label or self.name

    def phrase(self, value: Any) -> str:
        """``value`` in a sentence (``bucket 25 MB``, ``no reshard``)."""
        if isinstance(self.words, Mapping):
            return self.words.get(value, f"{self.short} {value}")
        return self.words.format(name=self.short, value=value)


# --------------------------------------------------------------------------------------------
# The entries. Order is display order: strategies as tables and figures list them, axes as the
# variant key orders its columns.

_DDP_WORKLOAD = "workloads.strategies:DDPStrategy"
_ZERO_WORKLOAD = "workloads.strategies:ZeroStrategy"
_FSDP_WORKLOAD = "workloads.fsdp:FsdpStrategy"
_FSDP_REFUSES = {
    "offload": "FSDP2 has no NVMe offload, only CPUOffloadPolicy",
    "bucket_mb": "FSDP2 has no bucket size (it reduces per fully_shard unit)",
    "overlap_comm": "FSDP2 has no overlap switch (it always overlaps)",
}

DDP, ZERO, FSDP2 = "ddp", "zero", "fsdp2"
"""The strategy families: what kind of engine runs a strategy. Code that must treat a kind alike
compares ``family_of(name)`` with these, never a strategy's name."""
FAMILIES = {DDP: "DDP", ZERO: "ZeRO", FSDP2: "FSDP2"}
"""Each family's name for people (``the FSDP2 strategies``)."""
STRATEGIES: dict[str, Strategy] = {}
AXES: dict[str, Axis] = {}


def add_strategy(entry: Strategy) -> Strategy:
    """Register a strategy (at the end of the display order). A name taken is an error."""
    if entry.name in STRATEGIES:
        raise ValueError(f"strategy {entry.name!r} is already in the catalog")
    STRATEGIES[entry.name] = entry
    return entry


def add_axis(entry: Axis, before: str = "link") -> Axis:
    """Register an axis, its column placed in the variant key before ``before`` (the link and
    placement end the key). A name taken is an error."""
    if entry.name in AXES:
        raise ValueError(f"axis {entry.name!r} is already in the catalog")
    items = list(AXES.items())
    at = next((i for i, (k, _) in enumerate(items) if k == before), len(items))
    items.insert(at, (entry.name, entry))
    AXES.clear()
    AXES.update(items)
    return entry


for _s in (
    Strategy(
        "ddp", DDP, "DDP", "DDP", _DDP_WORKLOAD, "orchestrator.analysis.theories:ddp",
        values={"offload": ("none",), "grad_sync": ("each", "last")},
        defaults={"grad_sync": "last"},
        doc="torch DistributedDataParallel",
    ),
    Strategy(
        "zero1", ZERO, "ZeRO-1", "ZeRO-1", _ZERO_WORKLOAD, "orchestrator.analysis.theories:zero",
        values={"offload": ("none", "cpu")}, zero_stage=1, doc="DeepSpeed ZeRO stage 1",
    ),
    Strategy(
        "zero2", ZERO, "ZeRO-2", "ZeRO-2", _ZERO_WORKLOAD, "orchestrator.analysis.theories:zero",
        values={"offload": ("none", "cpu")}, zero_stage=2, doc="DeepSpeed ZeRO stage 2",
    ),
    Strategy(
        "zero3", ZERO, "ZeRO-3", "ZeRO-3", _ZERO_WORKLOAD, "orchestrator.analysis.theories:zero",
        zero_stage=3, doc="DeepSpeed ZeRO stage 3 (the only stage DeepSpeed swaps to NVMe)",
    ),
    Strategy(
        "fsdp", FSDP2, "FSDP2", "FSDP2", _FSDP_WORKLOAD, "orchestrator.analysis.theories:fsdp",
        values={"offload": ("none", "cpu"), "grad_sync": ("each", "last"),
                "bucket_mb": (0,), "overlap_comm": ("default",)},
        defaults={"grad_sync": "each"}, refuses=_FSDP_REFUSES,
        named=("reshard_after_forward", "grad_sync"), shared_gpu=False,
        doc="PyTorch FSDP2: fully_shard on each transformer block and the root",
    ),
    Strategy(
        "hsdp", FSDP2, "HSDP", "HSDP (FSDP2, replicate x shard)", _FSDP_WORKLOAD,
        "orchestrator.analysis.theories:fsdp",
        values={"offload": ("none", "cpu"), "grad_sync": ("each", "last", "replicate_last"),
                "bucket_mb": (0,), "overlap_comm": ("default",)},
        defaults={"grad_sync": "each"}, refuses=_FSDP_REFUSES,
        named=("reshard_after_forward", "grad_sync"), shared_gpu=False, hybrid=True,
        doc="FSDP2 on a 2-D mesh, replicate x shard (the shard group: hsdp_shard_size ranks)",
    ),
):  # fmt: skip
    add_strategy(_s)

for _a in (
    Axis(
        "strategy", "VARCHAR", None, "ddp", in_strategy_name=True,
        doc="ddp = torch DDP; zero1/2/3 = DeepSpeed ZeRO stage 1/2/3; fsdp = PyTorch FSDP2 "
        "(fully_shard on each transformer block and the root); hsdp = FSDP2 on a 2-D mesh, "
        "replicate x shard (the shard group: hsdp_shard_size ranks)",
    ),
    Axis(
        "offload", "VARCHAR", ("none", "cpu", "nvme"), "none", in_strategy_name=True,
        words="offload {value}",
        doc="Where optimizer state lives (ZeRO and FSDP2; with zero3 + nvme, parameters too): "
        "none | cpu | nvme (nvme: zero3 only, DeepSpeed swaps to NVMe only with stage 3)",
    ),
    Axis("grad_accum", "INTEGER", None, 1, minimum=1, label="ga", words="grad_accum {value}",
         doc="Micro-steps per optimizer step (the sync-frequency axis)."),
    Axis(
        "bucket_mb", "INTEGER", None, "default", na=0, minimum=1,
        extra=("default",), label="bucket", words="bucket {value} MB",
        doc="DDP bucket_cap_mb and DeepSpeed reduce/allgather bucket size, in MiB (2**20 bytes, "
        "the unit of DDP's bucket_cap_mb): one value is one byte count in both frameworks; "
        "default: each framework's own (DDP 25 MiB, DeepSpeed 5e8 elements). FSDP2 has none "
        "(stored as 0).",
    ),
    Axis(
        "overlap_comm", "VARCHAR", ("default", "true", "false"), "default", label="overlap",
        words={"default": "overlap default", "true": "overlap on", "false": "overlap off"},
        doc="default: each framework's own (DDP overlaps; DeepSpeed overlaps for ZeRO-3 only); "
        "true / false: ZeRO's overlap_comm; DDP false all-reduces the gradients after backward.",
    ),
    Axis(
        "grad_compression", "VARCHAR", ("none", "bf16", "fp16", "powersgd"), "none",
        families=(DDP,), label="compress", in_strategy_name=True,
        words={"none": "uncompressed", "bf16": "bf16 gradients", "fp16": "fp16 gradients",
               "powersgd": "PowerSGD"},
        doc="DDP only: how DDP compresses its gradients on the link, each through torch's own "
        "DDP comm hook: none (allreduce_hook: the gradients' own dtype, fp32), bf16 / fp16 "
        "(bf16_compress_hook / fp16_compress_hook: half the bytes), powersgd (powerSGD_hook: "
        "each large enough matrix sent as two rank-r factors P and Q, error feedback and warm "
        "start on; powersgd_rank sets r). Compression is the third answer to a slow link, "
        "beside syncing less often (grad_accum) and sending shards (ZeRO, FSDP2).",
        since=13, renamed_from=("ddp_grad_dtype", {"fp32": "none", "bf16": "bf16"}),
        conflicts={"powersgd": ("overlap_comm", ("false",), "overlap_comm false is linksweep's "
                                "own all-reduce after backward, which carries no comm hook")},
        warmup={"powersgd": "workloads.compression:powersgd_min_warmup_steps"},
        elsewhere="ZeRO's and FSDP2's dtypes follow precision and their own configs",
    ),
    Axis(
        "powersgd_rank", "INTEGER", None, 1, families=(DDP,),
        requires=("grad_compression", ("powersgd",)), na=0, minimum=1, label="rank",
        words="rank {value}", in_strategy_name=True,
        doc="grad_compression powersgd only: the rank r of PowerSGD's low-rank approximation "
        "(torch's matrix_approximation_rank; default 1, torch's): an n x m gradient is sent as "
        "r x (n + m) numbers where that is at most half of n x m (min_compression_rate 2).",
        since=13,
    ),
    Axis(
        "grad_sync", "VARCHAR", ("each", "last", "replicate_last"), None,
        families=(DDP, FSDP2), label="sync", words="sync {value}", in_strategy_name=True,
        doc="Sync frequency in an accumulation window's non-final micro-batches: each (reduce "
        "every micro-batch), last (only on the last: DDP's no_sync, FSDP2's "
        "set_requires_gradient_sync), replicate_last (hsdp: reduce-scatter every micro-batch, "
        "all-reduce across replicas on the last). Default: each strategy's own (ddp last, fsdp "
        "and hsdp each). Not for ZeRO (DeepSpeed decides).",
        since=8, elsewhere="ZeRO's sync is DeepSpeed's own",
    ),
    Axis(
        "reshard_after_forward", "VARCHAR", ("true", "false"), "true", families=(FSDP2,),
        label="reshard", words={"true": "reshard", "false": "no reshard"},
        in_strategy_name=True,
        doc="FSDP2 strategies only: true frees a transformer block's parameters after forward "
        "and gathers them again in backward (as ZeRO-3); false keeps them until backward (as "
        "ZeRO-2). The root keeps FSDP2's default.",
        since=8,
    ),
    Axis(
        "compile", "VARCHAR", ("false", "true"), "false", label="compile",
        words={"false": "eager", "true": "compiled"},
        doc="torch.compile as people apply it per strategy (workloads/compiling.py): DDP the "
        "whole model after wrapping it (DDPOptimizer splits it at the buckets), FSDP2 each "
        "transformer block before fully_shard (as torchtitan), ZeRO DeepSpeed's "
        "engine.compile(). The backend: inductor, or LINKSWEEP_COMPILE_BACKEND (the suite: "
        "aot_eager). Compiling happens in an untimed step of its own (the compile phase).",
        since=14,
    ),
    Axis("link", "VARCHAR", None, None, grid=False, words="on {value}",
         doc="A named connectivity variant (the sweep file's links)."),
    Axis("placement", "VARCHAR", ("pack", "spread"), "pack",
         doc="pack: all ranks on one node; spread: ranks_per_node ranks per node."),
):  # fmt: skip
    add_axis(_a, before="")


# --------------------------------------------------------------------------------------------
# Lookups.


def strategy(name: str) -> Strategy:
    """The entry of ``name``; an unknown name is a ValueError naming the known ones (never a
    fallback to some other strategy). A name not found loads the plugins named in the
    environment again first: a rank forked from a server that imported the catalog before its
    run's environment was set still finds a plugin's strategy."""
    if name not in STRATEGIES:
        _load_plugins()
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(
            f"strategy {name!r} is not in the catalog; allowed values: {list(STRATEGIES)}"
        ) from None


def names(family: str | None = None) -> tuple[str, ...]:
    """Every strategy name in display order, or those of one family."""
    return tuple(s.name for s in STRATEGIES.values() if family in (None, s.family))


def family_of(name: Any) -> str | None:
    """The family of a strategy name; None for a name not in the catalog (a row from a newer
    linksweep, a NULL)."""
    entry = STRATEGIES.get(str(name))
    return entry.family if entry else None


def axis(name: str) -> Axis:
    try:
        return AXES[name]
    except KeyError:
        raise ValueError(f"axis {name!r} is not in the catalog; known: {list(AXES)}") from None


def variant_key() -> tuple[str, ...]:
    """The variant key: every axis's column, in order (strategy first, link and placement last)."""
    return tuple(AXES)


def grid_axes() -> tuple[Axis, ...]:
    """The axes a sweep file's grid lists (every one but the strategy itself and the link)."""
    return tuple(a for a in AXES.values() if a.grid and a.name != "strategy")


def knob_axes() -> tuple[Axis, ...]:
    """The axes that apply to some strategies and not others (their value may be ``na``)."""
    return tuple(
        a for a in AXES.values()
        if a.families is not None or a.strategies is not None or a.requires is not None
    )  # fmt: skip


def applies(axis_name: str, row: Mapping[str, Any]) -> bool:
    """Does the axis apply to this variant (a mapping with ``strategy`` and the axes it
    depends on)? An unknown strategy: only universal axes apply."""
    a = AXES[axis_name]
    if not _takes(a, STRATEGIES.get(str(row.get("strategy")))):
        return False
    if a.requires is not None:
        other, values = a.requires
        return row.get(other) in values
    return True


def _takes(a: Axis, s: Strategy | None) -> bool:
    """Does axis ``a`` apply to strategy ``s`` at all (its family, its name)? An unknown
    strategy (None) takes only the axes every strategy takes."""
    if s is None:
        return a.families is None and a.strategies is None
    if a.families is not None and s.family not in a.families:
        return False
    return a.strategies is None or s.name in a.strategies


def offered(axis_name: str, strategy_name: str) -> tuple | None:
    """The values ``strategy_name`` offers for the axis: its own list, else the axis's (None:
    open); () where the axis does not apply to its family."""
    a = AXES[axis_name]
    s = strategy(strategy_name)
    if not _takes(a, s):
        return ()
    return s.values.get(axis_name, a.values)


def default(axis_name: str, strategy_name: str | None = None) -> Any:
    """The value a strategy runs when the grid names none (the strategy's own default, else the
    axis's); the axis's placeholder where it does not apply."""
    a = AXES[axis_name]
    if strategy_name is None:
        return a.default
    s = STRATEGIES.get(strategy_name)
    if s is None:
        return a.default
    if not _takes(a, s):
        return a.na
    only = s.values.get(axis_name, ())
    if len(only) == 1:  # one value offered: it is the default (DDP's offload, FSDP2's bucket)
        return only[0]
    return s.defaults.get(axis_name, a.default)


def filled(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` with every axis it lacks (or holds as NULL) given the value a run of its
    strategy had before that axis existed: read from its former key where it was renamed
    (``Axis.renamed_from``), else its default where it applies, else the placeholder.
    How a row from an older database or an export reads (the derived migration does the same
    in SQL). A stored boolean reads as ``true``/``false`` text."""
    out = dict(row)
    for name, a in AXES.items():
        value = out.get(name)
        if value is None and a.renamed_from is not None and a.renamed_from[0] in out:
            old, mapping = a.renamed_from  # a row from before the rename, as the migration reads
            value = out[name] = mapping.get(out[old], out[old])
        if isinstance(value, bool) and a.sql_type == "VARCHAR":
            out[name] = str(value).lower()
        elif value is None and a.grid and name != "strategy":
            out[name] = default(name, out.get("strategy")) if applies(name, out) else a.na
    return out


def resolve(dotted: str) -> Any:
    """``module:attribute`` imported (a workload class, a theory function)."""
    module, _, attr = dotted.partition(":")
    return getattr(importlib.import_module(module), attr)


def schema_version() -> int:
    """The store's schema version: the base, or the newest axis's ``since``."""
    return max(BASE_SCHEMA_VERSION, *(a.since for a in AXES.values()))


def _load_plugins() -> None:
    """Import each plugin module named in ``LINKSWEEP_CATALOG_PLUGINS`` (once: Python keeps a
    module imported)."""
    for module in filter(None, (m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(","))):
        importlib.import_module(module)


_load_plugins()
