"""Build the DeepSpeed config dict for one variant: a pure function, no DeepSpeed import.

What a ZeRO run's config contains, in layers (later layers win):

1. DeepSpeed's own defaults: everything we do not write. DeepSpeed 0.19.8 fills them in when it
   parses the config (``deepspeed/runtime/config.py`` ``DeepSpeedConfig``,
   ``deepspeed/runtime/zero/config.py`` ``DeepSpeedZeroConfig``): overlap_comm True for stage 3
   and False for 1/2 (validator ``overlap_comm_valid``), reduce/allgather buckets 5e8 elements,
   stage3 prefetch bucket 5e7, param persistence threshold 1e5 elements, max reuse distance 1e9.
   The config DeepSpeed actually parsed is returned by rank 0 and stored (``runs.ds_config``).
2. A named preset (``deepspeed_preset``), if the sweep asks for one: ``serialized`` pins the
   study's former choices (:data:`PRESETS`).
3. The sweep file's ``deepspeed:`` block, deep-merged.
4. What the variant sets, and nothing else: stage, gradient_accumulation_steps, micro-batch (and
   the train_batch_size identity), precision (``bf16``), offload; ``overlap_comm`` when the grid's
   ``overlap_comm`` axis says true/false (``default`` writes nothing); the reduce/allgather buckets
   when the grid gives ``bucket_mb`` (``default`` writes nothing).
5. Harness keys (:data:`HARNESS_KEYS`), needed because linksweep hands DeepSpeed its own client
   optimizer and times steps; none of them changes what or when DeepSpeed communicates.

A key of layer 4 or 5 in the ``deepspeed:`` block is refused (:func:`block_conflicts`), so the
variant's label never lies. Unknown or invalid keys are refused by DeepSpeed's own config models
on the driver (``orchestrator/sweep/ds_check.py``), before anything runs.

Cost to know about: the first ``deepspeed.initialize`` on a fresh CPU machine JIT-builds the
``deepspeed_shm_comm`` op (~35 s on 2 cores), and the first NVMe run builds ``async_io`` and
``pin_memory`` (~6.5 min on 2 cores; needs ``libaio-dev`` and ``ninja``). Both are cached in
``~/.cache/torch_extensions`` afterwards, so warm the cache on every node before timing anything.

Units: DeepSpeed's ZeRO bucket sizes (``reduce_bucket_size``, ``allgather_bucket_size``,
``stage3_prefetch_bucket_size``) count ELEMENTS, not bytes (``zero/config.py``: they size
``torch.empty(int(self.reduce_bucket_size), dtype=...)`` buffers and are compared with
``param.numel()``). Our ``bucket_mb`` is MiB (2**20 bytes), the unit of DDP's ``bucket_cap_mb``
(torch 2.13 ``nn/parallel/distributed.py``: ``_MB_TO_BYTES = 1024 * 1024``), so one grid value
is one byte count in both frameworks: ``elements = bucket_mb * 2**20 / bytes_per_element`` (4 for
fp32, 2 for bf16, the dtype ZeRO's gradient buckets are allocated in): a 25 MiB bucket is
6,553,600 fp32 elements or 13,107,200 bf16 elements, 26,214,400 bytes either way, as DDP's.

May import: workloads.catalog.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from workloads import catalog

__all__ = [
    "BYTES_PER_ELEMENT",
    "DDP_DEFAULT_BUCKET_MB",
    "DS_DEFAULT_BUCKET_ELEMENTS",
    "HARNESS_KEYS",
    "MIB",
    "OFFLOADS",
    "OVERLAP_CHOICES",
    "PRECISIONS",
    "PRESETS",
    "STRATEGIES",
    "VARIANT_KEYS",
    "block_conflicts",
    "bucket_elements",
    "deep_merge",
    "deepspeed_config",
    "default_bucket_mb",
]

STRATEGIES: dict[str, int] = {
    s.name: s.zero_stage for s in catalog.STRATEGIES.values() if s.zero_stage is not None
}
"""ZeRO strategy name -> ``zero_optimization.stage`` (the catalog's ``zero_stage``)."""

PRECISIONS: dict[str, int] = {"fp32": 4, "bf16": 2}
"""Training precision -> bytes per element of the parameters and gradients."""

BYTES_PER_ELEMENT = PRECISIONS

OFFLOADS = ("none", "cpu", "nvme")
"""Where optimizer state (and, for zero3 + nvme, parameters) lives."""

OVERLAP_CHOICES = ("default", "true", "false")
"""The ``overlap_comm`` grid axis. ZeRO: ``default`` leaves DeepSpeed's rule (True for stage 3,
False for 1/2); true/false set ``zero_optimization.overlap_comm``. DDP: default/true is DDP's
overlapped bucketed all-reduce, false all-reduces the gradients after backward."""

DDP_DEFAULT_BUCKET_MB = 25
"""torch DDP's ``bucket_cap_mb`` default, in MiB (torch/nn/parallel/distributed.py)."""

MIB = 1024 * 1024
"""Bytes in the unit of ``bucket_mb``: DDP's ``bucket_cap_mb`` is MiB (``_MB_TO_BYTES``)."""

DS_DEFAULT_BUCKET_ELEMENTS = 500_000_000
"""DeepSpeed 0.19.8's default reduce_bucket_size and allgather_bucket_size (5e8 elements,
``zero/config.py``). ``orchestrator/sweep/ds_check.py``'s tests check it against DeepSpeed's model."""

STEPS_PER_PRINT = 10**9
"""DeepSpeed prints a progress line every ``steps_per_print`` steps from rank 0; a print inside
the timed window is I/O we do not want to time, so push it out of reach."""

PRESETS: dict[str, dict[str, Any]] = {
    # The study's former pinned choices: communication serialised with compute and every
    # parameter gathered, so the comms logger's per-op times and the textbook byte counts
    # (comm_model.py: ZeRO-3 gathers every parameter in forward and again in backward) hold.
    # For studying the communication schedule itself, not for "what users get". Buckets come
    # from bucket_mb (DDP's 25 MiB unless the grid says otherwise); see deepspeed_config.
    "serialized": {
        "zero_optimization": {
            "overlap_comm": False,
            "contiguous_gradients": True,
            "reduce_scatter": True,
            "allgather_partitions": True,
            "stage3_param_persistence_threshold": 0,
            "stage3_max_reuse_distance": 0,
        }
    },
}

VARIANT_KEYS: dict[str, str] = {
    # dotted DeepSpeed key -> the sweep-file setting that controls it
    "zero_optimization.stage": "grid.strategy",
    "gradient_accumulation_steps": "grid.grad_accum",
    "train_micro_batch_size_per_gpu": "micro_batch_size",
    "train_batch_size": "micro_batch_size x grad_accum x world_size",
    "bf16": "precision",
    "bfloat16": "precision",
    "fp16": "precision",
    "zero_optimization.offload_optimizer": "grid.offload",
    "zero_optimization.offload_param": "grid.offload",
    "zero_optimization.cpu_offload": "grid.offload",
    "zero_optimization.cpu_offload_param": "grid.offload",
}
"""Keys a variant sets: a ``deepspeed:`` block may not set them (exit 2 naming both)."""

AXIS_KEYS: dict[str, str] = {
    "zero_optimization.overlap_comm": "grid.overlap_comm",
    "zero_optimization.reduce_bucket_size": "grid.bucket_mb",
    "zero_optimization.allgather_bucket_size": "grid.bucket_mb",
}
"""Keys a grid axis sets when the axis has values other than ``default``; with the axis at
``default`` the ``deepspeed:`` block may set them (they are then the run's default)."""

HARNESS_KEYS: dict[str, str] = {
    # We hand deepspeed.initialize our own optimizer, as Hugging Face Trainer does with a config
    # that names none (workloads/optimizer.py): fused torch.optim.AdamW, or DeepSpeedCPUAdam
    # where the optimizer is offloaded. Trainer sets zero_allow_untested_optimizer itself
    # (integrations/deepspeed.py); without it engine.py asserts "You are using an untested ZeRO
    # Optimizer". zero_force_ds_cpu_optimizer stays DeepSpeed's (true): a deepspeed: block may
    # set it false, and then an offloaded run steps the fused torch AdamW, as accelerate does.
    "zero_allow_untested_optimizer": "linksweep passes its own optimizer, as Trainer does",
    "steps_per_print": "linksweep keeps DeepSpeed's progress prints out of the timed steps",
    "optimizer": "linksweep passes Trainer's optimizer (a config optimizer would replace it)",
    "scheduler": "linksweep trains at a constant learning rate",
    "comms_logger": "linksweep turns DeepSpeed's comms logger on for the profiled pass only",
}
"""Keys linksweep sets for its own measurement; a ``deepspeed:`` block may not set them."""


def bucket_elements(bucket_mb: int, precision: str) -> int:
    """Number of elements of the ``precision`` dtype that fill ``bucket_mb`` MiB (2**20 B), the
    bytes DDP's ``bucket_cap_mb`` of the same value holds."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is not one of {sorted(PRECISIONS)}")
    if bucket_mb <= 0:
        raise ValueError(f"bucket_mb must be > 0, got {bucket_mb!r}")
    return int(bucket_mb * MIB // PRECISIONS[precision])


def _get(block: dict | None, dotted: str) -> Any:
    node: Any = block or {}
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _has(block: dict | None, dotted: str) -> bool:
    head, _, last = dotted.rpartition(".")
    parent = _get(block, head) if head else (block or {})
    return isinstance(parent, dict) and last in parent


def default_bucket_mb(
    strategy: str, precision: str, block: dict | None = None, preset: str | None = None
) -> int:
    """``bucket_mb`` a variant gets when the grid says ``default``: DDP's own default (25 MiB);
    for ZeRO the reduce bucket the run will use (the ``deepspeed:`` block's, else DeepSpeed's
    5e8 elements), in MiB of the gradient dtype, rounded; the ``serialized`` preset uses DDP's
    25 MiB."""
    if strategy not in STRATEGIES or preset == "serialized":
        return DDP_DEFAULT_BUCKET_MB
    elements = _get(block, "zero_optimization.reduce_bucket_size")
    if isinstance(elements, bool) or not isinstance(elements, (int, float)) or elements <= 0:
        elements = DS_DEFAULT_BUCKET_ELEMENTS  # absent, or invalid (ds_check refuses it)
    return max(1, round(int(elements) * PRECISIONS[precision] / MIB))


def deep_merge(base: dict, over: dict) -> dict:
    """``over`` merged into a copy of ``base``: nested dicts merge, anything else replaces."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def block_conflicts(block: dict | None, overlap_axis: bool, bucket_axis: bool) -> list[str]:
    """One line per key of a ``deepspeed:`` block that the variant or linksweep controls.

    overlap_axis / bucket_axis: the grid gives ``overlap_comm`` / ``bucket_mb`` values other than
    ``default`` (the axis then sets the key, so the block may not).
    """
    errors = []
    axes = {"grid.overlap_comm": overlap_axis, "grid.bucket_mb": bucket_axis}
    for key, owner in VARIANT_KEYS.items():
        if _has(block, key):
            errors.append(
                f"deepspeed.{key}: set by the variant ({owner}); remove it from the deepspeed: "
                f"block and use {owner}"
            )
    for key, owner in AXIS_KEYS.items():
        if _has(block, key) and axes[owner]:
            errors.append(
                f"deepspeed.{key}: also set by {owner} (a value other than 'default'); set it "
                "in one place only"
            )
    for key, why in HARNESS_KEYS.items():
        if _has(block, key):
            errors.append(f"deepspeed.{key}: controlled by linksweep ({why})")
    return errors


@dataclass(frozen=True)
class ZeroVariant:
    """What of one ZeRO run decides its DeepSpeed config; each field as :func:`deepspeed_config`
    describes it."""

    strategy: str
    grad_accum: int
    micro_batch_size: int
    world_size: int
    precision: str
    offload: str = "none"
    bucket_mb: int | None = None
    nvme_path: str | None = None
    overlap_comm: str = "default"


def deepspeed_config(
    zero: ZeroVariant,
    user: dict | None = None,
    preset: str | None = None,
    comms_logger: bool = False,
) -> dict[str, Any]:
    """DeepSpeed config dict for a ZeRO variant (see the module docstring for the layers).

    ``zero`` (:class:`ZeroVariant`):
    strategy: ``zero1`` | ``zero2`` | ``zero3`` (DDP does not go through DeepSpeed).
    grad_accum: micro-steps per optimizer step (``gradient_accumulation_steps``).
    micro_batch_size: sequences per rank per micro-step (``train_micro_batch_size_per_gpu``).
    world_size: data-parallel ranks; ``train_batch_size = micro_batch_size * grad_accum *
        world_size`` (DeepSpeed asserts this identity at initialize).
    precision: ``fp32`` (no ``bf16``/``fp16`` block) | ``bf16`` (``{"bf16": {"enabled": True}}``).
    offload: ``none`` | ``cpu`` (optimizer state on host) | ``nvme`` (zero3 only: optimizer
        state and parameters swapped to ``nvme_path``).
    bucket_mb: reduce / all-gather bucket size in MiB (as DDP's ``bucket_cap_mb``); None leaves
        DeepSpeed's default (or the ``deepspeed:`` block's value).
    nvme_path: directory for NVMe swap files; required when ``offload == "nvme"``.
    overlap_comm: ``default`` (DeepSpeed's rule for the stage) | ``true`` | ``false``.
    user: the sweep file's ``deepspeed:`` block (already checked by :func:`block_conflicts`).
    preset: None or a name of :data:`PRESETS`.
    comms_logger: add DeepSpeed's comms logger (profiled pass only: it synchronises around every
        collective, so it must never be on in timed steps).
    """
    strategy, grad_accum, micro_batch_size = zero.strategy, zero.grad_accum, zero.micro_batch_size
    world_size, precision, offload = zero.world_size, zero.precision, zero.offload
    bucket_mb, nvme_path, overlap_comm = zero.bucket_mb, zero.nvme_path, zero.overlap_comm
    _check_choices(strategy, precision, offload, overlap_comm, preset)
    for name, value in (
        ("grad_accum", grad_accum),
        ("micro_batch_size", micro_batch_size),
        ("world_size", world_size),
    ):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    stage = STRATEGIES[strategy]
    if offload == "nvme":
        _check_nvme(strategy, stage, nvme_path)
    config: dict[str, Any] = {}
    if preset is not None:
        config = _preset_layer(preset, stage, bucket_mb, precision)
    if user:
        config = deep_merge(config, user)
    variant: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": grad_accum,
        "train_batch_size": micro_batch_size * grad_accum * world_size,
        "zero_optimization": _zero_block(
            stage, overlap_comm, bucket_mb, precision, offload, nvme_path
        ),
        # harness keys (HARNESS_KEYS)
        "zero_allow_untested_optimizer": True,
        "steps_per_print": STEPS_PER_PRINT,
    }
    if precision == "bf16":
        variant["bf16"] = {"enabled": True}
    if comms_logger:
        variant["comms_logger"] = {"enabled": True, "prof_all": True, "verbose": False}
    return deep_merge(config, variant)


