"""Imported once by the launcher's fork server (``workloads/launcher.py``), so that forked ranks
start with it all loaded: torch, transformers, deepspeed, datasets and the workload's modules.
Nothing here touches CUDA (the fork server must not initialise it before forking), nor NVML:
before anything else, ``launcher.guard_nvml`` makes NVML's init refuse until each forked child
gives it back (why: the launcher's module docstring).

May import: data, launcher, model, rank, strategies, train, datasets, deepspeed, torch,
transformers.
"""

# ruff: noqa: E402 - the NVML guard goes in before the first import that could initialise NVML

from __future__ import annotations

import contextlib

from workloads.launcher import guard_nvml

guard_nvml()

import torch  # noqa: F401
import torch.distributed  # noqa: F401
import transformers  # noqa: F401

# transformers and datasets import most of themselves lazily, at first use: import what a run
# uses (gpt2, the tokenizer lookup, the text loader) here, or every forked rank pays ~2 s for it.
import transformers.models.auto.tokenization_auto  # noqa: F401
import transformers.models.gpt2.configuration_gpt2  # noqa: F401
import transformers.models.gpt2.modeling_gpt2  # noqa: F401

import workloads.data  # noqa: F401
import workloads.model  # noqa: F401
import workloads.rank  # noqa: F401
import workloads.strategies  # noqa: F401
import workloads.train  # noqa: F401

with contextlib.suppress(Exception):  # optional: absent or unbuildable here
    import deepspeed  # noqa: F401
with contextlib.suppress(Exception):
    import datasets  # noqa: F401
    import datasets.builder  # noqa: F401
    import datasets.load  # noqa: F401
    import datasets.packaged_modules.text.text  # noqa: F401
