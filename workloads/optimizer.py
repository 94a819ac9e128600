"""The optimizer a run steps, as Hugging Face Trainer builds it, and its name for the record.

Trainer (transformers 5.25 ``training_args.py``) defaults to ``optim="adamw_torch_fused"``
whenever torch >= 2.8, on every device, CPU included: ``torch.optim.AdamW(params, lr,
betas=(0.9, 0.999), eps=1e-8, fused=True)`` with ``weight_decay`` 0.0 (its default; the no-decay
group of biases and norms then decays alike, so one group does what its two do). torch 2.13's
fused AdamW runs on CPU and on FSDP2's DTensor parameters (checked: gloo, 2 ranks, gpt2-tiny,
the state is DTensor). Where torch refuses ``fused`` for the parameters it holds (a dtype or
device the fused kernel lacks), the run takes torch's default implementation instead, and the
record says which ran (:func:`implementation`): Trainer would fail there, a sweep records it.

ZeRO, as Trainer with a DeepSpeed config gets it (``integrations/deepspeed.py``
``deepspeed_optim_sched``): a config without ``optimizer`` (linksweep's) makes Trainer build its
own optimizer, the fused AdamW above, and hand it to accelerate, which gives it to
``deepspeed.initialize`` as is, unless the optimizer is offloaded (``offload_optimizer.device``
cpu or nvme) and ``zero_force_ds_cpu_optimizer`` is left at its default (true): then accelerate
swaps it for ``deepspeed.ops.adam.DeepSpeedCPUAdam`` with the same ``lr`` and ``weight_decay``
(``accelerator.py`` ``_prepare_deepspeed``; DeepSpeed 0.19.8 would otherwise refuse a client
optimizer with offload, ``engine.py`` ``_configure_optimizer``). DeepSpeedCPUAdam is a C++ op
DeepSpeed builds with ninja the first time a process on the machine constructs it, and loads
from torch's extension cache after that (``docs/deepspeed.md``: what it costs, when it is paid).

May import: torch, deepspeed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

FUSED_ADAMW = "torch.optim.AdamW(fused=True)"
DS_CPU_ADAM = "deepspeed.ops.adam.DeepSpeedCPUAdam"
WEIGHT_DECAY = 0.0
"""Trainer's default ``weight_decay``."""


def trainer_adamw(params: Iterable[Any], lr: float) -> Any:
    """``torch.optim.AdamW`` as Trainer's ``adamw_torch_fused``; torch's default implementation
    where torch refuses ``fused`` for these parameters (:func:`implementation` says which)."""
    import torch

    params = list(params)
    try:
        return torch.optim.AdamW(params, lr=lr, weight_decay=WEIGHT_DECAY, fused=True)
    except RuntimeError:  # "fused=True requires all the params to be ... of supported devices"
        return torch.optim.AdamW(params, lr=lr, weight_decay=WEIGHT_DECAY)


def zero_optimizer(params: Iterable[Any], lr: float, ds_config: dict | None) -> Any:
    """The optimizer a ZeRO run hands ``deepspeed.initialize``: DeepSpeedCPUAdam where
    ``ds_config`` offloads the optimizer state (``zero_optimization.offload_optimizer.device``
    cpu or nvme) and leaves ``zero_force_ds_cpu_optimizer`` true (accelerate's swap), else
    :func:`trainer_adamw`."""
    config = ds_config or {}
    offload = (config.get("zero_optimization") or {}).get("offload_optimizer") or {}
    if offload.get("device", "none") != "none" and config.get("zero_force_ds_cpu_optimizer", True):
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        return DeepSpeedCPUAdam(list(params), lr=lr, weight_decay=WEIGHT_DECAY)
    return trainer_adamw(params, lr)


def implementation(optimizer: Any) -> str:
    """Which implementation an optimizer object runs: ``torch.optim.AdamW(fused=True)``,
    ``torch.optim.AdamW(foreach=True)`` / ``(foreach=None)``, ``deepspeed.ops.adam.DeepSpeedCPUAdam``
    (the module path where the class is exported, else its own)."""
    cls = type(optimizer)
    module = cls.__module__
    for public in ("torch.optim", "deepspeed.ops.adam"):
        if module.startswith(public + "."):
            module = public
    name = f"{module}.{cls.__qualname__}"
    defaults = getattr(optimizer, "defaults", {}) or {}
    if module == "torch.optim":
        if defaults.get("fused"):
            return f"{name}(fused=True)"
        return f"{name}(foreach={defaults.get('foreach')})"
    return name