def _check_choices(
    strategy: str, precision: str, offload: str, overlap_comm: str, preset: str | None
) -> None:
    """ValueError naming the first argument outside its closed set, and the allowed values."""
    if strategy not in STRATEGIES:
        raise ValueError(
            f"strategy={strategy!r} is not a DeepSpeed ZeRO strategy; allowed: {sorted(STRATEGIES)}"
        )
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is not one of {sorted(PRECISIONS)}")
    if offload not in OFFLOADS:
        raise ValueError(f"offload={offload!r} is not one of {list(OFFLOADS)}")
    if overlap_comm not in OVERLAP_CHOICES:
        raise ValueError(f"overlap_comm={overlap_comm!r} is not one of {list(OVERLAP_CHOICES)}")
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"deepspeed_preset={preset!r} is not one of {sorted(PRESETS)}")


def _check_nvme(strategy: str, stage: int, nvme_path: str | None) -> None:
    """NVMe offload needs ZeRO-3 and a folder."""
    if stage != 3:
        # DeepSpeed's stage 1/2 optimizer (zero/stage_1_and_2.py) has no NVMe swapper: it
        # sets cpu_offload=True for any offload device != none, so "nvme" would silently
        # run as CPU offload and the variant's label would lie.
        raise ValueError(
            f"strategy={strategy!r} with offload='nvme' is not supported by DeepSpeed "
            "(ZeRO-1/2 treat nvme as cpu offload); use zero3 for nvme, or offload='cpu'"
        )
    if not nvme_path:
        raise ValueError(f"offload='nvme' needs nvme_path (strategy={strategy!r})")


