"""A link's rated rate: what its hardware can carry, in the unit of busbw. Pure.

The unit is GB/s = 1e9 B/s **in one direction**. busbw (nccl-tests doc/PERFORMANCE.md) is the
rate each rank's busiest link carries one way, so it is compared with a link's unidirectional
rate: NVIDIA's headline NVLink figures ("600 GB/s" for A100, "900 GB/s" for H100) count both
directions of every link and are halved here (A100: 12 links x 25 GB/s = 300 GB/s one way).

**NVLink**: links x the per-link rate of the GPU, one direction. The number of links between
two GPUs is the ``NV#`` of ``nvidia-smi topo -m`` (``runs.link_class``; on NVSwitch systems the
links each GPU has to the switches). The per-link rate comes from the GPU model (``gpus.name``),
not from NVML's NVLink version alone, because boards of one version differ (GA102 boards run
NVLink3 at 14.0625 GB/s per link per direction, A100 at 25). Sources, per link per direction:

- NVLink1, P100: 20 GB/s (4 links, 160 GB/s both directions; Dell's V100/P100 SXM2 paper:
  "P100-SXM2 only has 4x 20GB/s links").
- NVLink2, V100: 25 GB/s (6 links, 300 GB/s; NVIDIA DGX-1 V100 system architecture whitepaper).
- NVLink3, A100/A800: 25 GB/s (nvidia.com/data-center/nvlink: "up to twelve third-generation
  NVLink connections for a total bandwidth of 600 GB/s").
- NVLink3 on GA102 (RTX 3090, RTX A6000, A40): 14.0625 GB/s (NVIDIA Ampere GA102 architecture
  whitepaper: "four x4 links, with each link providing 14.0625 GB/sec bandwidth in each
  direction").
- NVLink4, H100/H200/H800/GH200: 25 GB/s (18 links, "900 GB/s bidirectional per GPU", NVIDIA
  HGX H100 / NVLink pages).
- NVLink5, B100/B200/GB200: 50 GB/s (nvidia.com/data-center/nvlink: "18 NVLink 100
  gigabyte-per-second (GB/s) connections for a total bandwidth of 1.8 terabytes per second").
A GPU model not in the table gets no NVLink rate (NULL and the reason): never a guess.

**PCIe**: per-lane transfer rate x line-code efficiency x lanes / 8 bits: gen1 2.5 GT/s and gen2
5 GT/s with 8b/10b; gen3 8, gen4 16, gen5 32 GT/s with 128b/130b; gen6 64 GT/s PAM4 in FLIT mode
with no line code (PCI-SIG base specifications; e.g. gen4 x16 = 16 x 128/130 x 16 / 8 = 31.5
GB/s, gen5 x16 = 63.0 GB/s). These are line rates: TLP headers and flow control leave a
practical ceiling near 80-90% of them (gen6's FEC/CRC flit bytes, ~6%, are not subtracted
either), so busbw over PCIe never reaches 100%. The rate uses the link's *maximum* generation
and width as NVML reports them for the device **and system** (``nvmlDeviceGetMaxPcieLinkGeneration``
/ ``...Width``: a gen4 x16 GPU in a gen3 x8 slot reports gen3 x8), the slower of the two GPUs;
GPU-to-GPU traffic crosses both GPUs' links.

**Measured above rated** (``share_words``): a busbw share over 100% is a reading, shown as it is
with the reason it can happen, never clipped or called an error. On NVSwitch systems (HGX/DGX
H100: NV18 at 450 GB/s per direction) NCCL's NVLS algorithm (NVLink SHARP) has the switch add
the data: each GPU sends its buffer once and reads the sum once, while busbw is computed as if
the GPUs reduced it themselves (nccl-tests' 2(n-1)/n factor), so all_reduce busbw can exceed
the per-GPU link rate. On the emulated cluster tc's token bucket lets a burst pass above the
average rate. Over PCIe the rate is a line rate, so a share above it is worth checking.

**A PCIe link trained below its maximum** (``pcie_training``): a current width below the maximum
is a fault (the link trained on fewer lanes: a badly seated card or riser; the width does not
drop at idle) and flagged. A current generation below the maximum is only noted: NVML's current
generation drops while the GPU idles to save power, and the inventory is read at idle, so that
reading is normal unless it stays low under load.

May import: nothing (the standard library only).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# GPU model -> (NVLink generation, GB/s per link per direction); sources in the docstring.
# Matched on the NVML name as a whole word (``NVIDIA A100-SXM4-80GB``, ``Tesla V100-SXM2-32GB``).
NVLINK_PER_LINK_GBPS: tuple[tuple[str, int, float], ...] = (
    ("P100", 1, 20.0),
    ("V100", 2, 25.0),
    ("A100", 3, 25.0),
    ("A800", 3, 25.0),
    ("RTX 3090", 3, 14.0625),
    ("RTX A6000", 3, 14.0625),
    ("A40", 3, 14.0625),
    ("H100", 4, 25.0),
    ("H200", 4, 25.0),
    ("H800", 4, 25.0),
    ("GH200", 4, 25.0),
    ("B100", 5, 50.0),
    ("B200", 5, 50.0),
    ("GB200", 5, 50.0),
)

# generation -> (GT/s per lane, payload bits per transferred bit)
PCIE_LANE: dict[int, tuple[float, float]] = {
    1: (2.5, 8 / 10),
    2: (5.0, 8 / 10),
    3: (8.0, 128 / 130),
    4: (16.0, 128 / 130),
    5: (32.0, 128 / 130),
    6: (64.0, 1.0),  # PAM4, FLIT mode: no line code; flit FEC/CRC not subtracted
}

# Topology classes whose GPU-to-GPU path is PCIe within one CPU's reach (orchestrator/topology/matrix.py).
PCIE_CLASSES = ("PIX", "PXB", "PHB", "NODE")
_NV_RE = re.compile(r"^NV(\d+)$")


@dataclass(frozen=True)
class Rated:
    """A link's rated rate, or why it has none."""

    gbps: float | None
    """GB/s (1e9 B/s), one direction; None: not known (``text`` says why)."""
    source: str | None
    """``nvlink`` | ``pcie`` (``tc`` is the emulated cluster's, set in ``links``); None."""
    text: str
    """How the rate was reached, or why there is none: one clause for people."""
    faults: tuple[str, ...] = ()
    """PCIe links trained below their maximum width, one sentence each (flagged)."""
    notes: tuple[str, ...] = ()
    """Readings worth saying that are not faults (fewer active NVLinks than the class says)."""
    idle_gen: tuple[str, ...] = ()
    """GPUs read below their maximum PCIe generation (``GPU0 on n1 gen1 of gen4``): normal at
    idle, said once with ``idle_gen_text``."""


