"""The headline: what a sweep found, in one or two generated sentences per link. Pure.

``build_headline(sensitivity, variants, overview)`` takes rows of the ``link_sensitivity``,
``variant_summary`` and ``link_overview`` views (dicts keyed by column) and answers, per
non-baseline link: which strategy is hurt most, how that changes with grad_accum, and why
(bytes per optimizer step, and the collectives and dtypes that carried them, from
``variant_summary`` rows' ``comm_dtypes``: "DDP ... (all_reduce fp32); ZeRO-3 ... (all_gather
bf16 + reduce_scatter bf16)", since bf16 DDP and bf16 ZeRO need not send the same bytes per
parameter). Nothing is hard-coded: every word follows from the numbers and
their intervals, with these rules:

- a slowdown is *beyond the spread* when its interval lies above 1 (``ci_low > 1``);
- a strategy is *hurt most* at a grad_accum when its slowdown is the largest there and its
  interval lies above every other strategy's interval; it is named when that holds at one or more
  grad_accum values (the one that leads at the most values; ties: the larger slowdown);
- a slowdown *grows* (*falls*) with grad_accum when its interval at the largest grad_accum lies
  above (below) its interval at the smallest; otherwise it stays the same within the spread;
- when no interval lies above 1, or the strategies' intervals overlap at every grad_accum, the
  sentence says "no difference beyond the spread";
- a slowdown from one run a side has no interval (a point says nothing of spread); when no
  slowdown has one, the sentence says there is no finding yet.

The report puts the headline first; ``linksweep run`` prints it last (``orchestrator/ui.py``).
``extra_vs_predicted`` pairs each link's measured extra step time with the predicted
communication time, the comparison that says whether the link explains the slowdown.

Strategies are named by ``strategy_name``: ``DDP``, ``ZeRO-3``, and PyTorch FSDP2 always with its
flavour, ``FSDP2 (reshard, sync each)``, ``HSDP (no reshard, sync replicate_last)``
(``reshard_after_forward``, ``grad_sync``), so two flavours are two rows and two byte counts,
never one; DDP names its ``grad_sync`` where it is ``each``.

The one-GPU rehearsal (``ranks_per_gpu: 2``: two ranks on one GPU, ``stats.rehearsal``) makes
no link claim here: its runs make no slowdown rows (``stats.link_measurement``), so no sentence
names them, and ``extra_vs_predicted`` leaves its variants out.

May import: links, stats.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.analysis.links import link_label
from orchestrator.analysis.stats import (
    GROUP_KEY,
    INTERVAL_LABELS,
    INTERVAL_RANGE,
    MIN_RUNS_FOR_CI,
    VARIANT_KEY,
    rehearsal_variants,
    varying,
)

STRATEGY_ORDER = ("ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp")
FSDP2_NAMES = {"fsdp": "FSDP2", "hsdp": "HSDP"}
"""PyTorch FSDP2 (``fully_shard``) and its hybrid mode (a replicate x shard mesh)."""
RESHARD_WORDS = {"true": "reshard", "false": "no reshard"}
"""``reshard_after_forward``: blocks free their parameters after forward (gather again in
backward, as ZeRO-3) or keep them (as ZeRO-2)."""
SYNC_ORDER = ("each", "last", "replicate_last")
DDP_DEFAULT_SYNC = "last"
"""DDP's own flavour (``no_sync`` until the last micro-batch; ``spec.DEFAULT_SYNC``): plain
``DDP`` means it, so only ``each`` is named."""
NO_DIFFERENCE = "no difference beyond the spread"
OVERLAP_NAME = {"default": " (overlap default)", "true": " (overlap on)", "false": " (overlap off)"}
OVERLAP_WORDS = {
    "default": "at each framework's default overlap",
    "true": "with overlap on",
    "false": "with overlap off",
}


def strategy_name(row: Mapping[str, Any]) -> str:
    """``DDP``, ``ZeRO-3``, ``ZeRO-3+cpu`` (offload), ``FSDP2 (reshard, sync each)``,
    ``HSDP (no reshard, sync replicate_last)``, ``DDP (sync each)``: an FSDP2 strategy always
    with its flavour (``reshard_after_forward``, ``grad_sync``), since each sends different
    bytes; DDP with its ``grad_sync`` where it is not DDP's own (``DDP_DEFAULT_SYNC``)."""
    s = str(row["strategy"])
    name = FSDP2_NAMES.get(s) or ("DDP" if s == "ddp" else s.upper().replace("ZERO", "ZeRO-"))
    off = row.get("offload")
    name = name if off in (None, "none") else f"{name}+{off}"
    flavour = _flavour(row)
    return f"{name} ({', '.join(flavour)})" if flavour else name


