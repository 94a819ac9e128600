"""Topology discovery: parse ``nvidia-smi topo -m`` and classify the link a run used.

``nvidia-smi topo -m`` prints a matrix: one header line naming the devices (``GPU0 GPU1 ...``,
then NICs as ``NIC0``.. or, on older drivers, ``mlx5_0``..) followed by the affinity columns
(``CPU Affinity``, ``NUMA Affinity``, ``GPU NUMA ID``), one row per device, then a ``Legend:``
block and, on newer drivers, a ``NIC Legend:`` block (``NIC0: mlx5_0``). Each cell says how two
devices connect, from fastest to slowest::

    NV#   a bonded set of # NVLinks (more links, more bandwidth)
    PIX   at most one PCIe bridge
    PXB   several PCIe bridges, not the host bridge
    PHB   a PCIe host bridge (typically the CPU)
    NODE  between PCIe host bridges within a NUMA node
    SYS   across the SMP interconnect between NUMA nodes (QPI/UPI); drivers before ~2017 say SOC

``parse_topo`` reads the text as it is really published: tab-separated straight from
nvidia-smi, or with tabs expanded to spaces after a copy from a terminal; with the ANSI
underline nvidia-smi puts on the header when writing to a TTY (``ESC[4m`` .. ``ESC[0m``), or
with only the ``[4m``/``[0m`` left over once a web page ate the ESC byte. Lines before the header
(a shell prompt, ``NVIDIA Topology:``) are skipped; any line inside the matrix that cannot be
read raises ``TopoParseError`` naming its 1-based line number and text.

Two quirks decide the affinity parsing. nvidia-smi ends ``NUMA Affinity`` with two tabs, so a
tab-separated row has one more cell than the header has columns; and an empty cell (an empty
CPU affinity inside a cgroup) can only be told apart in the tab form, because a terminal copy
turns every run of tabs into spaces. So the tab form maps cells by position after dropping
surplus empty cells, and the space form maps the remaining tokens left to right.

SOC is stored as SYS, its current name, so that links compare across driver generations.

``read_topo_text`` is the only I/O here: it runs ``nvidia-smi topo -m`` and returns its text (or
why it could not), for a node probe to store verbatim and parse with ``parse_topo``.

May import: nothing (the standard library only).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = [
    "LINK_RANK",
    "Topology",
    "TopoParseError",
    "link_sort_key",
    "parse_topo",
    "run_link_class",
    "slowest_link",
    "to_json_dict",
    "topology_fingerprint",
]


class TopoParseError(ValueError):
    """``nvidia-smi topo -m`` text that cannot be read; the message names line number and text."""


@dataclass(frozen=True)
class Topology:
    """One node's ``nvidia-smi topo -m`` matrix.

    Keys of ``links`` are ordered pairs of distinct GPUs, e.g. ``("GPU0", "GPU1")``: every pair is
    present. ``nic_links`` maps ``(gpu, nic)`` to the cell in that GPU's row. Affinity dicts hold
    only the GPUs whose cell was present and non-empty.
    """

    gpus: tuple[str, ...]
    """GPU names in header order: ``("GPU0", "GPU1", ...)``."""
    nics: tuple[str, ...]
    """NIC names exactly as the header gives them (``NIC0``.. or ``mlx5_0``..)."""
    links: dict[tuple[str, str], str] = field(default_factory=dict)
    """GPU-GPU link class per ordered pair (``NV12``, ``PIX``, ``SYS``...)."""
    nic_links: dict[tuple[str, str], str] = field(default_factory=dict)
    """GPU-NIC link class, keyed ``(gpu, nic)``."""
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    """GPU -> CPU list as printed, e.g. ``"0-23,48-71"``."""
    numa_affinity: dict[str, str] = field(default_factory=dict)
    """GPU -> NUMA node(s) as printed, e.g. ``"0"``, ``"6-7"`` or ``"N/A"``."""
    gpu_numa_id: dict[str, str] = field(default_factory=dict)
    """GPU -> the GPU's own NUMA id (``GPU NUMA ID`` column, newer drivers), usually ``"N/A"``."""
    nic_legend: dict[str, str] = field(default_factory=dict)
    """``NIC Legend`` block: ``{"NIC0": "mlx5_0", ...}``; empty when absent."""


# Link classes from fastest to slowest. "NV" stands for every NV#; among those, more links are
# faster. "NET" never appears in nvidia-smi output: it is the class of a run whose ranks sit on
# different nodes, so that one ordering covers same-node and cross-node variants.
LINK_RANK: tuple[str, ...] = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS", "NET")

