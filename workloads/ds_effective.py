"""The DeepSpeed config a ZeRO engine actually parsed, as JSON: what a run measured.

``deepspeed.initialize`` parses our config dict into ``DeepSpeedConfig`` (deepspeed 0.19.8
``runtime/config.py``): pydantic models for the sections (``DeepSpeedZeroConfig`` for
``zero_optimization``, ``DeepSpeedBF16Config`` ...) with DeepSpeed's defaults filled in and its
validators applied (e.g. ``overlap_comm`` None -> True for stage 3 only). This module returns the
input dict with those sections and scalars replaced by the parsed values, keyed as DeepSpeed's
JSON keys (pydantic aliases: ``stage3_param_persistence_threshold``, not the field name), so
``runs.ds_config`` answers "which bucket, which threshold, overlap or not" for every run.

Runs in rank processes; imports nothing from linksweep.

May import: nothing (the standard library only).
"""

from __future__ import annotations

import copy
import json
from typing import Any

# DeepSpeedConfig attribute -> its JSON key (runtime/constants.py), for the scalars that shape
# communication or the step.
SCALARS = {
    "train_batch_size": "train_batch_size",
    "train_micro_batch_size_per_gpu": "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "gradient_clipping": "gradient_clipping",
    "communication_data_type": "communication_data_type",
    "prescale_gradients": "prescale_gradients",
    "gradient_predivide_factor": "gradient_predivide_factor",
    "steps_per_print": "steps_per_print",
    "wall_clock_breakdown": "wall_clock_breakdown",
    "zero_allow_untested_optimizer": "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer": "zero_force_ds_cpu_optimizer",
}
SECTIONS = {
    "zero_config": "zero_optimization",
    "bfloat16_config": "bf16",
    "float16_config": "fp16",
    "aio_config": "aio",
}


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json", by_alias=True)
    return json.loads(json.dumps(value, default=str))


def effective_config(parsed: Any) -> dict[str, Any]:
    """JSON dict of a ``DeepSpeedConfig`` (``engine._config``): input keys, parsed sections."""
    out = copy.deepcopy(getattr(parsed, "_param_dict", {}) or {})
    for attr, key in SECTIONS.items():
        if getattr(parsed, attr, None) is not None:
            out[key] = _jsonable(getattr(parsed, attr))
    for attr, key in SCALARS.items():
        if hasattr(parsed, attr):
            out[key] = _jsonable(getattr(parsed, attr))
    return _jsonable(out)