def _flavour(row: Mapping[str, Any]) -> list[str]:
    """The words that name a variant's sync flavour and FSDP2 reshard setting (``n/a`` where
    the axis does not apply: ZeRO, and reshard for DDP)."""
    s, sync, reshard = row["strategy"], row.get("grad_sync"), row.get("reshard_after_forward")
    words = []
    if s in FSDP2_NAMES and reshard not in (None, "n/a"):
        words.append(RESHARD_WORDS.get(str(reshard).lower(), f"reshard {reshard}"))
    if sync not in (None, "n/a") and (s in FSDP2_NAMES or sync != DDP_DEFAULT_SYNC):
        words.append(f"sync {sync}")
    return words


@dataclass(frozen=True)
class Cell:
    """One slowdown with its interval."""

    slowdown: float
    low: float | None
    high: float | None
    kind: str | None

    @property
    def beyond_spread(self) -> bool:
        return self.low is not None and self.low > 1.0

    def text(self) -> str:
        if self.low is None or self.high is None:
            return f"{self.slowdown:.2f}×"
        return f"{self.slowdown:.2f}× [{self.low:.2f}–{self.high:.2f}]"


@dataclass(frozen=True)
class LinkHeadline:
    link: str
    baseline: str
    label: str
    """The link's name with its rated rate and measured busbw."""
    baseline_label: str
    sentences: list[str]
    grad_accums: list[int]
    cells: dict[str, dict[int, Cell]]
    """series -> grad_accum -> slowdown; series in display order."""
    bytes_per_step: dict[str, dict[int, float]]
    interval_label: str
    """What the brackets are: "range of runs", "95% bootstrap CI", or both."""


@dataclass(frozen=True)
class Headline:
    links: list[LinkHeadline] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.links


def _series(row: Mapping[str, Any], vary: set[str]) -> str:
    name = strategy_name(row)
    if "placement" in vary:
        name += f" {row['placement']}"
    if "bucket_mb" in vary:
        name += f" bucket {row['bucket_mb']} MB"
    if "ddp_grad_dtype" in vary and row.get("strategy") == "ddp":
        name += f" ({row['ddp_grad_dtype']} gradients)"  # before the overlap: its suffix ends
    if "overlap_comm" in vary:
        name += OVERLAP_NAME.get(str(row.get("overlap_comm")), f" (overlap {row['overlap_comm']})")
    return name


def _vary(rows: Sequence[Mapping[str, Any]]) -> set[str]:
    """The keys series are named by: those that vary, and DDP's gradient dtype when DDP runs
    in more than one (ZeRO variants have none, which is no difference)."""
    vary = varying(rows, ("placement", "bucket_mb", "overlap_comm"))
    if len({r.get("ddp_grad_dtype") for r in rows if r.get("strategy") == "ddp"} - {None}) > 1:
        vary.add("ddp_grad_dtype")
    return vary


def _index(value: Any, order: Sequence[str]) -> int:
    return order.index(value) if value in order else len(order)


