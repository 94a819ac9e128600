"""Which NVML inventory readings make link results suspect: pure checks over ``nvml_inventory()``.

Split from ``workloads/telemetry.py`` (which re-exports ``doctor_warnings`` and
``DoctorWarning``): that module reads GPUs, this one judges what was read.

May import: throttle.
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.throttle import HOT_TEMP_C

__all__ = ["DoctorWarning", "doctor_warnings"]


@dataclass(frozen=True)
class DoctorWarning:
    """Something about a GPU that can distort link benchmarks."""

    gpu: int
    code: str
    """Stable identifier: ``pcie_gen_below_max``, ``pcie_width_below_max``,
    ``power_limit_below_default``, ``hot``, ``nvlink_inactive``."""
    message: str
    invalidates: bool
    """True when results measured on this GPU should not be compared with other machines."""


# The issue calls this type ``Warning``; the alias stays out of ``__all__`` so that a star import
# cannot shadow the builtin.
Warning = DoctorWarning  # noqa: A001


def doctor_warnings(inventory: list[dict]) -> list[DoctorWarning]:
    """Pure checks over ``nvml_inventory()`` output; missing (None) readings are skipped."""
    out: list[DoctorWarning] = []
    for gpu in inventory:
        i = gpu["index"]
        gen, gen_max = gpu.get("pcie_gen_current"), gpu.get("pcie_gen_max")
        if gen is not None and gen_max is not None and gen < gen_max:
            out.append(
                DoctorWarning(
                    i,
                    "pcie_gen_below_max",
                    f"GPU{i} PCIe link runs at gen {gen} of {gen_max}. Idle GPUs drop the PCIe "
                    "generation to save power, so this is normal at rest; only if it persists under "
                    "load does it cap PCIe/SHM transfers and slow the PCIe link variants.",
                    invalidates=False,
                )
            )
        width, width_max = gpu.get("pcie_width_current"), gpu.get("pcie_width_max")
        if width is not None and width_max is not None and width < width_max:
            out.append(
                DoctorWarning(
                    i,
                    "pcie_width_below_max",
                    f"GPU{i} PCIe link trained at x{width} of x{width_max} (narrow slot, riser or a "
                    "degraded link). Width does not recover under load: PCIe and SHM transfers get at "
                    f"most {width}/{width_max} of the bandwidth, so PCIe link results from this GPU "
                    "do not represent the hardware.",
                    invalidates=True,
                )
            )
        limit, default = gpu.get("power_limit_w"), gpu.get("power_default_limit_w")
        if limit is not None and default is not None and limit < default - 0.5:
            out.append(
                DoctorWarning(
                    i,
                    "power_limit_below_default",
                    f"GPU{i} power limit is {limit:.0f} W, below its default {default:.0f} W "
                    "(set with nvidia-smi -pl). Clocks drop under load, so step times grow and the "
                    "compute share of every variant changes; results do not compare with other boxes.",
                    invalidates=True,
                )
            )
        temp = gpu.get("temp_c")
        if temp is not None and temp > HOT_TEMP_C:
            out.append(
                DoctorWarning(
                    i,
                    "hot",
                    f"GPU{i} is at {temp:.0f} C before the benchmark, above {HOT_TEMP_C:.0f} C. "
                    "Under load it will reach the 84-90 C where GPUs throttle, mixing thermal "
                    "slowdowns into the link comparison. Check cooling and airflow first.",
                    invalidates=True,
                )
            )
        if gpu.get("nvlink_active_count") == 0:
            out.append(
                DoctorWarning(
                    i,
                    "nvlink_inactive",
                    f"GPU{i} supports NVLink but no link is active (no bridge, or links down). NV# "
                    "link variants cannot run here; peers talk over PCIe, as topo -m will show.",
                    invalidates=False,
                )
            )
    return out
