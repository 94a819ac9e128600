"""Number, size and time formatting: one place, so figures, tables and text agree.

Pure functions of plain values.

May import: nothing (the standard library only).

Units follow the schema's names: ``_s`` seconds, ``_bytes`` bytes (base 10: 1 MB = 1e6 B),
``_gbps`` GB/s with 1 GB = 1e9 B. Message sizes in the link microbenchmark are powers of two
and are labelled in KiB/MiB.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any


def sig3(x: float) -> str:
    """Three significant digits, trailing zeros kept so a column reads evenly (1.50, 1.02)."""
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:#.3g}".rstrip(".")


def scale_seconds(v: float) -> tuple[float, str]:
    if abs(v) < 1e-3:
        return 1e6, "µs"
    if abs(v) < 1:
        return 1e3, "ms"
    return 1.0, "s"


def fmt_seconds(v: float | None) -> str:
    """``90.8 ms``, ``1.50 s``: seconds in the unit that keeps three digits readable."""
    if v is None or not math.isfinite(v):
        return "–"
    if v == 0:
        return "0"
    scale, unit = scale_seconds(v)
    return f"{sig3(v * scale)} {unit}"


def tick_seconds(v: float, _pos: Any = None) -> str:
    """Axis ticks: like fmt_seconds but without padding zeros (``2 s``, not ``2.00 s``)."""
    if v <= 0:
        return "0"
    scale, unit = scale_seconds(v)
    return f"{v * scale:.3g} {unit}"


def fmt_time_ci(med: float | None, lo: float | None, hi: float | None) -> str:
    """``101 ms [99.8–103]``: the interval in the median's unit."""
    if med is None:
        return "–"
    scale, unit = scale_seconds(med)
    if lo is None or hi is None:
        return f"{sig3(med * scale)} {unit}"
    return f"{sig3(med * scale)} {unit} [{sig3(lo * scale)}–{sig3(hi * scale)}]"


def fmt_bytes(v: float | None) -> str:
    """Base-10 units (1 MB = 1e6 B), as everywhere in linksweep."""
    if v is None:
        return "–"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(v) >= scale:
            return f"{sig3(v / scale)} {unit}"
    return f"{v:.0f} B"


def fmt_msg_size(v: float) -> str:
    """Power-of-two message sizes: 1 KiB, 4 MiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if v >= scale:
            return f"{v / scale:g} {unit}"
    return f"{v:g} B"


def fmt_value(col: str, v: Any) -> str:
    """A cell, formatted by its column's unit suffix."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    if isinstance(v, (int, float)) and ("bytes" in col):
        return fmt_bytes(float(v))
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if (col.endswith("_s") and not col.endswith("_per_s")) or col.endswith("_s_per_step"):
            return fmt_seconds(v)
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10000 else str(v)
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True, default=str)
    return str(v)


def first_text_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0].strip() if lines else ""