def series_order(row: Mapping[str, Any]) -> tuple:
    s, o = row["strategy"], str(row.get("overlap_comm"))
    return (
        _index(s, STRATEGY_ORDER),
        str(row.get("offload")),
        _index(o, list(OVERLAP_NAME)),
        _index(str(row.get("reshard_after_forward")), list(RESHARD_WORDS)),
        _index(row.get("grad_sync"), SYNC_ORDER),
    )


def _x(c: Cell) -> str:
    return f"{c.slowdown:.2f}×"


def _trend(cells: dict[int, Cell]) -> str:
    gas = sorted(cells)
    first, last = cells[gas[0]], cells[gas[-1]]
    if None in (first.low, first.high, last.low, last.high) or len(gas) < 2:
        return "same"
    if last.low > first.high:
        return "grows"
    if last.high < first.low:
        return "falls"
    return "same"


def _leader(cells: dict[str, dict[int, Cell]], ga: int) -> tuple[str | None, bool]:
    """(the series with the largest slowdown at ga, whether its interval clears the others')."""
    here = {s: c[ga] for s, c in cells.items() if ga in c}
    if not here:
        return None, False
    top = max(here, key=lambda s: here[s].slowdown)
    others = [c for s, c in here.items() if s != top]
    if not others:
        return top, True
    t = here[top]
    clear = t.low is not None and all(o.high is not None and t.low > o.high for o in others)
    return top, clear


def _path(cells: dict[int, Cell], base: str | None = None) -> str:
    """``2.29× at grad_accum 1 and 3.15× at 8`` (with ``as long as on BASE`` after the first)."""
    gas = sorted(cells)
    head = f"{_x(cells[gas[0]])}" + (f" as long as on {base}" if base else "")
    head += f" at grad_accum {gas[0]}"
    tail = [f"{_x(cells[g])} at {g}" for g in gas[1:]]
    if not tail:
        return head
    return head + (", " + ", ".join(tail[:-1]) if len(tail) > 1 else "") + f" and {tail[-1]}"


def _aside(cells: dict[int, Cell]) -> str:
    """`` (falling; not slower beyond the spread at 8)``: a trend and any slowdown within noise."""
    notes = {"grows": ["growing"], "falls": ["falling"], "same": []}[_trend(cells)]
    flat = [str(g) for g in sorted(cells) if not cells[g].beyond_spread]
    if flat:
        notes.append(f"not slower beyond the spread at {', '.join(flat)}")
    return f" ({'; '.join(notes)})" if notes else ""


_TREND_WORDS = {
    "grows": "and more as grad_accum grows",
    "falls": "and less as grad_accum grows",
    "same": "about as much at every grad_accum (within the spread)",
}


def _sentences(
    label: str, base: str, cells: dict[str, dict[int, Cell]], gas: list[int]
) -> list[str]:
    every = [c for per in cells.values() for c in per.values()]
    if all(c.low is None or c.high is None for c in every):
        return [
            f"On {label}, no finding yet: slowdowns "
            + "; ".join(f"{s} {_path(per)}" for s, per in cells.items())
            + ", but from single runs, so nothing is known of their spread (run repeats: "
            f"{MIN_RUNS_FOR_CI} or more)."
        ]
    if not any(c.beyond_spread for c in every):
        lo = min(c.slowdown for c in every)
        hi = max(c.slowdown for c in every)
        span = f"{lo:.2f}×" if lo == hi else f"{lo:.2f}×–{hi:.2f}×"
        return [
            f"On {label}, {NO_DIFFERENCE}: no strategy is slower than on {base} beyond the "
            f"spread of its runs (every interval includes 1; slowdowns {span})."
        ]
    if len(cells) == 1:
        ((name, per),) = cells.items()
        trend = _trend(per)
        return [
            f"On {label}, {name}'s steps take {_path(per, base)}"
            + ("" if trend == "same" else f": the slowdown {trend} with grad_accum")
            + "."
        ]
    leaders = {ga: _leader(cells, ga) for ga in gas}
    clear = {ga: top for ga, (top, ok) in leaders.items() if ok and top is not None}
    if not clear:
        return [
            f"On {label}, steps are slower than on {base}, but the strategies show "
            f"{NO_DIFFERENCE}: their slowdown intervals overlap at every grad_accum ("
            + "; ".join(f"{s} {_path(per)}" for s, per in cells.items())
            + ")."
        ]
    wins = {s: sum(1 for t in clear.values() if t == s) for s in set(clear.values())}
    most = max(wins, key=lambda s: (wins[s], max(c.slowdown for c in cells[s].values())))
    first = (
        f"On {label}, {most} is hurt most, {_TREND_WORDS[_trend(cells[most])]}: its steps "
        f"take {_path(cells[most], base)}"
    )
    others = [s for s in cells if s != most]
    rest = "; ".join(f"{s}'s take {_path(cells[s])}{_aside(cells[s])}" for s in others)
    out = [f"{first}; {rest}."]
    tied = [ga for ga in gas if ga not in clear]
    if tied:
        out.append(
            f"At grad_accum {', '.join(str(g) for g in tied)} the strategies show {NO_DIFFERENCE}."
        )
    return out


