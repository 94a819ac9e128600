"""Build the DeepSpeed config dict for one variant: a pure function, no DeepSpeed import.

Every key below was checked against the DeepSpeed 0.19.8 source (``deepspeed/runtime/config.py``,
``deepspeed/runtime/constants.py``, ``deepspeed/runtime/zero/config.py``,
``deepspeed/runtime/zero/offload_config.py``, ``deepspeed/runtime/swap_tensor/constants.py``), and
the configs were run for real with a client ``torch.optim.AdamW`` on a tiny gpt2 on CPU with gloo:
zero1/zero2/zero3 x offload none/cpu x fp32/bf16 at world size 1, the fp32 ones (and bf16 none)
at world size 2 with the comms logger, and zero3 + nvme at world sizes 1 and 2. Where we set a
key to its DeepSpeed default anyway, it is because the comm-volume model
(``orchestrator/comm_model.py``) depends on that value and a future default change must not move
the measurement silently.

Cost to know about: the first ``deepspeed.initialize`` on a fresh CPU machine JIT-builds the
``deepspeed_shm_comm`` op (~35 s on 2 cores), and the first NVMe run builds ``async_io`` and
``pin_memory`` (~6.5 min on 2 cores; needs ``libaio-dev`` and ``ninja``). Both are cached in
``~/.cache/torch_extensions`` afterwards (initialize then takes ~1 s, ~5 s with NVMe), so warm
the cache on every node before timing anything.

Units: DeepSpeed's ZeRO bucket sizes (``reduce_bucket_size``, ``allgather_bucket_size``,
``stage3_prefetch_bucket_size``) count ELEMENTS, not bytes (``zero/config.py``: they size
``torch.empty(int(self.reduce_bucket_size), dtype=...)`` buffers and are compared with
``param.numel()``). Our ``bucket_mb`` is megabytes (1e6 bytes) of the gradient dtype, so
``elements = bucket_mb * 1e6 / bytes_per_element`` (4 for fp32, 2 for bf16): a 25 MB bucket is
6.25 M fp32 elements or 12.5 M bf16 elements, the same bytes on the link either way.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AIO_DEFAULTS",
    "BYTES_PER_ELEMENT",
    "OFFLOADS",
    "PRECISIONS",
    "STRATEGIES",
    "bucket_elements",
    "deepspeed_config",
]

STRATEGIES: dict[str, int] = {"zero1": 1, "zero2": 2, "zero3": 3}
"""ZeRO strategy name -> ``zero_optimization.stage``."""

PRECISIONS: dict[str, int] = {"fp32": 4, "bf16": 2}
"""Training precision -> bytes per element of the parameters and gradients."""

BYTES_PER_ELEMENT = PRECISIONS

OFFLOADS = ("none", "cpu", "nvme")
"""Where optimizer state (and, for zero3 + nvme, parameters) lives."""

AIO_DEFAULTS: dict[str, Any] = {
    # DeepSpeed's own defaults (swap_tensor/constants.py AIO_*_DEFAULT), written out so a run's
    # stored config shows what the NVMe swapper used.
    "block_size": 1048576,
    "queue_depth": 8,
    "intra_op_parallelism": 1,
    "single_submit": False,
    "overlap_events": True,
    "use_gds": False,
}

STEPS_PER_PRINT = 10**9
"""DeepSpeed prints a progress line every ``steps_per_print`` steps from rank 0; a print inside
the timed window is I/O we do not want to time, so push it out of reach."""


def bucket_elements(bucket_mb: int, precision: str) -> int:
    """Number of elements of the ``precision`` dtype that fill ``bucket_mb`` megabytes (1e6 B)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is not one of {sorted(PRECISIONS)}")
    if bucket_mb <= 0:
        raise ValueError(f"bucket_mb must be > 0, got {bucket_mb!r}")
    return int(bucket_mb * 1_000_000 // PRECISIONS[precision])


def deepspeed_config(
    strategy: str,
    grad_accum: int,
    micro_batch_size: int,
    world_size: int,
    precision: str,
    offload: str,
    bucket_mb: int,
    nvme_path: str | None,
    comms_logger: bool = False,
) -> dict[str, Any]:
    """DeepSpeed config dict for a ZeRO variant.

    strategy: ``zero1`` | ``zero2`` | ``zero3`` (DDP does not go through DeepSpeed).
    grad_accum: micro-steps per optimizer step (``gradient_accumulation_steps``).
    micro_batch_size: sequences per rank per micro-step (``train_micro_batch_size_per_gpu``).
    world_size: data-parallel ranks; ``train_batch_size = micro_batch_size * grad_accum *
        world_size`` (DeepSpeed asserts this identity at initialize).
    precision: ``fp32`` (no ``bf16``/``fp16`` block) | ``bf16`` (``{"bf16": {"enabled": True}}``).
    offload: ``none`` | ``cpu`` (optimizer state on host) | ``nvme`` (zero3 only: optimizer
        state and parameters swapped to ``nvme_path``).
    bucket_mb: reduce / all-gather / prefetch bucket size in megabytes of the gradient dtype.
    nvme_path: directory for NVMe swap files; required when ``offload == "nvme"``.
    comms_logger: add DeepSpeed's comms logger (profiled pass only: it synchronises around every
        collective, so it must never be on in timed steps).
    """
    if strategy not in STRATEGIES:
        raise ValueError(
            f"strategy={strategy!r} is not a DeepSpeed ZeRO strategy; allowed: {sorted(STRATEGIES)}"
        )
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is not one of {sorted(PRECISIONS)}")
    if offload not in OFFLOADS:
        raise ValueError(f"offload={offload!r} is not one of {list(OFFLOADS)}")
    for name, value in (
        ("grad_accum", grad_accum),
        ("micro_batch_size", micro_batch_size),
        ("world_size", world_size),
    ):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    stage = STRATEGIES[strategy]
    if offload == "nvme":
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
    elements = bucket_elements(bucket_mb, precision)

    zero: dict[str, Any] = {
        "stage": stage,
        # Buckets in elements (see module docstring).
        "reduce_bucket_size": elements,
        "allgather_bucket_size": elements,
        # Serialise communication with compute: with overlap the collectives run on a side
        # stream (on GPU) and the comm logger's per-op times and our accounting of which
        # collective runs when both get murkier. DeepSpeed defaults overlap_comm to True for
        # stage 3 only (zero/config.py overlap_comm_valid); we pin False everywhere so every
        # strategy follows the same, comparable schedule. Costs some speed on GPU.
        "overlap_comm": False,
        # DeepSpeed defaults, pinned because comm_model.py assumes them: gradients are copied
        # into a contiguous bucket and reduced bucket by bucket; stage 1/2 with reduce_scatter
        # take the average_tensor() path (which, with use_multi_rank_bucket_allreduce=True,
        # all_reduces each bucket); parameters are re-gathered with all_gather after the step.
        "contiguous_gradients": True,
        "reduce_scatter": True,
        "allgather_partitions": True,
    }
    if stage == 3:
        zero.update(
            {
                "stage3_prefetch_bucket_size": elements,
                # Default 1e5 elements: any parameter smaller than that is kept whole on every
                # rank ("persistent") and never gathered. For the tiny test models that is
                # every parameter, and even for gpt2 it exempts all biases and LayerNorms.
                # 0 makes ZeRO-3 partition and gather every parameter, as the study assumes.
                "stage3_param_persistence_threshold": 0,
                # Default 1e9 elements: a parameter that the trace says will be used again within
                # that many elements is not released after forward, so for any model under 1e9
                # parameters ZeRO-3 would skip the backward re-gather (2 Psi per micro-step, not
                # the textbook 3 Psi, and the result would depend on model size). 0 releases
                # each module's parameters after use, so backward gathers them again.
                "stage3_max_reuse_distance": 0,
            }
        )

    if offload == "cpu":
        # Optimizer state and step on the host; parameters stay on the device for all stages.
        zero["offload_optimizer"] = {"device": "cpu"}
    elif offload == "nvme":
        zero["offload_optimizer"] = {"device": "nvme", "nvme_path": nvme_path}
        zero["offload_param"] = {"device": "nvme", "nvme_path": nvme_path}

    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": grad_accum,
        "train_batch_size": micro_batch_size * grad_accum * world_size,
        "zero_optimization": zero,
        # We hand deepspeed.initialize our own torch.optim.AdamW. Both keys exist in 0.19.8
        # (runtime/constants.py ZERO_ALLOW_UNTESTED_OPTIMIZER, ZERO_FORCE_DS_CPU_OPTIMIZER;
        # read in runtime/config.py): without the first, engine.py asserts "You are using an
        # untested ZeRO Optimizer"; without the second, ZeRO-Offload with a client optimizer
        # raises and asks for DeepSpeedCPUAdam, a C++ op that has to be compiled.
        "zero_allow_untested_optimizer": True,
        "steps_per_print": STEPS_PER_PRINT,
        "wall_clock_breakdown": False,
    }
    if offload != "none":
        config["zero_force_ds_cpu_optimizer"] = False
    if offload == "nvme":
        config["aio"] = dict(AIO_DEFAULTS)
    if precision == "bf16":
        config["bf16"] = {"enabled": True}
    if comms_logger:
        config["comms_logger"] = {
            "enabled": True,
            "prof_all": True,
            "verbose": False,
            "debug": False,
        }
    return config
