"""What crosses Ray in a fleet check (``linksweep fleet``): the records a fleet probe returns.

The driver (``orchestrator/raycluster/pinned_probes.py``) starts ``workloads.fleet_probe`` actors pinned
to nodes; each call returns one of these frozen records. Units live in the field names.

Glossary (the fleet check's words, used the same everywhere):
    pair     two nodes measured together: one rank on each, an all_reduce between them.
    intra    a node measured alone: its GPUs (or two CPU ranks) all_reduce among themselves.
    round    inter-node pairs measured at the same time; no node is in two pairs of a round.
    probe    the compute probe: a fixed short gpt2 training run on one rank of a node.
    health   what NVML says of a node's GPUs (or, on a CPU node, the CPU facts that apply).

May import: nothing (the standard library only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CollectiveTimes:
    """One rank's timings of an all_reduce benchmark (a pair or an intra-node check)."""

    rank: int
    world_size: int
    backend: str
    """gloo or nccl."""
    device: str
    """cpu or cuda:N."""
    ifname: str | None
    """The interface gloo was bound to (GLOO_SOCKET_IFNAME), None for NCCL."""
    msg_bytes: int
    """The all_reduce buffer size (nccl-tests: the size of the total array)."""
    times_s: tuple[float, ...]
    """Per timed iteration, already the max over ranks (every rank returns the same)."""


@dataclass(frozen=True)
class ComputeRecord:
    """The compute probe of one node: a fixed short gpt2 run on one rank."""

    device: str
    model: str
    """gpt2 size name (workloads/model.py GPT2_SIZES)."""
    precision: str
    seq_len: int
    micro_batch_size: int
    warmup_steps: int
    step_times_s: tuple[float, ...]
    """Timed steps only (warmup excluded), device synchronised before each clock read."""
    tokens_per_s: float
    """micro_batch_size * seq_len / median(step_times_s)."""
    health_under_load: HealthRecord | None = None
    """The node's health read while the timed steps ran (GPU nodes; None on CPU)."""


@dataclass(frozen=True)
class HealthRecord:
    """A node's health: per GPU facts from NVML, or the CPU facts that apply on a CPU node."""

    gpus: tuple[dict[str, Any], ...] = ()
    """Per GPU: index, name, uuid, pcie_gen_current, pcie_gen_max, pcie_width_current,
    pcie_width_max, clock_reasons (int bitmask or None), sm_clock_mhz, sm_clock_max_mhz,
    temp_c, ecc_uncorrected, ecc_corrected (volatile totals, None when ECC is off or
    unsupported), mig_instances (NVML's names of its MIG instances when MIG is on, else
    empty), under_load (bool), error (why a GPU could not be read, else None)."""
    cpu: dict[str, Any] = field(default_factory=dict)
    """cpus, loadavg_1m, mem_available_bytes (always read; on a GPU node too)."""
    note: str | None = None
    """What applies here, e.g. "no GPU: NVML checks do not apply (CPU facts recorded)"."""
    error: str | None = None
    """Why NVML could not be read at all on a node that has GPUs."""