def idle_gen_text(idle_gen: Sequence[str]) -> str:
    """One sentence for GPUs read below their maximum PCIe generation; '' for none."""
    if not idle_gen:
        return ""
    return (
        f"PCIe below its maximum generation when read ({', '.join(idle_gen)}): normal at idle "
        "(NVML's current generation drops while the GPU idles), a fault only if it stays low "
        "under load"
    )


OVER_RATED_WHY: dict[str | None, str] = {
    "nvlink": "NVLS in-switch reduction can exceed the link rate",
    "tc": "tc's token bucket lets bursts pass above the average rate",
    "pcie": "above the PCIe line rate: check the link's class and the GPUs' PCIe width",
}
"""Why a measured busbw can exceed its rated rate, by ``Rated.source`` (see the docstring)."""


def share_words(share: float, rated_source: str | None, of: str) -> str:
    """``82% of NVLink``; above 100% the share as measured with why that can happen:
    ``112% of NVLink, above the rated rate: NVLS in-switch reduction can exceed ...``."""
    text = f"{share:.0%} of {of}"
    if share <= 1.0 or f"{share:.0%}" == "100%":
        return text
    why = OVER_RATED_WHY.get(rated_source, "a reading to check against how the rate was rated")
    return f"{text}, above the rated rate: {why}"


def pcie_gbps(gen: int | None, width: int | None) -> float | None:
    """GB/s one way of a PCIe link of ``gen`` x ``width``; None for an unknown generation."""
    if not gen or not width or int(gen) not in PCIE_LANE:
        return None
    gt_s, efficiency = PCIE_LANE[int(gen)]
    return gt_s * efficiency * int(width) / 8


def nvlink_per_link(gpu_name: str | None) -> tuple[int, float] | None:
    """(generation, GB/s per link per direction) of a GPU model; None when not in the table."""
    if not gpu_name:
        return None
    for model, gen, gbps in NVLINK_PER_LINK_GBPS:
        if re.search(rf"(?<![\w]){re.escape(model)}(?![\w])", gpu_name):
            return gen, gbps
    return None


def _gpu(g: Mapping[str, Any]) -> str:
    return f"GPU{g.get('gpu_index', g.get('index', '?'))}" + (
        f" on {g['node']}" if g.get("node") else ""
    )