def _preset_layer(preset: str, stage: int, bucket_mb: int | None, precision: str) -> dict:
    """The preset, with every bucket (stage 3's prefetch bucket too) at ``bucket_mb`` MiB, DDP's
    25 MiB when the grid says ``default``."""
    config = deep_merge({}, PRESETS[preset])
    elements = bucket_elements(bucket_mb or DDP_DEFAULT_BUCKET_MB, precision)
    buckets = {"reduce_bucket_size": elements, "allgather_bucket_size": elements}
    if stage == 3:
        buckets["stage3_prefetch_bucket_size"] = elements
    return deep_merge(config, {"zero_optimization": buckets})


def _zero_block(
    stage: int,
    overlap_comm: str,
    bucket_mb: int | None,
    precision: str,
    offload: str,
    nvme_path: str | None,
) -> dict[str, Any]:
    """The variant's ``zero_optimization`` keys: the stage, and overlap, buckets and offload
    where the variant sets them."""
    zero: dict[str, Any] = {"stage": stage}
    if overlap_comm != "default":
        zero["overlap_comm"] = overlap_comm == "true"
    if bucket_mb is not None:
        elements = bucket_elements(bucket_mb, precision)
        zero.update({"reduce_bucket_size": elements, "allgather_bucket_size": elements})
    if offload == "cpu":
        # Optimizer state and step on the host; parameters stay on the device for all stages.
        zero["offload_optimizer"] = {"device": "cpu"}
    elif offload == "nvme":
        zero["offload_optimizer"] = {"device": "nvme", "nvme_path": nvme_path}
        zero["offload_param"] = {"device": "nvme", "nvme_path": nvme_path}
    return zero