_CELL_RE = re.compile(r"^(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")
_NV_RE = re.compile(r"^NV(\d+)$")
# ESC[...m, and the "[4m" / "[0m" that remain when a web page dropped the ESC byte.
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\[[0-9;]*m")
_AFFINITY_COLUMNS = {
    "CPU Affinity": "cpu_affinity",
    "NUMA Affinity": "numa_affinity",
    "GPU NUMA ID": "gpu_numa_id",
}
_AFFINITY_RE = re.compile("|".join(re.escape(c) for c in _AFFINITY_COLUMNS))
_GPU_RE = re.compile(r"^GPU\d+$")
_NIC_LEGEND_RE = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


def _fail(lineno: int, reason: str, line: str) -> TopoParseError:
    return TopoParseError(f"line {lineno}: {reason}: {line!r}")


def _strip_ansi(line: str) -> str:
    return _ANSI_RE.sub("", line)


def _is_header(clean: str) -> bool:
    tokens = clean.split()
    return bool(tokens) and tokens[0] == "GPU0" and "X" not in tokens


def _parse_header(clean: str) -> tuple[list[str], list[str]]:
    """Device names and affinity columns (in order) of a header line."""
    matches = list(_AFFINITY_RE.finditer(clean))
    device_part = clean[: matches[0].start()] if matches else clean
    return device_part.split(), [m.group(0) for m in matches]


def _split_row(clean: str, n_devices: int) -> tuple[str, list[str], list[str], bool]:
    """Row label, link cells, affinity cells; the bool says whether cells keep positions."""
    if "\t" in clean:
        cells = clean.strip(" ").split("\t")
        while cells and not cells[0].strip():
            cells.pop(0)
        cells = [c.strip() for c in cells]
        return cells[0], cells[1 : 1 + n_devices], cells[1 + n_devices :], True
    tokens = clean.split()
    return tokens[0], tokens[1 : 1 + n_devices], tokens[1 + n_devices :], False


def _fit_affinity(cells: list[str], n_columns: int) -> list[str] | None:
    """Drop the empty cells nvidia-smi pads with until the cells fit the columns (None: can't)."""
    cells = list(cells)
    while len(cells) > n_columns:
        empties = [i for i, c in enumerate(cells) if not c]
        if not empties:
            return None
        # The padding sits after NUMA Affinity and at the end of NIC rows: drop the last empty
        # cell, which keeps an empty CPU Affinity (first column) in its place.
        cells.pop(empties[-1])
    return cells


def _header_index(lines: list[str]) -> int:
    """Index of the header line (the first starting with GPU0); TopoParseError without one."""
    header_at = next((i for i, ln in enumerate(lines) if _is_header(_strip_ansi(ln))), None)
    if header_at is None:
        first = next(((i, ln) for i, ln in enumerate(lines) if ln.strip()), (0, ""))
        raise _fail(first[0] + 1, "no nvidia-smi topo header (a line starting with GPU0)", first[1])
    return header_at


def _matrix_row(
    raw: str, lineno: int, devices: list[str], seen: Iterable[str], n_affinity: int
) -> tuple[str, list[str], list[str]]:
    """One matrix row: its label, its link cells (SOC read as SYS) and its affinity cells fitted
    to the header's affinity columns. TopoParseError for a label that is not a header device
    or is seen twice, missing or unknown link cells, ``X`` off the diagonal, surplus cells."""
    n = len(devices)
    label, cells, aff_cells, positional = _split_row(_strip_ansi(raw), n)
    if label not in devices:
        raise _fail(lineno, f"row label {label!r} is not a device of the header", raw)
    if label in seen:
        raise _fail(lineno, f"second row for {label}", raw)
    if len(cells) < n or not all(cells):
        raise _fail(lineno, f"expected {n} link cells after {label}", raw)
    for col, cell in zip(devices, cells, strict=True):
        if not _CELL_RE.match(cell):
            raise _fail(lineno, f"unknown link token {cell!r} in column {col}", raw)
        if (cell == "X") != (col == label):
            raise _fail(lineno, f"'X' must mark exactly the {label}/{label} cell", raw)
    if positional:
        fitted = _fit_affinity(aff_cells, n_affinity)
    else:
        fitted = aff_cells if len(aff_cells) <= n_affinity else None
    if fitted is None:
        raise _fail(lineno, f"more cells than the header's {n} devices and affinity columns", raw)
    return label, ["SYS" if c == "SOC" else c for c in cells], fitted


def _nic_legend(lines: Iterable[str]) -> dict[str, str]:
    """The ``NIC Legend:`` block after the matrix (``NIC0: mlx5_0``), up to its first other line."""
    nic_legend: dict[str, str] = {}
    in_legend = False
    for raw in lines:
        stripped = raw.strip()
        if stripped == "NIC Legend:":
            in_legend = True
        elif in_legend and stripped:
            m = _NIC_LEGEND_RE.match(raw)
            if not m:
                break
            nic_legend[m.group(1)] = m.group(2)
    return nic_legend


def parse_topo(text: str) -> Topology:
    """Parse ``nvidia-smi topo -m`` output (any driver generation) into a ``Topology``.

    Raises ``TopoParseError`` (a ``ValueError``) naming the 1-based line number and line text of
    the first line that cannot be read: no header, a row label that is not a header device, a
    wrong number of link cells, an unknown link token, ``X`` off the diagonal, or a GPU of the
    header without a row.
    """
    lines = text.splitlines()
    header_at = _header_index(lines)
    devices, aff_columns = _parse_header(_strip_ansi(lines[header_at]))
    if len(set(devices)) != len(devices):
        raise _fail(header_at + 1, "header names a device twice", lines[header_at])
    gpus = tuple(d for d in devices if _GPU_RE.match(d))
    nics = tuple(d for d in devices if not _GPU_RE.match(d))

    rows: dict[str, list[str]] = {}
    affinity: dict[str, dict[str, str]] = {key: {} for key in _AFFINITY_COLUMNS.values()}
    end = len(lines)
    for i in range(header_at + 1, len(lines)):
        clean = _strip_ansi(lines[i])
        if not clean.strip() or clean.strip().startswith("Legend"):
            end = i
            break
        label, link_cells, fitted = _matrix_row(lines[i], i + 1, devices, rows, len(aff_columns))
        rows[label] = link_cells
        if label in gpus:
            # A short row (space form, trailing cells lost) fills the first columns only.
            for column, value in zip(aff_columns, fitted, strict=False):
                if value:
                    affinity[_AFFINITY_COLUMNS[column]][label] = value

    for gpu in gpus:
        if gpu not in rows:
            raise _fail(
                header_at + 1,
                f"header lists {gpu} but the matrix has no row for it",
                lines[header_at],
            )

    index = {d: k for k, d in enumerate(devices)}
    return Topology(
        gpus=gpus,
        nics=nics,
        links={(a, b): rows[a][index[b]] for a in gpus for b in gpus if a != b},
        nic_links={(g, nic): rows[g][index[nic]] for g in gpus for nic in nics},
        cpu_affinity=affinity["cpu_affinity"],
        numa_affinity=affinity["numa_affinity"],
        gpu_numa_id=affinity["gpu_numa_id"],
        nic_legend=_nic_legend(lines[end:]),
    )


def to_json_dict(topo: Topology) -> dict:
    """The stored form: GPU-GPU links only, keys ``"GPU0,GPU1"``, every ordered pair."""
    return {
        "gpus": list(topo.gpus),
        "nics": list(topo.nics),
        "links": {f"{a},{b}": cls for (a, b), cls in topo.links.items()},
        "cpu_affinity": dict(topo.cpu_affinity),
        "numa_affinity": dict(topo.numa_affinity),
    }


def topology_fingerprint(topo: Topology) -> str:
    """Short stable hash of ``to_json_dict``: equal fingerprints mean the same matrix."""
    blob = json.dumps(to_json_dict(topo), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def link_sort_key(link: str) -> tuple[int, int]:
    """Sort key, smaller = faster: ``X`` < NV18 < NV2 < PIX < PXB < PHB < NODE < SYS < NET."""
    if link == "X":
        return (-1, 0)
    m = _NV_RE.match(link)
    if m:
        return (LINK_RANK.index("NV"), -int(m.group(1)))
    name = "SYS" if link == "SOC" else link
    if name not in LINK_RANK or name == "NV":
        raise ValueError(f"unknown link class {link!r}; expected NV<n> or one of {LINK_RANK[1:]}")
    return (LINK_RANK.index(name), 0)


def slowest_link(links: Iterable[str]) -> str:
    """The slowest of some link classes, e.g. ``slowest_link(["NV12", "SYS"]) == "SYS"``."""
    items = list(links)
    if not items:
        raise ValueError("slowest_link() needs at least one link class")
    return max(items, key=link_sort_key)


_PLACEMENTS = ("pack", "spread")


def run_link_class(
    topo_links: dict[tuple[str, str], str] | None, gpu_indices: list[int], placement: str
) -> str:
    """The link class a run's traffic had to cross: what a variant really measured.

    ``gpu_indices`` are the physical GPU indices the ranks used (``[0, 1]`` -> GPU0, GPU1).
    ``spread`` (one rank per node) crosses the network: ``"NET"``. ``pack`` (one node) crosses
    the slowest link between any two of its GPUs. One rank: ``"X"``. No topology (CPU run, no
    nvidia-smi) or a pair missing from it: ``"unknown"``.
    """
    if placement not in _PLACEMENTS:
        raise ValueError(f"placement {placement!r} is not one of {_PLACEMENTS}")
    if not gpu_indices:
        return "unknown"
    if len(gpu_indices) == 1:
        return "X"
    if placement == "spread":
        return "NET"
    if not topo_links:
        return "unknown"
    distinct = sorted(set(gpu_indices))
    pairs = [(f"GPU{a}", f"GPU{b}") for a in distinct for b in distinct if a != b]
    if not pairs:
        return "X"
    if any(p not in topo_links for p in pairs):
        return "unknown"
    return slowest_link(topo_links[p] for p in pairs)