def fmt_mb(b: float) -> str:
    mb = b / 1e6
    return f"{mb:.3g} MB" if mb < 1000 else f"{mb:,.0f} MB"


def _bytes_sentence(
    bytes_per_step: dict[str, dict[int, float]], dtypes: Mapping[str, list[str]] | None = None
) -> str | None:
    """``dtypes``: per series, what carried the bytes (``comm_dtypes`` of its variants, in
    grad_accum order); shown in brackets, each distinct text once."""
    parts = []
    for s, per in bytes_per_step.items():
        if not per:
            continue
        gas = sorted(per)
        vals = [per[g] for g in gas]
        if len(gas) > 1 and max(vals) <= 1.02 * min(vals):
            part = f"{s} {fmt_mb(vals[0])} at every grad_accum"
        else:
            part = (
                f"{s} "
                + ", ".join(f"{fmt_mb(per[g])} at grad_accum {g}" for g in gas[:1])
                + "".join(f", {fmt_mb(per[g])} at {g}" for g in gas[1:])
            )
        carried = list(dict.fromkeys((dtypes or {}).get(s, [])))
        parts.append(f"{part} ({'; '.join(carried)})" if carried else part)
    if not parts:
        return None
    return "Why: measured traffic per optimizer step per rank: " + "; ".join(parts) + "."


