"""nccl-tests output -> rows: the parser behind ``linksweep import nccl-tests`` (pure; no I/O).

One job: reading one nccl-tests output (its table, the facts around it, the collective it
measured) into rows.

Reads what ``all_reduce_perf`` and its siblings print (text) or write with ``-J`` (JSON), so
their figures can sit beside linksweep's own busbw in ``link_bench`` (``source='nccl-tests'``).
Every figure is nccl-tests' own: busbw, algbw and time are the printed cells (or the JSON's
numbers), never recomputed. Units as nccl-tests prints them: time in microseconds, bandwidths in
GB/s (1e9 B/s, src/*.cu ``/ 1.0E9 / sec``), size in bytes ("size" column = the whole buffer:
all_reduce's buffer, all_gather's output, reduce_scatter's input; src/common.cu
``max(sendBytes, expectedBytes)``), the same convention as linksweep's microbenchmark.

Text layouts, read from the column header so every version parses the same way
(NVIDIA/nccl-tests src/common.cu and src/util.cu, read at each layout's commit):

- 2.13 and later: ``size count type redop root`` then ``time algbw busbw #wrong`` out-of-place
  and again in-place; ``redop`` is ``none`` and ``root`` is ``-1`` where they do not apply.
- before 2.13 (commit 51af557): no ``root`` column except on rooted ops (broadcast has ``root``
  and no ``redop``; all_gather neither), and ``error`` instead of ``#wrong``: the largest
  deviation from the expected values (``0e+00``), not a count; kept as ``max_error``.
- ``N/A`` in ``#wrong``/``error`` when validation is off (``-c 0``); a blank ``redop`` cell
  (old alltoall) is read as no redop. ``-C 1`` names the time column ``cputime``; ``-S 1`` adds
  a timestamp and ``-I 1`` per-iteration columns, both ignored.
- Lines may carry a launcher's prefix (``[1,0]<stdout>:`` from mpirun --tag-output, ``0: `` from
  srun -l, ``rank 0:``) and indentation; NCCL INFO lines may interleave with the table.
- A table whose header was cut off (``kubectl logs --tail``) is read as the 2.13+ layout when
  its rows have that layout's 13 cells (noted in ``NcclTestsRun.notes``).
- Around the table: ``#  Rank  0 Group  0 Pid ... on HOST device 0 [...] GPU`` banners (the
  world size and hosts), ``# Avg bus bandwidth : X`` and ``# Out of bounds values : N``.

Which collective a table measured: ``# Collective test starting: all_reduce_perf`` (nccl-tests
2.17.4+; a ``concluded`` line after the table names it too), else the binary named in the file
before the table (a command line such as ``mpirun ... ./build/all_reduce_perf -b 8``), else what
the table itself allows (:func:`infer_op`: the redop and root columns, size against count, the
unchecked in-place result of alltoall, the bus factor); ``--op`` only where several ops remain.
A file that names or allows one op while ``--op`` says another is refused, naming both.

Rank banners give the world size only when they run 0..n-1 without a gap (an excerpt may keep
only ``Rank 127``); otherwise the bus factor does.

JSON (``-J FILE.json``, nccl-tests 2.17.4+; src/util.cu ``JSON_FILE_VERSION`` 1 to 3): ``args``
(argv: the binary, hence the op), ``config`` (nthreads, ngpus, devices: one entry per process),
``results`` (size, count, type, redop, root as a padded string, ``out_of_place``/``in_place``
objects with ``time`` or ``cpu_time``, ``alg_bw``, ``bus_bw``, ``nwrong``: null without
validation), ``average_bus_bandwidth.bandwidth`` (spelt ``average_bus_bandwidith``/
``bandwidith`` before commit 85ca91d), ``out_of_bounds.count``. Booleans are written as the
strings "true"/"false" and NaN as "nan".

Errors: :class:`NcclTestsError`, whose message names the line (text) or the result (JSON).

May import: orchestrator.analysis.comm_model, workloads.contract.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from orchestrator.analysis.comm_model import busbw_factor
from workloads.contract import CANONICAL_OPS, canonical_op

BINARIES = (
    "all_reduce", "all_gather", "reduce_scatter", "alltoall", "alltoallv", "broadcast", "reduce",
    "sendrecv", "gather", "scatter", "hypercube",
)  # fmt: skip
"""nccl-tests' binaries (``<name>_perf``); those outside ``workloads.contract.CANONICAL_OPS``
(sendrecv, gather, scatter, hypercube, alltoallv) are refused: linksweep measures none of them."""

_PREFIX = re.compile(r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:|\d+:(?=\s|$)|rank\s*\d+\s*:)", re.I)
BINARY_RE = re.compile(
    r"(?<![A-Za-z0-9_])(" + "|".join(sorted(BINARIES, key=len, reverse=True)) + r")_perf"
)
_STARTING = re.compile(r"#\s*Collective test (?:starting|concluded):\s*(\S+)")
_BANNER = re.compile(
    r"#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s*(.*)"
)
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(\S+)")
_OOB = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)")
_VERSION = re.compile(r"#\s*(?:nccl|rccl)-tests version\s+(\S+)")
_NCCL_VERSION = re.compile(r"NCCL version\s+(\S+)|nccl-library=(\d+)")
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d$|^\d\d:\d\d:\d\d$")
_TIME_COLS = ("time", "cputime")
_NA = "N/A"


class NcclTestsError(ValueError):
    """The text is not nccl-tests output as this parser knows it; the message names the line."""


@dataclass(frozen=True)
class NcclTestsRow:
    """One table cell group: an (op, size) measured out-of-place or in-place."""

    op: str  # canonical collective name (workloads.contract.CANONICAL_OPS)
    msg_bytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    in_place: bool
    time_us: float | None  # nccl-tests' time column (us); cputime with -C 1
    algbw_gbps: float | None
    busbw_gbps: float | None
    wrong: int | None  # '#wrong' count; None when N/A or in the old layout
    max_error: float | None  # the old layout's 'error' column (largest deviation)
    line: int  # 1-based line of the text (JSON: the result's index)
    repeat: int = 0  # how many earlier rows had the same op, size and placement


@dataclass(frozen=True)
class NcclTestsRun:
    """What one file says: its rows and the facts printed around them."""

    rows: tuple[NcclTestsRow, ...]
    layout: str  # '#wrong' (2.13+) | 'error' (before 2.13) | 'json'
    op_source: str  # 'Collective test starting' | 'binary name' | '--op' | 'json args'
    world_size: int | None
    world_size_source: (
        str | None
    )  # 'rank banners' | 'json devices' | '--world-size' | 'busbw/algbw'
    hosts: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    avg_busbw_gbps: float | None = None
    out_of_bounds: int | None = None
    nccl_tests_version: str | None = None
    nccl_version: str | None = None
    time_kind: str = "time"  # 'time' | 'cputime' (-C 1)
    notes: tuple[str, ...] = field(default=())

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.op for r in self.rows))


def op_from_binary(name: str) -> str:
    """``all_reduce_perf`` / ``all_reduce_perf_mpi`` / ``all_reduce`` -> ``all_reduce``;
    NcclTestsError for a binary linksweep does not measure."""
    m = BINARY_RE.search(name + ("" if "_perf" in name else "_perf"))
    base = m.group(1) if m else name
    try:
        return canonical_op(base)
    except ValueError:
        raise NcclTestsError(
            f"{name}: linksweep stores all_reduce, all_gather, reduce_scatter, alltoall, "
            "broadcast and reduce; not this one"
        ) from None


def _number(cell: str, what: str, where: str) -> float | None:
    if cell == _NA:
        return None
    try:
        value = float(cell)
    except ValueError:
        raise NcclTestsError(f"{where}: {what} {cell!r} is not a number") from None
    return None if math.isnan(value) else value


@dataclass
class _Header:
    line: int
    keys: list[str]  # columns before the first time column (size, count, type, ...)
    group: list[str]  # one placement's columns: time algbw busbw #wrong [i_min ...]
    timestamp: bool
    op: str | None
    op_source: str | None


def _header(tokens: list[str], line: int) -> _Header | None:
    """The column-name header line (``#  size  count  type  redop  root  time ...``), or None."""
    if "size" not in tokens or "busbw" not in tokens:
        return None
    starts = [i for i, t in enumerate(tokens) if t in _TIME_COLS]
    if len(starts) != 2:
        raise NcclTestsError(
            f"line {line}: the column header has {len(starts)} time columns; expected two "
            "(out-of-place, then in-place)"
        )
    keys, group = tokens[: starts[0]], tokens[starts[0] : starts[1]]
    rest = tokens[starts[1] :]
    if keys[:3] != ["size", "count", "type"] or rest[: len(group)] != group:
        raise NcclTestsError(f"line {line}: unknown column header {' '.join(tokens)!r}")
    if "busbw" not in group or not ({"#wrong", "error"} & set(group)):
        raise NcclTestsError(f"line {line}: the column header names no busbw or #wrong/error")
    return _Header(line, keys, group, "timestamp" in rest[len(group) :], None, None)


def _row_cells(h: _Header, tokens: list[str], where: str) -> tuple[dict, list[str], list[str]]:
    """Key cells by column name, then the out-of-place and in-place cells."""
    if h.timestamp and len(tokens) >= 2 and all(_TIMESTAMP.match(t) for t in tokens[-2:]):
        tokens = tokens[:-2]
    width = len(h.group)
    middle = tokens[3 : len(tokens) - 2 * width]
    extra = h.keys[3:]
    if len(tokens) < 3 + 2 * width or len(middle) > len(extra):
        raise NcclTestsError(
            f"{where}: {len(tokens)} cells; the header at line {h.line} has "
            f"{len(h.keys) + 2 * width} columns ({' '.join(h.keys)} + 2 x {' '.join(h.group)})"
        )
    keys = dict(zip(("size", "count", "type"), tokens[:3], strict=True))
    if len(middle) == len(extra):
        keys.update(zip(extra, middle, strict=True))
    else:  # a blank cell (old alltoall prints an empty redop): place what is there by its kind
        for cell in middle:
            name = "root" if re.fullmatch(r"-?\d+", cell) and "root" in extra else "redop"
            keys[name] = cell
    cells = tokens[len(tokens) - 2 * width :]
    return keys, cells[:width], cells[width:]


def _placement(h: _Header, cells: list[str], where: str) -> dict:
    named = dict(zip(h.group, cells, strict=True))
    time_col = next(c for c in h.group if c in _TIME_COLS)
    out = {
        "time_us": _number(named[time_col], "time", where),
        "algbw_gbps": _number(named["algbw"], "algbw", where),
        "busbw_gbps": _number(named["busbw"], "busbw", where),
        "wrong": None,
        "max_error": None,
    }
    if "#wrong" in named:
        wrong = _number(named["#wrong"], "#wrong", where)
        out["wrong"] = None if wrong is None else int(wrong)
    else:
        out["max_error"] = _number(named["error"], "error", where)
    return out


def _inference_cells(h: _Header, n: int, keys: dict, oop: list[str], inp: list[str]) -> dict:
    """A row as :func:`infer_op` reads it: key cells, out-of-place figures, both check cells."""
    named, where = dict(zip(h.group, oop, strict=True)), f"line {n}"
    check = "#wrong" if "#wrong" in h.group else "error"
    return {
        **keys,
        "algbw": _number(named["algbw"], "algbw", where),
        "busbw": _number(named["busbw"], "busbw", where),
        "oop_wrong": named[check],
        "ip_wrong": dict(zip(h.group, inp, strict=True))[check],
    }


_LAYOUT_2_13 = (
    "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
    "busbw", "#wrong",
)  # fmt: skip


def _headless_row(tokens: list[str]) -> bool:
    """A row of the 2.13+ layout with no header above it: 13 cells, whole size and count, a
    type nccl-tests names, a whole root. Read with that layout's columns."""
    return (
        len(tokens) == len(_LAYOUT_2_13)
        and tokens[0].isdigit()
        and tokens[1].isdigit()
        and tokens[2] in _TYPE_BYTES
        and re.fullmatch(r"-?\d+", tokens[4]) is not None
    )


def _op_hint(line: str) -> tuple[str, str] | None:
    m = _STARTING.search(line)
    if m:
        return m.group(1), "Collective test starting"
    names = {m.group(1) for m in BINARY_RE.finditer(line)}
    if len(names) == 1:
        return names.pop() + "_perf", "binary name"
    return None


@dataclass(frozen=True)
class _TableRow:
    """One printed row of a table, split into cells but not yet read as numbers."""

    header: _Header
    line: int
    keys: dict  # size, count, type, redop, root as printed
    out_of_place: list[str]
    in_place: list[str]


@dataclass
class _Scan:
    """What one pass over the text found: the tables, their rows and the facts around them."""

    headers: list[_Header] = field(default_factory=list)
    rows: list[_TableRow] = field(default_factory=list)
    ranks: dict[int, tuple[str, str]] = field(default_factory=dict)  # rank -> (host, GPU)
    avg_busbw_gbps: float | None = None
    out_of_bounds: int | None = None
    nccl_tests_version: str | None = None
    nccl_version: str | None = None
    op_hint: tuple[str, str] | None = (
        None  # (binary, source): the op named last, for the next table
    )
    headless: bool = False  # the first table's header was cut off

    def open_table(self, h: _Header) -> None:
        h.op, h.op_source = self.op_hint if self.op_hint else (None, None)
        self.headers.append(h)

    @property
    def ranks_complete(self) -> bool:
        """Banners with a gap (an excerpt kept only some) count ranks they do not show."""
        return sorted(self.ranks) == list(range(len(self.ranks)))


def _scan_comment(line: str, n: int, scan: _Scan) -> None:
    """A ``#`` line: a table's column header, a rank banner, a summary figure, a version, or the
    ``Collective test starting/concluded`` line naming the op."""
    h = _header(line.lstrip("#").split(), n)
    if h is not None:
        scan.open_table(h)
    elif (m := _BANNER.match(line)) is not None:
        scan.ranks[int(m.group(1))] = (m.group(2), m.group(3).strip())
    elif (m := _AVG.match(line)) is not None:
        scan.avg_busbw_gbps = _number(m.group(1), "Avg bus bandwidth", f"line {n}")
    elif (m := _OOB.match(line)) is not None:
        scan.out_of_bounds = int(m.group(1))
    elif (m := _VERSION.match(line)) is not None:
        scan.nccl_tests_version = m.group(1)
    elif (found := _op_hint(line)) is not None and found[1] == "Collective test starting":
        if "concluded" in line:  # names the table above it (the start may be cut off)
            if scan.headers and scan.headers[-1].op is None:
                scan.headers[-1].op, scan.headers[-1].op_source = found
        else:
            scan.op_hint = found


def _scan_line(line: str, n: int, scan: _Scan) -> None:
    """Any other line: a table row, or a line naming the NCCL version or the binary run."""
    tokens = line.split()
    if not scan.headers and _headless_row(tokens):  # header cut off (``tail``)
        scan.open_table(_header(list(_LAYOUT_2_13), n))
        scan.headless = True
    if scan.headers and len(tokens) > 3 and tokens[0].isdigit() and tokens[1].isdigit():
        keys, oop, inp = _row_cells(scan.headers[-1], tokens, f"line {n}")
        scan.rows.append(_TableRow(scan.headers[-1], n, keys, oop, inp))
        return
    if (m := _NCCL_VERSION.search(line)) is not None and scan.nccl_version is None:
        scan.nccl_version = m.group(1) or m.group(2)
    if (found := _op_hint(line)) is not None and "NCCL INFO" not in line:
        scan.op_hint = found


def _scan(text: str) -> _Scan:
    """Every line once, launcher prefixes stripped; NcclTestsError without a table or rows."""
    scan = _Scan()
    for n, full in enumerate(text.splitlines(), start=1):
        line = _PREFIX.sub("", full, count=1).strip()
        if line.startswith("#"):
            _scan_comment(line, n, scan)
        elif line:
            _scan_line(line, n, scan)
    if not scan.headers:
        raise NcclTestsError(
            "no nccl-tests table: expected a header line such as '#  size  count  type  redop  "
            "root  time  algbw  busbw  #wrong ...' (an nccl-tests *_perf output)"
        )
    if not scan.rows:
        raise NcclTestsError(f"line {scan.headers[-1].line}: a table header but no rows under it")
    return scan


def _named_op(h: _Header, op: str | None) -> tuple[str, str]:
    """The op the file names for this table; NcclTestsError where ``--op`` says another."""
    found = op_from_binary(h.op)
    if op is not None and canonical_op_or_error(op) != found:
        raise NcclTestsError(
            f"line {h.line}: the file names {h.op} ({h.op_source}); --op says {op}"
        )
    return found, h.op_source or ""


def _inferred_op(h: _Header, inferred: OpInference, op: str | None) -> tuple[str, str]:
    """The op a table that names none measured: ``--op`` where the table allows it, else the one
    op its columns and figures leave; NcclTestsError otherwise."""
    why = "; ".join(inferred.reasons) or "no redop, root or bus factor to go by"
    if op is not None:
        given = canonical_op_or_error(op)
        if given not in inferred.ops:
            left = ", ".join(inferred.ops) or "no collective"
            raise NcclTestsError(f"line {h.line}: --op {op}, but the table fits {left} ({why})")
        return given, "--op"
    if inferred.op is not None:
        return inferred.op, "columns and figures"
    left = " and ".join(inferred.ops) or "no collective"
    raise NcclTestsError(
        f"line {h.line}: the file does not name its collective (no '# Collective test "
        f"starting: X_perf' line, no X_perf command line) and its table fits {left} "
        f"({why}); pass --op"
    )


def _table_ops(scan: _Scan, op: str | None, world_size: int | None) -> dict[int, tuple[str, str]]:
    """Each table's op and where it came from, by its header's line."""
    ops: dict[int, tuple[str, str]] = {}
    for h in scan.headers:
        if h.op is not None:
            ops[h.line] = _named_op(h, op)
            continue
        table = [
            _inference_cells(h, r.line, r.keys, r.out_of_place, r.in_place)
            for r in scan.rows
            if r.header is h
        ]
        # a --world-size at odds with the figures is refused below, naming both counts
        known = (
            len(scan.ranks) if scan.ranks and scan.ranks_complete else None if op else world_size
        )
        ops[h.line] = _inferred_op(h, infer_op(h.keys, table, known), op)
    return ops


def _text_rows(table_rows: list[_TableRow], ops: dict[int, tuple[str, str]]) -> list[NcclTestsRow]:
    """Each printed row as two rows (out-of-place, in-place), counting repeats of a size."""
    rows: list[NcclTestsRow] = []
    seen: dict[tuple, int] = {}
    for r in table_rows:
        the_op = ops[r.header.line][0]
        size = int(r.keys["size"])
        redop, root = r.keys.get("redop"), r.keys.get("root")
        for in_place, cells in ((False, r.out_of_place), (True, r.in_place)):
            values = _placement(r.header, cells, f"line {r.line}")
            k = (the_op, size, in_place)
            rows.append(
                NcclTestsRow(
                    op=the_op,
                    msg_bytes=size,
                    count=int(r.keys["count"]),
                    dtype=r.keys["type"],
                    redop=None if redop in (None, "none") else redop,
                    root=None if root in (None, "-1") else int(root),
                    in_place=in_place,
                    line=r.line,
                    repeat=seen.get(k, 0),
                    **values,
                )
            )
            seen[k] = seen.get(k, 0) + 1
    return rows


def parse_text(text: str, op: str | None = None, world_size: int | None = None) -> NcclTestsRun:
    """nccl-tests' printed output -> rows; ``op``/``world_size``: what the caller knows (``--op``,
    ``--world-size``) where the text does not say. NcclTestsError names the offending line."""
    scan = _scan(text)
    ops = _table_ops(scan, op, world_size)
    rows = _text_rows(scan.rows, ops)
    first = scan.headers[0]
    world, world_src = world_size, "--world-size" if world_size else None
    if scan.ranks and scan.ranks_complete:
        world, world_src = agree_world_size(world_size, len(scan.ranks), "rank banners")
    run = NcclTestsRun(
        rows=tuple(rows),
        layout="#wrong" if "#wrong" in first.group else "error",
        op_source=", ".join(sorted({source for _, source in ops.values()})),
        world_size=world,
        world_size_source=world_src,
        hosts=tuple(dict.fromkeys(host for host, _ in scan.ranks.values())),
        gpus=tuple(dict.fromkeys(gpu for _, gpu in scan.ranks.values())),
        avg_busbw_gbps=scan.avg_busbw_gbps,
        out_of_bounds=scan.out_of_bounds,
        nccl_tests_version=scan.nccl_tests_version,
        nccl_version=scan.nccl_version,
        time_kind="cputime" if "cputime" in first.group else "time",
        notes=("no column header: read as the 2.13+ layout",) if scan.headless else (),
    )
    return checked_world_size(run)


# --- which collective, from the table itself ------------------------------------------------
_GATHER_LIKE = ("all_gather", "reduce_scatter", "all_to_all")
_TYPE_BYTES = {
    "int8": 1, "uint8": 1, "f8e4m3": 1, "f8e5m2": 1, "half": 2, "bfloat16": 2, "int32": 4,
    "uint32": 4, "float": 4, "int64": 8, "uint64": 8, "double": 8,
}  # fmt: skip
"""nccl-tests' type names (src/common.cu ``test_typenames``) and their sizes."""


@dataclass(frozen=True)
class OpInference:
    """What the table's own columns and figures leave possible (canonical names), and why."""

    ops: tuple[str, ...]
    reasons: tuple[str, ...]

    @property
    def op(self) -> str | None:
        return self.ops[0] if len(self.ops) == 1 else None


def _fits(op: str, n: int | None, figures: list[tuple[float, float]]) -> bool:
    """busbw/algbw of every figure is the op's bus factor at n ranks; where n is None, at the n
    the largest decisive figure implies, else within the factor's range over all n >= 2."""
    if n is None and op not in ("broadcast", "reduce"):
        implied = [m for a, b in sorted(figures) if (m := implied_world_size(op, a, b)) is not None]
        if implied:
            n = implied[-1]
        else:
            low, high = (1.0, 2.0) if op == "all_reduce" else (0.5, 1.0)
            return all(low - 0.02 <= b / a <= high + 0.02 for a, b in figures)
    factor = 1.0 if n is None else busbw_factor(op, n)
    return all(abs(b - a * factor) <= 0.015 + 2e-4 * b for a, b in figures)


def infer_op(columns: list[str], cells: list[dict], world_size: int | None = None) -> OpInference:
    """The collectives a table's columns and figures allow. ``columns``: the header's key columns
    (``size count type [redop] [root]``); ``cells``: one dict per row with those keys as printed
    (a blank redop cell absent) and ``algbw``, ``busbw``, ``oop_wrong``, ``ip_wrong`` (the
    out-of-place figures and both #wrong/error cells as printed). Pure.

    What nccl-tests prints (src/*.cu ``print_line_header``, ``*GetBw``, ``*InitData``): 2.13+
    prints redop and root for every op, ``none`` where no reduction is done (all_gather,
    alltoall, broadcast) and root ``-1`` where there is no root (all but broadcast and reduce);
    before 2.13 all_gather and broadcast print no redop column, alltoall a blank one, and only
    broadcast and reduce a root column. size = count x type size for all_reduce, broadcast and
    reduce, x n for all_gather, reduce_scatter and alltoall. busbw/algbw is 2(n-1)/n for
    all_reduce, (n-1)/n for all_gather, reduce_scatter and alltoall, 1 for broadcast and
    reduce. alltoall never checks its in-place result: its in-place #wrong is N/A when the
    out-of-place one is checked."""
    ops = set(CANONICAL_OPS)
    reasons: list[str] = []

    def keep(allowed, why: str) -> None:
        nonlocal ops
        ops &= set(allowed)
        reasons.append(why)

    redops = {c.get("redop") for c in cells}
    if "redop" not in columns:
        keep(("all_gather", "broadcast"), "no redop column (before 2.13: all_gather, broadcast)")
    elif redops == {None}:
        keep(("all_to_all",), "blank redop cells (before 2.13: alltoall)")
    elif redops == {"none"}:
        keep(("all_gather", "all_to_all", "broadcast"), "redop none (no reduction)")
    elif not redops & {None, "none"}:
        keep(("all_reduce", "reduce_scatter", "reduce"), f"redop {'/'.join(sorted(redops))}")
    roots = {c.get("root") for c in cells}
    unrooted = [o for o in CANONICAL_OPS if o not in ("broadcast", "reduce")]
    if "root" not in columns:
        keep(unrooted, "no root column (before 2.13 only broadcast and reduce print one)")
    elif roots == {"-1"}:
        keep(unrooted, "root -1 (no root)")
    elif all(r is not None and r.isdigit() for r in roots):
        keep(("broadcast", "reduce"), f"root {'/'.join(sorted(roots))}")
    ratios = {
        int(c["size"]) // (int(c["count"]) * _TYPE_BYTES[c["type"]])
        for c in cells
        if int(c["count"]) > 0 and c["type"] in _TYPE_BYTES
    }
    n_by_op = dict.fromkeys(CANONICAL_OPS, world_size)
    k = ratios.pop() if len(ratios) == 1 else None
    if k is not None and k > 1:
        keep(_GATHER_LIKE, f"size = count x type size x {k} (one part per rank)")
        n_by_op.update(dict.fromkeys(_GATHER_LIKE, k))
    elif k == 1 and world_size not in (None, 1):
        keep(("all_reduce", "broadcast", "reduce"), "size = count x type size")
    elif k == 1:
        n_by_op.update(dict.fromkeys(_GATHER_LIKE, 1))
    checked = [c for c in cells if c["oop_wrong"] != _NA]
    if checked and all(c["ip_wrong"] == _NA for c in checked):
        keep(("all_to_all",), "in-place #wrong N/A where out-of-place is checked (alltoall)")
    elif any(c["ip_wrong"] != _NA for c in cells):
        keep([o for o in CANONICAL_OPS if o != "all_to_all"], "in-place result checked")
    figures = [
        (c["algbw"], c["busbw"])
        for c in cells
        if c["algbw"] is not None and c["busbw"] is not None and c["algbw"] >= 1
    ]
    if figures:
        fit = {o for o in ops if _fits(o, n_by_op[o], figures)}
        if fit != ops:
            at = f" at {world_size} ranks" if world_size else ""
            keep(fit, f"busbw/algbw {figures[-1][1] / figures[-1][0]:.3g}{at}")
    return OpInference(tuple(o for o in CANONICAL_OPS if o in ops), tuple(reasons))


def canonical_op_or_error(op: str) -> str:
    """``--op`` as given (all_reduce, alltoall, all_reduce_perf, ...) -> canonical name."""
    return op_from_binary(op)


def agree_world_size(given: int | None, found: int, source: str) -> tuple[int, str]:
    if given is not None and given != found:
        raise NcclTestsError(f"--world-size {given}, but the file's {source} count {found} ranks")
    return found, source


def implied_world_size(op: str, algbw_gbps: float, busbw_gbps: float) -> int | None:
    """The rank count nccl-tests' busbw factor implies (busbw = algbw x factor(n), doc/
    PERFORMANCE.md), when the printed figures pin it down: algbw of at least 10 GB/s (two printed
    decimals then leave the ratio within 0.1%) and an n within 0.05 of a whole number. None for
    broadcast and reduce (factor 1 at every n) and where the ratio does not decide."""
    if algbw_gbps < 10 or busbw_gbps <= 0:
        return None
    ratio = busbw_gbps / algbw_gbps
    scale = (
        2.0
        if op == "all_reduce"
        else 1.0
        if op in ("all_gather", "reduce_scatter", "all_to_all")
        else None
    )
    if scale is None or ratio >= scale - 1e-9:
        return None
    n = scale / (scale - ratio)  # ratio = scale (n-1)/n
    whole = round(n)
    if whole < 2 or abs(n - whole) > 0.05:
        return None
    return whole


def checked_world_size(run: NcclTestsRun) -> NcclTestsRun:
    """Check every table's busbw/algbw against the bus factor for the world size (a wrong
    ``--world-size`` is refused), or infer the world size from it when nothing else says."""
    implied = {
        r.op: n
        for r in sorted(run.rows, key=lambda r: r.algbw_gbps or 0)
        if r.algbw_gbps
        and r.busbw_gbps
        and (n := implied_world_size(r.op, r.algbw_gbps, r.busbw_gbps)) is not None
    }
    if run.world_size is None:
        found = set(implied.values())
        if len(found) == 1:
            return replace(run, world_size=found.pop(), world_size_source="busbw/algbw")
        decisive = [r for r in run.rows if (r.algbw_gbps or 0) >= 10 and r.busbw_gbps]
        if decisive and not implied and not {r.op for r in decisive} & {"broadcast", "reduce"}:
            r = decisive[-1]
            raise NcclTestsError(
                f"line {r.line}: busbw {r.busbw_gbps:g} / algbw {r.algbw_gbps:g} fits {r.op}'s "
                "bus factor at no rank count (nccl-tests doc/PERFORMANCE.md): is --op right?"
            )
        return run
    for op_name, n in implied.items():
        if n != run.world_size:
            expected = busbw_factor(op_name, run.world_size)
            raise NcclTestsError(
                f"{op_name}: busbw/algbw in the file implies {n} ranks, not the "
                f"{run.world_size} of {run.world_size_source} (factor {expected:.4g}, nccl-tests "
                "doc/PERFORMANCE.md)"
            )
    for r in run.rows:  # a wrong --op shows as a factor that is not the op's at any size
        if r.algbw_gbps is None or r.busbw_gbps is None or r.algbw_gbps < 1:
            continue
        factor = busbw_factor(r.op, run.world_size)
        # two printed decimals on each (three significant digits above 999.99)
        if abs(r.busbw_gbps - r.algbw_gbps * factor) > 0.015 + 2e-4 * r.busbw_gbps:
            where = f"line {r.line}" if run.layout != "json" else f"results[{r.line}]"
            raise NcclTestsError(
                f"{where}: busbw {r.busbw_gbps:g} / algbw {r.algbw_gbps:g} is not {r.op}'s bus "
                f"factor {factor:.4g} at {run.world_size} ranks ({run.world_size_source}; "
                "nccl-tests doc/PERFORMANCE.md): is --op right?"
            )
    return run


# --- into link_bench ------------------------------------------------------------------------
def link_bench_rows(run: NcclTestsRun, sweep_id: str, link: str) -> list[dict]:
    """``link_bench`` rows of a parsed file: ``source='nccl-tests'``, ``in_place`` per column
    set, ``wrong``, the printed time (us -> s), algbw and busbw as printed; ``iteration`` counts
    repeats of a size (0 unless the file holds a size twice), so ``link_bandwidth`` takes their
    median like linksweep's own iterations. Size-0 rows (``-b`` below one element) measure
    nothing and are left out; rows with N/A figures stay with NULLs. ``placement`` is NULL: an
    imported run was placed by its own launcher."""
    backend = "rccl" if (run.nccl_tests_version or "").startswith("rccl") else "nccl"
    return [
        {
            "sweep_id": sweep_id,
            "link": link,
            "placement": None,
            "backend": backend,
            "world_size": run.world_size,
            "op": r.op,
            "msg_bytes": r.msg_bytes,
            "iteration": r.repeat,
            "time_s": None if r.time_us is None else r.time_us / 1e6,
            "algbw_gbps": r.algbw_gbps,
            "busbw_gbps": r.busbw_gbps,
            "status": "ok",
            "error": None,
            "source": "nccl-tests",
            "in_place": r.in_place,
            "wrong": r.wrong,
        }
        for r in run.rows
        if r.msg_bytes > 0
    ]


def import_record(run: NcclTestsRun, file_name: str, sha256: str, link: str) -> dict:
    """What was imported, kept in the sweep's spec JSON (``imports``): the file and the facts
    printed around its table (``# Avg bus bandwidth``, out-of-bounds count, hosts, versions)."""
    errors = [r.max_error for r in run.rows if r.max_error is not None]
    return {
        "tool": "nccl-tests",
        "file": file_name,
        "sha256": sha256,
        "link": link,
        "ops": list(run.ops),
        "layout": run.layout,
        "op_source": run.op_source,
        "world_size": run.world_size,
        "world_size_source": run.world_size_source,
        "hosts": list(run.hosts),
        "gpus": list(run.gpus),
        "avg_busbw_gbps": run.avg_busbw_gbps,
        "out_of_bounds": run.out_of_bounds,
        "max_error": max(errors) if errors else None,
        "nccl_tests_version": run.nccl_tests_version,
        "nccl_version": run.nccl_version,
        "time_kind": run.time_kind,
        "rows": sum(1 for r in run.rows if r.msg_bytes > 0),
        "zero_size_rows_left_out": sum(1 for r in run.rows if r.msg_bytes == 0),
    }
