"""Every rank's trace on rank 0's clock: rebased per-rank traces, and one merged trace. Pure.

A torch 2.13 Chrome trace puts each event at ``ts`` microseconds after the trace's
``baseTimeNanoseconds``; ts + base is the rank's own wall clock (CLOCK_REALTIME). The rank also
measured its clock's offset to rank 0's (``workloads/clocks.py``: its clock minus rank 0's, within
an uncertainty). So an event of rank r is at ``ts + base_r - offset_r`` nanoseconds on rank 0's
clock, and written against one common base (rank 0's) its timestamp is

    ts' = ts + (base_r - offset_r - base_0) / 1000   (microseconds)

:func:`rebase` gives one rank's trace so: every event's ``ts`` shifted, ``baseTimeNanoseconds``
the common base, ``distributedInfo.rank`` set and first in the file (Meta's Holistic Trace
Analysis finds a file's rank by the first ``"rank": N`` it reads, and puts ranks on one axis by
subtracting the smallest ts of all: it assumes the files share a clock, which rebased ones do).
The shift is a whole number of nanoseconds: exact on ``Decimal`` timestamps (as
``trace_overlap.load_trace`` parses them), and within 1 ns on floats below 8e12 us (torch's
trimonth base keeps ts below that: a double's step there is 0.001 us). :func:`dumps` writes a
trace with Decimal timestamps as JSON numbers.

:func:`merge` lays the rebased traces in one file Perfetto and chrome://tracing load: each rank is
one process (``pid`` = rank, named ``rank r``); its threads keep their ids, and the tracks of the
rank's other processes in its trace (its GPUs' streams) become threads of the rank's process,
named after the original (``GPU 0 stream 7``) with ids above the rank's thread ids. Flow ids
(Kineto's launch-to-kernel arrows) are moved into a range of their own per rank, so an arrow
never joins two ranks. Each rank's events are sorted by ts; metadata comes first.

The offset's uncertainty is not in the timestamps: two ranks' events closer than the sum of
their uncertainties are not ordered by the merged file (``docs/trace-overlap.md``).

May import: nothing.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

FLOW_PHASES = ("s", "t", "f")
FLOW_ID_SPAN = 1 << 40
"""Each rank's flow ids are moved to ``rank * FLOW_ID_SPAN + id``: Kineto's are correlation ids,
far below 2^40."""


def base_time_ns(doc: Mapping[str, Any]) -> int:
    """The trace's ``baseTimeNanoseconds``; 0 where it has none (a trace whose ts are already
    absolute microseconds, as torch before the trimonth base wrote them)."""
    return int(doc.get("baseTimeNanoseconds") or 0)


def shift_ns(base_ns: int, offset_ns: int, common_base_ns: int) -> int:
    """What a rank's ts moves by, in nanoseconds, to be on rank 0's clock after ``common_base_ns``."""
    return base_ns - offset_ns - common_base_ns


def rebase(
    doc: Mapping[str, Any], rank: int, offset_ns: int, common_base_ns: int, world_size: int
) -> dict:
    """One rank's trace with every event on rank 0's clock after ``common_base_ns``
    (module docstring); a new dict, ``doc`` unchanged."""
    shift = shift_ns(base_time_ns(doc), offset_ns, common_base_ns)
    events = [_shifted(e, shift) for e in doc.get("traceEvents", [])]
    info = {**(doc.get("distributedInfo") or {}), "rank": rank, "world_size": world_size}
    rest = {k: v for k, v in doc.items() if k not in ("distributedInfo", "traceEvents")}
    return {
        "distributedInfo": info,
        **rest,
        "baseTimeNanoseconds": common_base_ns,
        "linksweepClock": {"offset_ns": offset_ns, "original_base_ns": base_time_ns(doc)},
        "traceEvents": events,
    }


def _shifted(e: dict, shift: int) -> dict:
    """``e`` with its ts moved by ``shift`` ns: exactly where the ts is a Decimal (as
    ``trace_overlap.load_trace`` parses), else as a float."""
    ts = e.get("ts")
    if ts is None or not shift:
        return dict(e)
    if isinstance(ts, Decimal):
        return {**e, "ts": ts + Decimal(shift) / 1000}
    return {**e, "ts": float(ts) + shift / 1000}


def merge(rebased: Mapping[int, Mapping[str, Any]]) -> dict:
    """One trace of every rank (module docstring), from each rank's :func:`rebase`'d trace."""
    ranks = sorted(rebased)
    events: list[dict] = []
    for rank in ranks:
        events += rank_events(rank, rebased[rank].get("traceEvents", []))
    first = rebased[ranks[0]] if ranks else {}
    return {
        "schemaVersion": 1,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": base_time_ns(first),
        "linksweepMerged": {
            "ranks": ranks,
            "offset_ns": {
                str(r): rebased[r].get("linksweepClock", {}).get("offset_ns") for r in ranks
            },
        },
        "traceEvents": events,
    }


def host_pid(events: list[dict]) -> Any:
    """The rank's own process in its trace: the one torch labels ``CPU``, else the one with the
    most ``cpu_op`` events, else the one with the most events."""
    for e in events:
        meta = e.get("ph") == "M" and e.get("name") == "process_labels"
        if meta and (e.get("args") or {}).get("labels") == "CPU":
            return e.get("pid")
    ops = Counter(e.get("pid") for e in events if e.get("cat") == "cpu_op")
    counts = ops or Counter(e.get("pid") for e in events if e.get("ph") != "M")
    return counts.most_common(1)[0][0] if counts else None


def rank_events(rank: int, events: list[dict]) -> list[dict]:
    """One rank's events for the merged trace: its process and thread names first, then every
    other event with ``pid`` = rank and its thread mapped (:func:`merge`), sorted by ts."""
    host = host_pid(events)
    labels = _process_labels(events)
    names = {
        (e.get("pid"), e.get("tid")): (e.get("args") or {}).get("name")
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    tids = _thread_ids(host, events)
    meta = [
        _meta("process_name", rank, 0, {"name": f"rank {rank}"}),
        _meta("process_sort_index", rank, 0, {"sort_index": rank}),
    ]
    for (pid, tid), new in sorted(tids.items(), key=lambda kv: kv[1]):
        name = names.get((pid, tid)) or f"thread {tid}"
        if pid != host:
            name = f"{labels.get(pid, f'process {pid}')} {name}".strip()
        meta.append(_meta("thread_name", rank, new, {"name": name}))
    out = []
    for e in events:
        if e.get("ph") == "M":
            continue
        moved = {**e, "pid": rank, "tid": tids.get((e.get("pid"), e.get("tid")), e.get("tid"))}
        if e.get("ph") in FLOW_PHASES and isinstance(e.get("id"), int):
            moved["id"] = rank * FLOW_ID_SPAN + e["id"]
        out.append(moved)
    out.sort(key=lambda e: float(e.get("ts", 0)))
    return meta + out


def _process_labels(events: list[dict]) -> dict:
    """pid -> how the trace labels it (``GPU 0``, ``CPU``), else its process name."""
    out: dict = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") in ("process_labels", "process_name"):
            args = e.get("args") or {}
            label = args.get("labels") or args.get("name")
            if label and (e.get("name") == "process_labels" or e.get("pid") not in out):
                out[e.get("pid")] = str(label)
    return out


def dumps(doc: Mapping[str, Any]) -> bytes:
    """``doc`` as gzip-compressed JSON, Decimals as numbers. The separators keep a space after
    each colon: Holistic Trace Analysis finds a file's rank with ``"rank":\\s+(\\d+)``."""
    text = json.dumps(doc, default=_number)
    return gzip.compress(text.encode(), compresslevel=6)


def _number(o):
    if isinstance(o, Decimal):
        return float(o) if o != o.to_integral_value() else int(o)
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def _thread_ids(host, events: list[dict]) -> dict[tuple, Any]:
    """(pid, tid) -> the thread id in the rank's process: the host's threads keep theirs; every
    other process's tracks get ids above the host's largest, in order of appearance."""
    keys = list(dict.fromkeys((e.get("pid"), e.get("tid")) for e in events if e.get("ph") != "M"))
    own = [tid for pid, tid in keys if pid == host and isinstance(tid, int)]
    nxt = max(own, default=0) + 1
    out = {}
    for pid, tid in keys:
        if pid == host:
            out[(pid, tid)] = tid
        else:
            out[(pid, tid)], nxt = nxt, nxt + 1
    return out


def _meta(name: str, pid: int, tid, args: dict) -> dict:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "ts": 0, "args": args}
