"""nccl-tests' ``-J`` JSON output -> rows (pure), and :func:`parse`, the importer's entry: text
or JSON, told apart by the first character. The JSON half of ``orchestrator/compare/nccltests.py``,
whose docstring describes the format (src/util.cu, ``JSON_FILE_VERSION`` 1 to 3) and the rules
both halves share (op from the binary, world size, the busbw factor check).

May import: nccltests.
"""

from __future__ import annotations

import json

from orchestrator.compare.nccltests import (
    BINARY_RE,
    NcclTestsError,
    NcclTestsRow,
    NcclTestsRun,
    agree_world_size,
    canonical_op_or_error,
    checked_world_size,
    op_from_binary,
    parse_text,
)


def parse(text: str, op: str | None = None, world_size: int | None = None) -> NcclTestsRun:
    """Text or JSON, told apart by the first non-blank character."""
    if text.lstrip().startswith("{"):
        return parse_json(text, op=op, world_size=world_size)
    return parse_text(text, op=op, world_size=world_size)


# --- JSON (-J) --------------------------------------------------------------------------------
def _json_number(value, what: str, where: str) -> float | None:
    if value is None or value == "nan":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NcclTestsError(f"{where}: {what} {value!r} is not a number")
    return float(value)


def _json_op(args: list, op: str | None) -> tuple[str, str]:
    """The op from the binary in ``args`` (argv), else ``--op``; refused where they disagree."""
    binary = next((a for a in args[:1] if isinstance(a, str) and BINARY_RE.search(a)), None)
    if binary is not None:
        the_op = op_from_binary(binary.rsplit("/", 1)[-1])
        if op is not None and canonical_op_or_error(op) != the_op:
            raise NcclTestsError(f"the file ran {binary}; --op says {op}")
        return the_op, "json args"
    if op is not None:
        return canonical_op_or_error(op), "--op"
    raise NcclTestsError("the JSON's args name no *_perf binary; pass --op")


def _json_rows(results: list, the_op: str) -> tuple[list[NcclTestsRow], bool]:
    """Each result's out-of-place and in-place figures as rows, and whether any time was
    ``cpu_time`` (``-C 1``)."""
    rows: list[NcclTestsRow] = []
    seen: dict[tuple, int] = {}
    cputime = False
    for i, res in enumerate(results):
        where = f"results[{i}]"
        if not isinstance(res, dict) or "size" not in res:
            raise NcclTestsError(f"{where}: not a result object with a size")
        root = str(res.get("root", "")).strip()
        redop = res.get("redop")
        for in_place, key in ((False, "out_of_place"), (True, "in_place")):
            part = res.get(key)
            if part is None:
                continue
            cputime = cputime or "cpu_time" in part
            wrong = _json_number(part.get("nwrong"), "nwrong", where)
            k = (the_op, int(res["size"]), in_place)
            rows.append(
                NcclTestsRow(
                    op=the_op,
                    msg_bytes=int(res["size"]),
                    count=int(res.get("count") or 0),
                    dtype=str(res.get("type") or ""),
                    redop=None if redop in (None, "", "none") else str(redop),
                    root=None if root in ("", "-1") else int(root),
                    in_place=in_place,
                    time_us=_json_number(part.get("time", part.get("cpu_time")), "time", where),
                    algbw_gbps=_json_number(part.get("alg_bw"), "alg_bw", where),
                    busbw_gbps=_json_number(part.get("bus_bw"), "bus_bw", where),
                    wrong=None if wrong is None else int(wrong),
                    max_error=None,
                    line=i,
                    repeat=seen.get(k, 0),
                )
            )
            seen[k] = seen.get(k, 0) + 1
    return rows, cputime


def _json_avg_busbw(doc: dict) -> object:
    """``average_bus_bandwidth.bandwidth`` as written (spelt ``bandwidith`` before 85ca91d)."""
    avg_obj = doc.get("average_bus_bandwidth") or doc.get("average_bus_bandwidith") or {}
    return (
        avg_obj.get("bandwidth", avg_obj.get("bandwidith")) if isinstance(avg_obj, dict) else None
    )


def parse_json(text: str, op: str | None = None, world_size: int | None = None) -> NcclTestsRun:
    """nccl-tests' ``-J`` JSON -> rows (same rules as :func:`parse_text`)."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise NcclTestsError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise NcclTestsError("JSON without a 'results' list: not an nccl-tests -J file")
    the_op, op_source = _json_op(doc.get("args") or [], op)
    config = doc.get("config") or {}
    devices = config.get("devices") or []
    per_process = int(config.get("nthreads") or 1) * int(config.get("ngpus") or 1)
    world, world_src = world_size, "--world-size" if world_size else None
    if devices:
        world, world_src = agree_world_size(world_size, len(devices) * per_process, "json devices")
    rows, cputime = _json_rows(doc["results"], the_op)
    if not rows:
        raise NcclTestsError("the JSON's 'results' list holds no measurements")
    oob = (doc.get("out_of_bounds") or {}).get("count")
    nccl = doc.get("nccl_version")
    device_dicts = [d for d in devices if isinstance(d, dict)]
    run = NcclTestsRun(
        rows=tuple(rows),
        layout="json",
        op_source=op_source,
        world_size=world,
        world_size_source=world_src,
        hosts=tuple(dict.fromkeys(str(d.get("hostname")) for d in device_dicts)),
        gpus=tuple(dict.fromkeys(str(d.get("device_info")) for d in device_dicts)),
        avg_busbw_gbps=_json_number(
            _json_avg_busbw(doc), "average bus bandwidth", "average_bus_bandwidth"
        ),
        out_of_bounds=None if oob is None else int(oob),
        nccl_tests_version=None,
        nccl_version=None if nccl is None else str(nccl),
        time_kind="cputime" if cputime else "time",
    )
    return checked_world_size(run)