def pcie_training(g: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(fault, idle) of one GPU's PCIe link: a width below its maximum is a fault (a sentence);
    a generation below its maximum only noted (``GPU0 on n1 gen1 of gen4``; ``idle_gen_text``
    says why that is normal at idle)."""
    fault = note = None
    wc, wm = g.get("pcie_width_current"), g.get("pcie_width_max")
    gc, gm = g.get("pcie_gen_current"), g.get("pcie_gen_max")
    if wc and wm and wc < wm:
        fault = (
            f"{_gpu(g)} PCIe trained at x{wc} of x{wm}: fewer lanes than the slot allows "
            "(reseat the card, check the riser); the width does not drop at idle"
        )
    if gc and gm and gc < gm:
        note = f"{_gpu(g)} gen{gc} of gen{gm}"
    return fault, note


def _pcie(gpus: Sequence[Mapping[str, Any]], why: str) -> Rated:
    """The slower of the GPUs' PCIe links, with their training faults and notes."""
    faults = tuple(f for f, _ in map(pcie_training, gpus) if f)
    idle = tuple(n for _, n in map(pcie_training, gpus) if n)
    if not gpus:
        return Rated(None, None, f"{why}; no GPU inventory to read PCIe from")
    rates = [(pcie_gbps(g.get("pcie_gen_max"), g.get("pcie_width_max")), g) for g in gpus]
    missing = [_gpu(g) for r, g in rates if r is None]
    if missing:
        return Rated(
            None, None, f"{why}; PCIe generation/width not reported for {', '.join(missing)}",
            faults, idle_gen=idle,
        )  # fmt: skip
    gbps, g = min(rates, key=lambda x: x[0])
    text = (
        f"{why}: PCIe gen{g['pcie_gen_max']} x{g['pcie_width_max']} = {gbps:.1f} GB/s per "
        "direction (line rate)"
    )
    return Rated(gbps, "pcie", text, faults, idle_gen=idle)


def rated_link(
    link_class: str | None,
    gpus: Sequence[Mapping[str, Any]],
    *,
    p2p_off: bool = False,
    shm_off: bool = False,
) -> Rated:
    """The rated rate of the link between ``gpus`` (their ``gpus`` inventory rows: ``name``,
    ``pcie_*``, ``nvlink_active_count``) whose topology class is ``link_class`` (``NV12``,
    ``PIX``, ``SYS``, ``NET``...). ``p2p_off``: the link's env turns NCCL P2P off, so traffic
    goes through host memory (SHM) and each GPU's PCIe link bounds it, NVLink or not;
    ``shm_off`` as well: it takes the network path, whose rate is not known."""
    cls = (link_class or "").upper()
    if cls == "NET":
        return Rated(None, None, "across nodes (NET): the network's rate is not known here")
    if cls == "SHARED-GPU":
        return Rated(None, None, "two ranks on one GPU: no link between GPUs")
    if not gpus:
        return Rated(None, None, "no GPU inventory (a CPU run): no rated rate")
    if p2p_off and shm_off:
        return Rated(
            None, None, "NCCL P2P and SHM off: traffic takes the network path (sockets/IB), "
            "whose rate is not known here",
        )  # fmt: skip
    if p2p_off:
        return _pcie(gpus, "NCCL P2P off, so through host memory (SHM), bound by each GPU's PCIe")
    m = _NV_RE.match(cls)
    if m:
        return _nvlink(int(m.group(1)), gpus)
    if cls in PCIE_CLASSES:
        return _pcie(gpus, f"{cls}: GPU to GPU over PCIe")
    if cls == "SYS":
        return _pcie(
            gpus, "SYS: over PCIe and the CPUs' interconnect (UPI/Infinity Fabric), whose rate "
            "NVML does not report, so the PCIe rate is an upper bound",
        )  # fmt: skip
    return Rated(None, None, f"topology class {link_class or 'unknown'}: no rated rate")


def _nvlink(n_links: int, gpus: Sequence[Mapping[str, Any]]) -> Rated:
    per = {g.get("name"): nvlink_per_link(g.get("name")) for g in gpus}
    unknown = sorted(str(k) for k, v in per.items() if v is None)
    if unknown:
        return Rated(
            None, None, f"NV{n_links}: the per-link NVLink rate of {', '.join(unknown)} is not "
            "in linksweep's table (orchestrator/analysis/rated.py)",
        )  # fmt: skip
    gen, per_link = min(per.values(), key=lambda v: v[1])  # type: ignore[arg-type, return-value]
    active = [g.get("nvlink_active_count") for g in gpus if g.get("nvlink_active_count")]
    links, notes = n_links, ()
    if active and min(active) < n_links:
        links = min(active)
        notes = (f"NVML reports only {links} active NVLinks on a GPU of this NV{n_links} pair",)
    gbps = links * per_link
    text = (
        f"NV{n_links}: NVLink{gen} {links} links x {per_link:g} GB/s = {gbps:g} GB/s per direction"
    )
    return Rated(gbps, "nvlink", text, (), notes)