def build_headline(
    sensitivity: Sequence[Mapping[str, Any]],
    variants: Sequence[Mapping[str, Any]],
    overview: Sequence[Mapping[str, Any]] = (),
    link_order: Sequence[str] = (),
) -> Headline:
    """The headline of one sweep (module doc). An empty ``Headline`` without slowdowns."""
    rows = [r for r in sensitivity if r.get("slowdown") is not None]
    if not rows:
        return Headline()
    ov = {o["link"]: o for o in overview}
    vary = _vary(rows)
    links = sorted(
        {r["link"] for r in rows},
        key=lambda x: (list(link_order).index(x) if x in link_order else 99, x),
    )
    out, kinds = [], set()
    for link in links:
        link_rows = sorted((r for r in rows if r["link"] == link), key=series_order)
        base = link_rows[0]["baseline_link"]
        cells: dict[str, dict[int, Cell]] = {}
        for r in link_rows:
            lo, hi = r.get("ci_low"), r.get("ci_high")
            if lo is not None and lo == hi:  # one run a side: a point says nothing of spread
                lo = hi = None
            cells.setdefault(_series(r, vary), {})[int(r["grad_accum"])] = Cell(
                r["slowdown"], lo, hi, r.get("interval_kind")
            )
            kinds.add(r.get("interval_kind"))
        gas = sorted({g for per in cells.values() for g in per})
        nbytes: dict[str, dict[int, float]] = {}
        dtypes: dict[str, list[str]] = {}
        for v in sorted(variants, key=lambda v: int(v["grad_accum"])):
            if v.get("link") == base and v.get("comm_bytes_per_step") is not None:
                key = _series(v, vary)
                if key in cells:
                    nbytes.setdefault(key, {})[int(v["grad_accum"])] = v["comm_bytes_per_step"]
                    if v.get("comm_dtypes"):
                        dtypes.setdefault(key, []).append(v["comm_dtypes"])
        label = link_label(link, ov.get(link))
        if "overlap_comm" in vary:  # strategies compared at one overlap setting at a time
            sentences = []
            for o, words in OVERLAP_WORDS.items():
                suffix = OVERLAP_NAME[o]
                sub = {k.removesuffix(suffix): c for k, c in cells.items() if k.endswith(suffix)}
                if sub:
                    sentences += _sentences(f"{label} {words}", base, sub, gas)
        else:
            sentences = _sentences(label, base, cells, gas)
        why = _bytes_sentence({s: nbytes[s] for s in cells if s in nbytes}, dtypes)
        if why and any(c.beyond_spread for per in cells.values() for c in per.values()):
            sentences.append(why)
        link_kinds = {c.kind for per in cells.values() for c in per.values()}
        out.append(
            LinkHeadline(
                link=link,
                baseline=base,
                label=label,
                baseline_label=link_label(base, ov.get(base)),
                sentences=sentences,
                grad_accums=gas,
                cells=cells,
                bytes_per_step=nbytes,
                interval_label=" or ".join(
                    INTERVAL_LABELS.get(k, str(k)) for k in sorted(k for k in link_kinds if k)
                )
                or "no interval",
            )
        )
    notes = []
    if INTERVAL_RANGE in kinds:
        notes.append(
            f"Brackets are the range of the runs: fewer than {MIN_RUNS_FOR_CI} runs per "
            "variant, too few for a confidence interval, so they show spread only. For 95% "
            f"bootstrap intervals, run with repeats: {MIN_RUNS_FOR_CI} or more."
        )
    return Headline(out, notes)


def extra_vs_predicted(
    variants: Sequence[Mapping[str, Any]],
    baseline: str | None,
    runs: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Per variant on a non-baseline link: its measured extra step time over the same variant on
    the baseline link, next to the extra communication time the link microbenchmark predicts
    (``predicted_comm_s_per_step`` on the link minus on the baseline). ``ratio`` = measured /
    predicted: near 1, the link's bandwidth explains the slowdown; well above, something else
    (latency, contention, CPU) costs time too. Variants whose ``runs`` are the one-GPU
    rehearsal (``stats.rehearsal``) are left out, on either side: they measure no link."""
    shared = rehearsal_variants(runs)
    variants = [v for v in variants if tuple(v.get(k) for k in VARIANT_KEY) not in shared]
    base = {tuple(v.get(k) for k in GROUP_KEY): v for v in variants if v.get("link") == baseline}
    out = []
    for v in variants:
        b = base.get(tuple(v.get(k) for k in GROUP_KEY))
        if v.get("link") == baseline or b is None:
            continue
        if v.get("median_step_time_s") is None or b.get("median_step_time_s") is None:
            continue
        measured = v["median_step_time_s"] - b["median_step_time_s"]
        pv, pb = v.get("predicted_comm_s_per_step"), b.get("predicted_comm_s_per_step")
        predicted = None if pv is None or pb is None else pv - pb
        out.append(
            {k: v.get(k) for k in GROUP_KEY}
            | {
                "link": v["link"],
                "baseline_link": baseline,
                "measured_extra_s": measured,
                "predicted_extra_s": predicted,
                "ratio": measured / predicted if predicted else None,
            }
        )
    out.sort(key=lambda r: (r["link"], series_order(r), r["grad_accum"]))
    return out
