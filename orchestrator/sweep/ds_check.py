"""Check a sweep's DeepSpeed configs with DeepSpeed's own config models, on the driver, before
anything runs. Imports deepspeed (about 5 s), so the CLI calls it only for sweeps with ZeRO.

Three checks, every problem reported at once (``SpecError`` lines, exit 2, nothing written):

1. ``deepspeed:`` keys that the variant or linksweep sets (``ds_config.block_conflicts``).
2. Each top-level key of the ``deepspeed:`` block, merged alone into a generated config and
   parsed by ``deepspeed.runtime.config.DeepSpeedConfig`` (the class ``deepspeed.initialize``
   uses): its section models (``DeepSpeedZeroConfig``, ``DeepSpeedBF16Config`` ...) are pydantic
   with ``extra="forbid"``, so an unknown or mistyped key inside a section is refused with
   DeepSpeed's message. DeepSpeed reads top-level keys with ``dict.get`` and silently ignores
   ones it does not know, so a top-level key DeepSpeed's parser never reads is refused too.
3. Every ZeRO variant's full config, parsed the same way (a combination can be invalid where
   each key alone is fine).

Limits: a value DeepSpeed's parser does not validate (e.g. ``gradient_clipping: "x"``) passes
here as it would pass ``deepspeed.initialize``'s config step. The driver has no process group,
so DeepSpeedConfig sees world size 1: ``train_batch_size`` (derived, checked by DeepSpeed at
initialize) is left out of the check.

May import: ds_config, planner, spec, workloads.catalog, deepspeed, pydantic, torch.
"""

from __future__ import annotations

import os
from typing import Any

from orchestrator.sweep.ds_config import block_conflicts, deep_merge
from orchestrator.sweep.planner import expand_grid, run_config
from orchestrator.sweep.spec import SweepSpec
from workloads import catalog


class _ReadTracker(dict):
    """A dict that records which keys were read, so unread (unknown) keys can be named."""

    def __init__(self, data: dict):
        super().__init__(data)
        self.read: set[str] = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key):
        self.read.add(key)
        return super().__contains__(key)

    def __copy__(self):  # DeepSpeedConfig parses copy.copy(param_dict): keep tracking
        return self


def accelerator_env(environ: dict[str, str], cuda_available: bool) -> dict[str, str]:
    """What to add to ``environ`` before importing DeepSpeed here: ``DS_ACCELERATOR=cpu`` where
    torch sees no CUDA and nobody chose. DeepSpeed picks CPU there by itself, but says so as a
    ``[WARNING] ... Setting accelerator to CPU`` line on stdout, in the middle of a sweep's
    output; naming the choice it would make keeps it quiet. A choice already made is kept."""
    if "DS_ACCELERATOR" in environ or cuda_available:
        return {}
    return {"DS_ACCELERATOR": "cpu"}


def _name_the_accelerator() -> None:
    import torch

    os.environ.update(accelerator_env(dict(os.environ), torch.cuda.is_available()))


def parse_errors(config: dict[str, Any], prefix: str = "deepspeed") -> list[str]:
    """DeepSpeed's complaints about ``config``, one line each, keys spelled ``prefix.a.b``."""
    _name_the_accelerator()
    from deepspeed.runtime.config import DeepSpeedConfig
    from pydantic import ValidationError

    tracked = _ReadTracker({k: v for k, v in config.items() if k != "train_batch_size"})
    try:
        DeepSpeedConfig(tracked)
    except ValidationError as exc:
        lines = []
        for e in exc.errors():
            section = _section_of(config, exc.title)
            where = ".".join(str(p) for p in (prefix, *section, *e.get("loc", ())))
            lines.append(
                f"{where}: DeepSpeed ({exc.title}) says: {e.get('msg')} (got {e.get('input')!r})"
            )
        return lines
    except Exception as exc:  # DeepSpeed raises AssertionError / ValueError / its own errors
        return [f"{prefix}: DeepSpeed refused the config: {type(exc).__name__}: {exc}"]
    unread = sorted(set(tracked) - tracked.read)
    return [
        f"{prefix}.{key}: not a DeepSpeed config key (DeepSpeed {_ds_version()} does not read "
        "it; check the spelling against its docs)"
        for key in unread
    ]


# The section a DeepSpeed model parses, for naming the key in its errors.
_MODEL_SECTIONS = {
    "DeepSpeedZeroConfig": "zero_optimization",
    "DeepSpeedBF16Config": "bf16",
    "DeepSpeedFP16Config": "fp16",
    "CommsLoggerConfig": "comms_logger",
}


def _section_of(config: dict, model_title: str) -> tuple[str, ...]:
    section = _MODEL_SECTIONS.get(model_title)
    return (section,) if section and section in config else ()


def _ds_version() -> str:
    _name_the_accelerator()
    import deepspeed

    return deepspeed.__version__


def check_deepspeed(spec: SweepSpec) -> list[str]:
    """Every problem with the sweep's DeepSpeed configs (empty: fine, or no ZeRO runs)."""
    zero = [v for v in expand_grid(spec) if catalog.strategy(v.strategy).zero_stage is not None]
    if not zero:
        return []
    block = spec.deepspeed or {}
    errors = block_conflicts(
        block,
        overlap_axis=any(o != "default" for o in spec.grid.overlap_comm),
        bucket_axis=any(b != "default" for b in spec.grid.bucket_mb),
    )
    if errors:
        return errors
    bare = spec.model_copy(update={"deepspeed": None})
    base = run_config(bare, zero[0], "check").ds_config or {}
    for key, value in block.items():
        if key in base and not isinstance(value, dict):
            continue  # a generated key; conflicts were refused above
        errors.extend(parse_errors(deep_merge(base, {key: value})))
    if errors:
        return errors
    seen = set()
    for v in zero:
        cfg = run_config(spec, v, "check").ds_config or {}
        for line in parse_errors(cfg):
            if line not in seen:
                seen.add(line)
                errors.append(f"{line} [variant {v.label}]")
    return errors
