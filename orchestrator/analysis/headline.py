"""The headline: what a sweep found, in a few generated sentences per link. Pure.

One job: the words of the headline, from the slowdowns, their intervals and the bytes behind
them; the rules below are what each word needs from the numbers, so they read in one place.

``build_headline(sensitivity, variants, overview)`` takes rows of the ``link_sensitivity``,
``variant_summary`` and ``link_overview`` views (dicts keyed by column) and answers, per
non-baseline link: which strategy is hurt most, how that changes with grad_accum, and why
(bytes per optimizer step, and the collectives and dtypes that carried them, from
``variant_summary`` rows' ``comm_dtypes``: "DDP ... (all_reduce fp32); ZeRO-3 ... (all_gather
bf16 + reduce_scatter bf16)", since bf16 DDP and bf16 ZeRO need not send the same bytes per
parameter). Nothing is hard-coded: every word follows from the numbers and
their intervals, with these rules:

- a slowdown is *beyond the spread* when its interval lies above 1 (``ci_low > 1``);
- at each grad_accum the strategies split into a group *hurt most* and a group *hurt least*
  where their intervals allow it: in order of slowdown, the most hurt group is the fewest series
  from the top whose intervals all lie above the intervals of every series outside it, so it holds
  the top series, every series whose interval overlaps the top's, every one overlapping one of
  those, and so on (transitively: where intervals chain, no cut between them is beyond the
  spread); the least hurt group likewise from the bottom; a series without an interval there
  overlaps every other (its spread is unknown). With two series this is the top's interval lying
  above the other's. The rule it replaced asked the top alone to clear every other series, which
  read two overlapping leaders among seven series as "no difference" even where the least hurt lay
  far below both; the groups say what the intervals do separate;
- a single strategy is named *hurt most* where it is the most hurt group alone at one or more
  grad_accum values (the one that is at the most values; ties: the larger slowdown); with three
  or more series each grad_accum that splits gets a sentence naming both groups with their
  slowdowns and intervals (where one cut splits them, the larger side by its span of slowdowns
  only, the series between two cuts by their slowdowns) and, in a most hurt group of several,
  which members the top's interval still lies above and which overlap it (*within its spread*);
- where the sweep has FSDP2 (or HSDP) and ZeRO-3 or DDP, one sentence compares each FSDP2 flavour
  with each of them per grad_accum: *hurt more* (*less*) where the FSDP2 interval lies above
  (below) the other's (*intervals apart*), otherwise *within its spread*;
- a slowdown *grows* (*falls*) with grad_accum when its interval at the largest grad_accum lies
  above (below) its interval at the smallest; otherwise it stays the same within the spread;
- when no interval lies above 1, or every interval overlaps every other at every grad_accum, the
  sentence says "no difference beyond the spread"; so does a grad_accum without a split where
  another one splits and every interval overlaps every other. Where no cut splits the intervals
  but two of them lie apart (they chain, each overlapping another's), it says "no group of
  strategies lies apart from the rest" instead: the ends do differ, which the FSDP2 sentence
  may say, but no group does;
- a slowdown from one run a side has no interval (a point says nothing of spread); when no
  slowdown has one, the sentence says there is no finding yet.

The report puts the headline first; ``linksweep run`` prints it last (``orchestrator/ui.py``).
``extra_vs_predicted`` pairs each link's measured extra step time with the predicted
communication time, the comparison that says whether the link explains the slowdown.

Strategies are named by ``flavours.series_name`` (the rules, from the catalog, are in
``orchestrator/analysis/flavours.py``): ``DDP``, ``ZeRO-3+cpu``, and PyTorch FSDP2 always with its
flavour, ``FSDP2 (reshard, sync each)``, ``HSDP (no reshard, sync replicate_last)``, so two
flavours are two rows and two byte counts, never one; DDP names its ``grad_sync`` where it is not
its own; an axis outside the strategy's name is named where it varies (``DDP (bf16 gradients)``,
``ZeRO-3 (bucket 25 MB)``).

The one-GPU rehearsal (``ranks_per_gpu: 2``: two ranks on one GPU, ``stats.rehearsal``) makes
no link claim here: its runs make no slowdown rows (``stats.link_measurement``), so no sentence
names them, and ``extra_vs_predicted`` leaves its variants out.

May import: flavours, links, stats, workloads.catalog.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.analysis.flavours import (  # noqa: F401 - strategy_name: the report's import
    GA,
    LINK,
    display,
    series_name,
    sort_key,
    strategy_name,
    value_key,
)
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
from workloads import catalog

NO_DIFFERENCE = "no difference beyond the spread"
CHAINED = "no group of strategies lies apart from the rest"
"""Where no cut splits the intervals but two of them lie apart: they chain, end to end."""
APART = "overlap_comm"
"""The axis whose settings the headline compares apart: overlap on against off of one strategy
is not "which strategy is hurt most" (it changes how much of the communication a step hides),
so each setting gets its own sentences."""


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


def series_order(row: Mapping[str, Any]) -> tuple:
    """Series in display order (``flavours.sort_key``: the catalog's strategy order, then each
    axis's values in its order)."""
    return sort_key(row)


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


def _groups(cells: dict[str, dict[int, Cell]], ga: int) -> tuple[list[str], list[str]] | None:
    """(the most hurt group, the least hurt group) at ga, each largest slowdown first; None where
    the intervals allow no split (module doc). A cut after the k-th series in order of slowdown
    is beyond the spread when every interval above it lies above every interval below it; the
    most hurt group ends at the first such cut, the least hurt begins at the last. A series
    without an interval at ga overlaps everything: its spread is unknown."""
    here = sorted(((s, c[ga]) for s, c in cells.items() if ga in c), key=lambda x: -x[1].slowdown)
    lows = [float("-inf") if c.low is None else c.low for _, c in here]
    highs = [float("inf") if c.high is None else c.high for _, c in here]
    cuts = [k for k in range(1, len(here)) if min(lows[:k]) > max(highs[k:])]
    if not cuts:
        return None
    names = [s for s, _ in here]
    return names[: cuts[0]], names[cuts[-1] :]


def _some_apart(cells: dict[str, dict[int, Cell]], ga: int) -> bool:
    """Whether any two series' intervals at ga lie apart (where no cut splits them all: they
    chain, which is not "no difference")."""
    here = [c[ga] for c in cells.values() if ga in c]
    return any(_apart(a, b) for a in here for b in here)


def _apart(hi: Cell, lo: Cell) -> bool:
    """``hi``'s interval lies above ``lo``'s (both known)."""
    return hi.low is not None and lo.high is not None and hi.low > lo.high


def _join(parts: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f" and {parts[-1]}"


def _who(cells: dict[str, dict[int, Cell]], ga: int, names: Sequence[str]) -> str:
    """``A 2.94× [2.80–3.08] and B 2.80× [2.55–3.10] are``: names with their cells and verb."""
    return _join([f"{s} {cells[s][ga].text()}" for s in names]) + (
        " is" if len(names) == 1 else " are"
    )


def _span(cells: dict[str, dict[int, Cell]], ga: int, names: Sequence[str]) -> str:
    """``1.92×–2.94×``: the slowdowns of several series at ga, smallest to largest."""
    xs = sorted(cells[s][ga].slowdown for s in names)
    return f"{xs[0]:.2f}×–{xs[-1]:.2f}×"


def _number(n: int) -> str:
    words = ("two", "three", "four", "five", "six", "seven", "eight", "nine")
    return words[n - 2] if 2 <= n < 10 else str(n)


def _split_sentence(
    cells: dict[str, dict[int, Cell]], ga: int, most: list[str], least: list[str]
) -> str:
    """``at grad_accum 8, A 2.94× [2.80–3.08] is hurt most ...``: the two groups at ga (module
    doc). Where one cut splits them, the larger side is told by its span only ("the other six
    strategies (1.92×–2.94×)"), the smaller named with its intervals; then, inside a most hurt
    group of several, what the top's interval alone clears (``_top_reach``)."""
    here = sorted((s for s in cells if ga in cells[s]), key=lambda s: -cells[s][ga].slowdown)
    between = [s for s in here if s not in most and s not in least]
    if between:
        text = (
            f"at grad_accum {ga}, {_who(cells, ga, most)} hurt most ({_its(most)} above every "
            f"other strategy's) and {_who(cells, ga, least)} hurt least ({_its(least)} below "
            f"every other strategy's); in between: "
            + _join([f"{s} {_x(cells[s][ga])}" for s in between])
        )
    elif len(most) > len(least):
        text = (
            f"at grad_accum {ga}, {_who(cells, ga, least)} hurt least, {_its(least)} below "
            f"those of the other {_number(len(most))} strategies ({_span(cells, ga, most)})"
        )
    elif len(most) < len(least):
        text = (
            f"at grad_accum {ga}, {_who(cells, ga, most)} hurt most, {_its(most)} above "
            f"those of the other {_number(len(least))} strategies ({_span(cells, ga, least)})"
        )
    else:
        text = (
            f"at grad_accum {ga}, {_who(cells, ga, most)} hurt most and {_who(cells, ga, least)} "
            f"hurt least, every interval of the first above every interval of the second"
        )
    told = len(most) > len(least) and not between  # the most hurt told by span only
    lead = f"of those {_number(len(most))}" if told else f"of the {_number(len(most))} hurt most"
    reach = _top_reach(cells, ga, most, lead)
    return f"{text}; {reach}" if reach else text


def _its(names: Sequence[str]) -> str:
    return "its interval" if len(names) == 1 else "their intervals"


def _top_reach(
    cells: dict[str, dict[int, Cell]], ga: int, most: list[str], lead: str
) -> str | None:
    """``of the three hurt most, the top, A 2.94× [2.80–3.08], lies above B, and C 2.80× [..] is
    within its spread``: where the most hurt group has several series and the top's interval
    lies above some of them, which (the others overlap it: within its spread)."""
    if len(most) < 2:
        return None
    top = cells[most[0]][ga]
    below = [s for s in most[1:] if _apart(top, cells[s][ga])]
    if not below:
        return None
    near = [s for s in most[1:] if s not in below]
    return (
        f"{lead}, the top, {most[0]} {top.text()}, lies above "
        + _join(below)
        + (f", and {_who(cells, ga, near)} within its spread" if near else "")
    )


def _verdicts(here: Mapping[str, Cell], fsdp: list[str], comp: str) -> tuple[tuple[str, ...], ...]:
    """(FSDP2 flavours hurt more than comp, hurt less, within its spread) at one grad_accum."""
    c = here[comp]
    more = tuple(f for f in fsdp if _apart(here[f], c))
    less = tuple(f for f in fsdp if _apart(c, here[f]))
    return more, less, tuple(f for f in fsdp if f not in more + less)


def _versus(here: Mapping[str, Cell], fsdp: list[str], comps: list[str]) -> str:
    """``FSDP2 (a) is hurt more than ZeRO-3 (2.94× vs 2.35×, intervals apart), the other
    flavours are within its spread (2.80× and 2.15× vs 2.35×)``: the FSDP2 flavours against
    one or more strategies that the intervals judge alike, grouped by what they say."""
    comp, cx = _join(comps), _join([_x(here[c]) for c in comps])
    its, it = ("its", "it") if len(comps) == 1 else ("their", "them")
    parts: list[str] = []
    for key, names in zip(("more", "less", "within"), _verdicts(here, fsdp, comps[0]), strict=True):
        if not names:
            continue
        words = {
            "more": f"hurt more than {it if parts else comp}",
            "less": f"hurt less than {it if parts else comp}",
            "within": f"within {its} spread" if parts else f"within the spread of {comp}",
        }[key]
        every = f"every {catalog.FAMILIES[FSDP2]} flavour"
        who = every if len(names) == len(fsdp) > 1 else _join(names)
        who = "the other flavours" if key == "within" and parts and len(names) > 1 else who
        verb = "is" if len(names) == 1 or len(names) == len(fsdp) else "are"
        apart = "" if key == "within" else ", intervals apart"
        xs = _join([_x(here[f]) for f in names])
        parts.append(f"{who} {verb} {words} ({xs} vs {cx}{apart})")
    return ", ".join(parts)


FSDP2 = catalog.FSDP2
"""The family whose flavours the FSDP2 sentence compares (``catalog.FAMILIES``)."""


def _counterpart(strategy: Any) -> bool:
    """What FSDP2's flavours are held against: DDP (replicates every parameter) and the ZeRO
    stage that shards parameters as FSDP2 does (``zero_stage`` 3: DeepSpeed's counterpart)."""
    entry = catalog.STRATEGIES.get(str(strategy))
    if entry is None:
        return False
    return entry.family == catalog.DDP or (entry.family == catalog.ZERO and entry.zero_stage == 3)


def _fsdp_sentence(
    cells: dict[str, dict[int, Cell]], gas: list[int], strategy_of: Mapping[str, Any]
) -> str | None:
    """FSDP2's flavours against ZeRO-3 and DDP (``_counterpart``), per grad_accum, where both
    sides have intervals (module doc); strategies the intervals judge alike share a clause.
    ``strategy_of``: each series' strategy as stored."""
    fsdp = [s for s in cells if catalog.family_of(strategy_of.get(s)) == FSDP2]
    comps = sorted(  # the sharded counterpart first, then DDP
        (s for s in cells if _counterpart(strategy_of.get(s))),
        key=lambda s: catalog.family_of(strategy_of.get(s)) == catalog.DDP,
    )
    if not fsdp or not comps:
        return None
    clauses, used = [], set()
    for ga in gas:
        here = {
            s: c[ga] for s, c in cells.items() if ga in c and None not in (c[ga].low, c[ga].high)
        }
        flav = sorted((f for f in fsdp if f in here), key=lambda f: -here[f].slowdown)
        alike: dict[tuple, list[str]] = {}
        for c in comps:
            if c in here and flav:
                alike.setdefault(_verdicts(here, flav, c), []).append(c)
                used.add(c)
        if alike:
            per = [_versus(here, flav, group) for group in alike.values()]
            clauses.append(f"at grad_accum {ga}, " + "; ".join(per))
    if not clauses:
        return None
    names = _join(list(dict.fromkeys(display(strategy_of[c]) for c in comps if c in used)))
    return f"{catalog.FAMILIES[FSDP2]} against {names}: " + "; ".join(clauses) + "."


def _sentences(
    label: str,
    base: str,
    cells: dict[str, dict[int, Cell]],
    gas: list[int],
    strategy_of: Mapping[str, Any],
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
    splits = {ga: g for ga in gas if (g := _groups(cells, ga)) is not None}
    fsdp = _fsdp_sentence(cells, gas, strategy_of)
    chained = [ga for ga in gas if ga not in splits and _some_apart(cells, ga)]
    if not splits:
        paths = "; ".join(f"{s} {_path(per)}" for s, per in cells.items())
        return [
            f"On {label}, steps are slower than on {base}, but "
            + (
                f"{CHAINED} at any grad_accum: their slowdown intervals chain, each overlapping "
                f"another's ({paths})."
                if chained
                else f"the strategies show {NO_DIFFERENCE}: their slowdown intervals overlap "
                f"at every grad_accum ({paths})."
            )
        ] + ([fsdp] if fsdp else [])
    lead = _lead(label, base, cells, splits)
    groups = [_split_sentence(cells, ga, *g) for ga, g in splits.items()]
    if lead is None:  # no one strategy alone: the first split leads
        out = [f"On {label}, steps are slower than on {base}; {groups.pop(0)}."]
    else:
        out = [lead]
    if len(cells) > 2:  # with two series the lead says it all
        out += [f"{g[0].upper()}{g[1:]}." for g in groups]
    tied = [str(ga) for ga in gas if ga not in splits and ga not in chained]
    if tied:
        out.append(f"At grad_accum {', '.join(tied)} the strategies show {NO_DIFFERENCE}.")
    if chained:
        at = ", ".join(str(ga) for ga in chained)
        out.append(
            f"At grad_accum {at} {CHAINED}: their intervals chain, each overlapping another's."
        )
    return out + ([fsdp] if fsdp else [])


def _lead(
    label: str,
    base: str,
    cells: dict[str, dict[int, Cell]],
    splits: dict[int, tuple[list[str], list[str]]],
) -> str | None:
    """The first sentence where one strategy is the most hurt group alone at some grad_accum
    (module doc), with every series' slowdowns; None where none is."""
    clear = {ga: most[0] for ga, (most, _) in splits.items() if len(most) == 1}
    if not clear:
        return None
    wins = {s: sum(1 for t in clear.values() if t == s) for s in set(clear.values())}
    most = max(wins, key=lambda s: (wins[s], max(c.slowdown for c in cells[s].values())))
    first = (
        f"On {label}, {most} is hurt most, {_TREND_WORDS[_trend(cells[most])]}: its steps "
        f"take {_path(cells[most], base)}"
    )
    others = [s for s in cells if s != most]
    rest = "; ".join(f"{s}'s take {_path(cells[s])}{_aside(cells[s])}" for s in others)
    return f"{first}; {rest}."


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


def _link_sentences(
    label: str,
    base: str,
    cells: dict[str, dict[int, Cell]],
    gas: list[int],
    first: Mapping[str, Mapping[str, Any]],
    vary: set[str],
) -> list[str]:
    """One link's sentences; where the ``APART`` axis varies, each of its settings apart (its
    series named without it: ``On slow with overlap off, ZeRO-3 is hurt most``)."""
    strategy_of = {s: r.get("strategy") for s, r in first.items()}
    if APART not in vary:
        return _sentences(label, base, cells, gas, strategy_of)
    axis = catalog.AXES[APART]
    out: list[str] = []
    settings = sorted({r.get(APART) for r in first.values()}, key=lambda v: value_key(APART, v))
    for setting in settings:
        sub = {
            series_name(first[s], vary, (GA, LINK, APART)): c
            for s, c in cells.items()
            if first[s].get(APART) == setting
        }
        of = {series_name(r, vary, (GA, LINK, APART)): r.get("strategy") for r in first.values()}
        out += _sentences(f"{label} with {axis.phrase(setting)}", base, sub, gas, of)
    return out


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
    vary = varying(rows)
    links = sorted(
        {r["link"] for r in rows},
        key=lambda x: (list(link_order).index(x) if x in link_order else 99, x),
    )
    out, kinds = [], set()
    for link in links:
        link_rows = sorted((r for r in rows if r["link"] == link), key=series_order)
        base = link_rows[0]["baseline_link"]
        cells: dict[str, dict[int, Cell]] = {}
        first: dict[str, Mapping[str, Any]] = {}  # each series' first row
        for r in link_rows:
            lo, hi = r.get("ci_low"), r.get("ci_high")
            if lo is not None and lo == hi:  # one run a side: a point says nothing of spread
                lo = hi = None
            name = series_name(r, vary)
            first.setdefault(name, r)
            cells.setdefault(name, {})[int(r["grad_accum"])] = Cell(
                r["slowdown"], lo, hi, r.get("interval_kind")
            )
            kinds.add(r.get("interval_kind"))
        gas = sorted({g for per in cells.values() for g in per})
        nbytes: dict[str, dict[int, float]] = {}
        dtypes: dict[str, list[str]] = {}
        for v in sorted(variants, key=lambda v: int(v["grad_accum"])):
            if v.get("link") == base and v.get("comm_bytes_per_step") is not None:
                key = series_name(v, vary)
                if key in cells:
                    nbytes.setdefault(key, {})[int(v["grad_accum"])] = v["comm_bytes_per_step"]
                    if v.get("comm_dtypes"):
                        dtypes.setdefault(key, []).append(v["comm_dtypes"])
        label = link_label(link, ov.get(link))
        sentences = _link_sentences(label, base, cells, gas, first, vary)
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
