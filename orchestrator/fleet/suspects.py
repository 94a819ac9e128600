"""The fleet check's verdict: which nodes and which pairs are suspects, and why. Pure.

One job: the suspect rule, from measured figures to verdicts with their reasons.

The rule, for users and with its reasons, is ``docs/fleet.md`` ("How suspects are decided"); in
short, per check:

- **Robust reference**: the fleet's median and median absolute deviation (MAD) of per-node
  figures. A value is *low* when it is below both ``median * (1 - rel)`` and
  ``median - mad_k * 1.4826 * MAD`` (``Rule``; 1.4826 scales a MAD to a standard deviation for
  normal data), or below ``median * floor`` (4x slower) whatever the spread. The relative bound
  keeps a tight fleet's small dips quiet; the MAD bound keeps a noisy fleet's ordinary spread
  quiet; the floor keeps a MAD over a handful of noisy values from hiding a gross fault.
- **Inter-node pairs, per link**: a node's score is the median busbw of its pairs (a failed
  pair counts as 0; of an even count the upper middle value, ``upper_median``); the reference is
  taken over node scores, never over pairs, because a bad node touches N-1 of the N(N-1)/2 pairs
  (half of them at N = 4) and would drag a median and MAD over pairs. A node is a suspect when
  its score is low and it is slow with most of its partners (and at least
  ``min(min_partners, its partners)`` of them; a node with fewer partners than ``min_partners``
  only when a partner already named does not explain it). A slow pair with neither node a
  suspect is a *single slow pair*: a suspect itself. Two nodes make one pair: nothing to
  compare it with.
- **Intra-node busbw per link, and the compute probe**: each node against the fleet's median and
  MAD of that check; of two nodes, the slower only at ``floor`` of the other or less. Nodes that
  share a machine with another node are left out (their checks measure the same hardware). A
  failed measurement is a reason by itself.
- **Health** (``health_reasons``): NVML facts that are faults, each a reason by itself.

Measured values are ``float`` (busbw in GB/s, tokens/s), ``Failed(error)`` (the measurement
failed, with why) or ``None`` (failed, no error text); a pair or node left out of a mapping was
not measured and is not judged.

May import: orchestrator.analysis.rated, workloads.throttle.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.analysis.rated import pcie_training
from workloads.throttle import SLOWDOWN_MASK, reason_names

MAD_TO_SIGMA = 1.4826
"""MAD x 1.4826 estimates the standard deviation of normal data (the MAD's consistency factor)."""
MIN_TO_COMPARE = 3
"""Fewer values than this and a median/MAD comparison can flag nothing: with two values the
lower one always lies within 3 scaled MADs of their mean, so the check says so in a note."""


@dataclass(frozen=True)
class Failed:
    """A measurement that failed, and why (the probe's or the collective's error text)."""

    error: str


Value = float | Failed | None
"""A measured figure: a float, Failed(error), or None (failed, no error text)."""


@dataclass(frozen=True)
class Rule:
    """When a node's or a pair's figure is low against the fleet (docs/fleet.md)."""

    rel: float = 0.15
    """Low only when below median * (1 - rel): 15% below the fleet, more than run-to-run noise
    of a healthy link or GPU and well under the 2x-4x of a half-width PCIe link or a bad cable."""
    mad_k: float = 3.0
    """...and below median - mad_k * 1.4826 * MAD: 3 robust standard deviations, the usual
    outlier bound (about 1 in 700 of normal noise falls below it)."""
    min_partners: int = 2
    """A node is named from pairs only when slow with at least min(this, its partners) partners
    (and most of them): one slow partner could be that partner's fault."""
    floor: float = 0.25
    """A figure below median * floor (4x slower) is low whatever the spread: the MAD of the
    handful of values a small fleet compares with can reach below zero (the emulated cluster,
    2026-11-24: pairs 0.50, 0.76, 0.98 GB/s put the MAD bound at -0.24, and a node at 0.012,
    98% below, went unnamed). No noise seen here came near it (the lowest healthy pair read 57%
    of the others' median). Never above ``1 - rel``: it only lifts a bound the MAD dragged down."""

    def __post_init__(self) -> None:
        if not 0 < self.rel < 1:
            raise ValueError(f"Rule.rel: {self.rel!r} must be between 0 and 1 (exclusive)")
        if not self.mad_k >= 0:
            raise ValueError(f"Rule.mad_k: {self.mad_k!r} must be >= 0")
        if isinstance(self.min_partners, bool) or not isinstance(self.min_partners, int):
            raise ValueError(f"Rule.min_partners: {self.min_partners!r} must be an int >= 1")
        if self.min_partners < 1:
            raise ValueError(f"Rule.min_partners: {self.min_partners!r} must be an int >= 1")
        if not 0 <= self.floor < 1:
            raise ValueError(f"Rule.floor: {self.floor!r} must be >= 0 and < 1")

    def to_dict(self) -> dict[str, Any]:
        """The parameters as ``fleet_checks.rule`` stores them."""
        return asdict(self)


CPU_REL = 0.5
"""``rel`` when a node of the fleet has no GPU: gloo over sockets with CPU-bound ranks. On the
emulated 4-node cluster (2 shared cores), unshaped pairs of healthy checks read up to 44% below
the others once (0.515 vs 0.86-0.92 GB/s) and one pair 16% low twice in a row (0.726 vs a
median of 0.869; CI, 2026-11-24), so 15% names noise there; the planted faults it must find are
80-99% below. GPU fleets keep ``Rule.rel``."""


def default_rule(gpu_fleet: bool) -> Rule:
    """The rule a check uses when ``--threshold`` is not given."""
    return Rule() if gpu_fleet else Rule(rel=CPU_REL)


@dataclass(frozen=True)
class Bound:
    """A fleet reference: the median and MAD of per-node figures, and the bound below which a
    figure is low."""

    median: float
    mad: float
    value: float
    """min(median * (1 - rel), median - mad_k * 1.4826 * MAD), lifted to median * floor when
    below it (never above the relative bound): ``bound_of``."""
    n: int
    """How many node figures the median and MAD were taken over."""

    def low(self, x: float) -> bool:
        return x < self.value

    def below_text(
        self, what: str, x: float, unit: str, where: str = "", of: str = "the fleet median"
    ) -> str:
        """``busbw 0.012 GB/s on link net is 76% below the fleet median 0.050 GB/s (bound
        0.043)``: ``what`` names the figure, ``where`` (`` on link net``) where it was measured."""
        f = _fmt(self.median)
        pct = (1 - x / self.median) * 100 if self.median > 0 else 0.0
        return (
            f"{what} {f(x)} {unit}{where} is {pct:.0f}% below {of} {f(self.median)} "
            f"{unit} (bound {f(self.value)})"
        )


def _fmt(ref: float):
    """A number formatter with the precision the reference's size calls for, so the value, the
    median and the bound of one sentence are written alike (0.012 / 0.050; 37.2 / 50.1)."""
    a = abs(ref)
    digits = 0 if a >= 100 else 1 if a >= 10 else 2 if a >= 1 else 3
    return lambda x: f"{x:.{digits}f}"


def low(x: float, ref: float, mad: float, rule: Rule) -> bool:
    """Whether ``x`` is low against a fleet median ``ref`` with spread ``mad`` (both bounds)."""
    return x < bound_of(ref, mad, rule)


def bound_of(ref: float, mad: float, rule: Rule) -> float:
    """The figure below which a value is low: the lower of the relative and the MAD bound, but
    never under ``ref * floor`` (capped at the relative bound)."""
    rel_bound = ref * (1 - rule.rel)
    bound = min(rel_bound, ref - rule.mad_k * MAD_TO_SIGMA * mad)
    return max(bound, min(ref * rule.floor, rel_bound))


def upper_median(xs: Sequence[float]) -> float:
    """The highest value that at least half of ``xs`` reach: the median of an odd count, the
    upper of the two middle values of an even count (of two pairs, the faster). A node's pair
    score: a good node next to a bad one keeps its good pair's figure instead of the mean of
    good and bad, which with 2 partners (``ring``) would drag both neighbours of a bad node
    halfway down and, on fleets of 4-6, the fleet median and MAD with them."""
    return sorted(xs)[len(xs) // 2]


def fleet_bound(values: Sequence[float], rule: Rule) -> Bound:
    """The median, MAD and bound of per-node figures (at least one)."""
    med = statistics.median(values)
    mad = statistics.median([abs(v - med) for v in values])
    return Bound(med, mad, bound_of(med, mad, rule), len(values))


@dataclass(frozen=True)
class NodeVerdict:
    suspect: bool
    reasons: tuple[str, ...]
    """Every reason the node is a suspect; empty when it is not."""


@dataclass(frozen=True)
class PairVerdict:
    """A measured pair (or a node's intra-node check, in ``Verdict.intra``)."""

    slow: bool
    """Failed, or below the fleet's bound."""
    suspect: bool
    """Slow and not explained by a suspect node: a single slow pair (always False for intra,
    whose node carries the reason)."""
    why: str | None


@dataclass(frozen=True)
class Verdict:
    nodes: dict[str, NodeVerdict]
    pairs: dict[tuple[str, str, str], PairVerdict]
    """(link, node_a, node_b) -> verdict, for every measured inter-node pair."""
    intra: dict[tuple[str, str], PairVerdict]
    """(link, node) -> verdict, for every measured intra-node check."""
    notes: tuple[str, ...]
    """What the rule could not judge, and why."""
    bounds: dict[tuple[str, str | None], Bound]
    """(check, link) -> the fleet reference: ("inter", link) over node scores, ("intra", link),
    ("compute", None). (A single pair is judged against the other pairs between non-suspect
    nodes, one bound per pair, not kept here.)"""

    def suspect_nodes(self) -> list[str]:
        return [n for n, v in self.nodes.items() if v.suspect]

    def suspect_pairs(self) -> list[tuple[str, str, str]]:
        return [k for k, v in self.pairs.items() if v.suspect]


def error_of(v: Value) -> str | None:
    """None for a float; the error text (or a stand-in) for a failed measurement."""
    if isinstance(v, Failed):
        return v.error
    return "no error text" if v is None else None


def _names(xs: Collection[str]) -> str:
    return ", ".join(sorted(xs))


PairBusbw = dict[tuple[str, str], tuple[float, str | None]]
"""(node_a, node_b) -> (busbw, error): a failed pair counts 0.0 and carries its error."""
Partners = dict[str, list[tuple[str, float, bool]]]
"""node -> (partner, busbw, failed) for each pair it is in."""
PairSlow = dict[tuple[str, str], tuple[bool, str | None]]
"""(node_a, node_b) -> (slow, why)."""


def _link_pairs(
    link: str, nodes: Sequence[str], measured: Mapping[tuple[str, str], Value]
) -> tuple[PairBusbw, Partners]:
    """One link's pairs by pair and by node; ValueError for a pair naming an unknown node, a
    self-pair or a pair given twice."""
    known = set(nodes)
    busbw: PairBusbw = {}
    partners: Partners = {}
    seen: set[frozenset[str]] = set()
    for (a, b), v in measured.items():
        for x in (a, b):
            if x not in known:
                raise ValueError(f"pairs[{link!r}]: node {x!r} of pair ({a}, {b}) is not a node")
        if a == b or frozenset((a, b)) in seen:
            raise ValueError(f"pairs[{link!r}]: pair ({a}, {b}) is a self-pair or given twice")
        seen.add(frozenset((a, b)))
        err = error_of(v)
        busbw[(a, b)] = (0.0 if err is not None else float(v), err)  # type: ignore[arg-type]
        partners.setdefault(a, []).append((b, busbw[(a, b)][0], err is not None))
        partners.setdefault(b, []).append((a, busbw[(a, b)][0], err is not None))
    return busbw, partners


def _leave_one_out(
    node: str, scores: Mapping[str, float], busbw: PairBusbw, bound: Bound, rule: Rule
) -> tuple[Bound, Bound]:
    """The references ``node`` is judged against, itself left out: its score against the other
    nodes' scores, its pairs against the pairs it is not in (``bound`` where nothing is left).
    With 4 nodes one bad node and one noisy pair (which drags two healthy scores) would
    otherwise widen the MAD past the bad node itself; and on a noisy network a healthy node's
    pairs scatter like everyone's."""
    rest = [v for m, v in scores.items() if m != node]
    score_bound = fleet_bound(rest, rule) if rest else bound
    others = [x for k, (x, err) in busbw.items() if node not in k and err is None]
    pair_bound = fleet_bound(others, rule) if others else bound
    return score_bound, pair_bound


def _name_slow_nodes(
    link: str,
    partners: Partners,
    busbw: PairBusbw,
    scores: Mapping[str, float],
    bound: Bound,
    rule: Rule,
    reasons: dict[str, list[str]],
    pair_slow: PairSlow,
) -> None:
    """Each node whose score is low and that is slow with most of its partners gets a reason
    (into ``reasons``); its slow pairs are slow, whatever the fleet-wide bound says (into
    ``pair_slow``). Nodes with min_partners partners or more first: a node with fewer is named
    only when its slow pairs are not explained by a partner already named (sample:K gives odd
    fleets byes)."""
    named: set[str] = set()
    order = sorted(partners, key=lambda n: len(partners[n]) < rule.min_partners)
    for n in order:
        ps = partners[n]
        score_bound, loo = _leave_one_out(n, scores, busbw, bound, rule)
        slow = [p for p, x, failed in ps if failed or loo.low(x)]
        few = len(ps) < rule.min_partners
        most = len(slow) * 2 > len(ps) and len(slow) >= min(rule.min_partners, len(ps))
        if not score_bound.low(scores[n]) or not most:
            continue
        if few and all(p in named for p in slow):
            continue
        named.add(n)
        failed = sum(f for _, _, f in ps)
        what = f"link {link}: slow with {len(slow)} of {len(ps)} partners" + (
            f" ({failed} failed)" if failed else ""
        )
        reasons[n].append(
            what + "; " + score_bound.below_text("its median busbw", scores[n], "GB/s")
        )
        for p, x, f in ps:
            k = (n, p) if (n, p) in pair_slow else (p, n)
            if not f and loo.low(x) and not pair_slow[k][0]:
                pair_slow[k] = (True, loo.below_text("busbw", x, "GB/s", f" on link {link}"))


def _inter_link(
    link: str,
    nodes: Sequence[str],
    measured: Mapping[tuple[str, str], Value],
    rule: Rule,
    reasons: dict[str, list[str]],
    notes: list[str],
    bounds: dict[tuple[str, str | None], Bound],
) -> PairSlow:
    """Node reasons from one link's pairs (into ``reasons``); per pair (slow, its why)."""
    busbw, partners = _link_pairs(link, nodes, measured)
    failed_why = {k: f"all_reduce failed: {err}" for k, (_, err) in busbw.items() if err}
    if len(partners) < MIN_TO_COMPARE:
        notes.append(
            f"link {link}: only {len(partners)} nodes in pairs: a slow pair has nothing to be "
            "compared with and cannot be attributed to either node (compute probe and health "
            "still judge each node)"
        )
        return {k: (k in failed_why, failed_why.get(k)) for k in busbw}
    scores = {n: upper_median([x for _, x, _ in ps]) for n, ps in partners.items()}
    bound = fleet_bound(list(scores.values()), rule)
    bounds[("inter", link)] = bound
    pair_slow: PairSlow = {}
    for k, (x, _) in busbw.items():
        if k in failed_why:
            pair_slow[k] = (True, failed_why[k])
        elif bound.low(x):
            pair_slow[k] = (True, bound.below_text("busbw", x, "GB/s", f" on link {link}"))
        else:
            pair_slow[k] = (False, None)
    _name_slow_nodes(link, partners, busbw, scores, bound, rule, reasons, pair_slow)
    lonely = sorted(n for n, ps in partners.items() if len(ps) < rule.min_partners)
    if lonely:
        notes.append(
            f"link {link}: {_names(lonely)} measured with fewer than {rule.min_partners} partners: "
            "a slow pair there names such a node unless its partner is already a suspect "
            "(--pairs all, or a larger sample:K, tells them apart)"
        )
    return pair_slow


def _node_check(
    check: str,
    values: Mapping[str, Value],
    skip: Collection[str],
    rule: Rule,
    what: str,
    unit: str,
    reasons: dict[str, list[str]],
    notes: list[str],
) -> tuple[Bound | None, dict[str, tuple[bool, str | None]]]:
    """A per-node check (intra busbw of one link, or the compute probe): each node against the
    fleet's median and MAD of that check. Failed measurements are reasons, also on a shared host
    (a failure is not a difference between machines)."""
    out: dict[str, tuple[bool, str | None]] = {}
    judged: dict[str, float] = {}
    for n, v in values.items():
        if n not in reasons:
            raise ValueError(f"{check}: node {n!r} is not a node")
        err = error_of(v)
        if err is not None:
            out[n] = (True, f"{what} failed: {err}")
            reasons[n].append(f"{what} failed: {err}")
        elif n not in skip:
            judged[n] = float(v)  # type: ignore[arg-type]
    if len(judged) == MIN_TO_COMPARE - 1 and rule.floor > 0:
        # two nodes: the slower is named only at a quarter of the other or less, a gap no
        # noise makes (a GPU is never 4x faster than healthy); closer, nothing tells them apart
        (n, x), (_, ref) = sorted(judged.items(), key=lambda kv: kv[1])
        if x <= ref * rule.floor:
            f = _fmt(ref)
            why = (
                f"{what} {f(x)} {unit} is {ref / max(x, 1e-300):.1f}x below the other node's "
                f"{f(ref)} {unit} (of two nodes, {1 / rule.floor:g}x or more names the slower)"
            )
            out[n] = (True, why)
            reasons[n].append(why)
    if len(judged) < MIN_TO_COMPARE:
        if values:
            notes.append(
                f"{what}: only {len(judged)} node(s) to compare (nodes sharing a machine are "
                "not judged): no suspect from it"
                + (
                    f" unless {1 / rule.floor:g}x slower than the other"
                    if len(judged) == 2 and rule.floor
                    else ""
                )
            )
        return None, {n: out.get(n, (False, None)) for n in values}
    bound = fleet_bound(list(judged.values()), rule)
    for n in values:
        x = judged.get(n)
        if n in out:
            continue
        if x is not None and bound.low(x):
            why = bound.below_text(what, x, unit)
            out[n] = (True, why)
            reasons[n].append(why)
        else:
            out[n] = (False, None)
    return bound, out


def judge(
    nodes: Sequence[str],
    pairs: Mapping[str, Mapping[tuple[str, str], Value]],
    intra: Mapping[str, Mapping[str, Value]],
    compute: Mapping[str, Value],
    health: Mapping[str, Sequence[str]],
    shared_host: Collection[str] = (),
    rule: Rule = Rule(),
) -> Verdict:
    """The verdict of one fleet check (see the module docstring and docs/fleet.md).

    ``pairs``: per link, inter-node busbw (GB/s) per pair (node_a, node_b); ``intra``: per link,
    intra-node busbw per node; ``compute``: tokens/s of the compute probe per node; ``health``:
    per node, reasons already found (``health_reasons``); ``shared_host``: nodes sharing a
    machine with another node, whose intra and compute figures are not compared."""
    if len(set(nodes)) != len(nodes):
        raise ValueError(f"nodes: duplicate node ids in {list(nodes)}")
    reasons: dict[str, list[str]] = {n: [] for n in nodes}
    notes: list[str] = []
    bounds: dict[tuple[str, str | None], Bound] = {}
    for n, why in health.items():
        if n not in reasons:
            raise ValueError(f"health: node {n!r} is not a node")
        reasons[n].extend(why)
    skip = set(shared_host) & set(nodes)
    if skip:
        notes.append(
            f"{_names(skip)} share a machine with another node: their intra-node and compute "
            "checks measure the same hardware, so differences there are not judged"
        )
    slow_pairs = {
        link: _inter_link(link, nodes, measured, rule, reasons, notes, bounds)
        for link, measured in pairs.items()
    }
    intra_v: dict[tuple[str, str], PairVerdict] = {}
    for link, values in intra.items():
        what = f"intra-node busbw on link {link}"
        b, out = _node_check("intra", values, skip, rule, what, "GB/s", reasons, notes)
        if b is not None:
            bounds[("intra", link)] = b
        intra_v.update({(link, n): PairVerdict(s, False, w) for n, (s, w) in out.items()})
    b, _ = _node_check("compute", compute, skip, rule, "compute probe", "tokens/s", reasons, notes)
    if b is not None:
        bounds[("compute", None)] = b
    suspects = {n for n, r in reasons.items() if r}
    pairs_v: dict[tuple[str, str, str], PairVerdict] = {}
    for link, out in slow_pairs.items():
        # a single pair is judged against the other pairs between nodes that are not suspects
        # (leave one out: its own deviation must not widen the spread it is judged by): on a
        # noisy network (a shared host, a busy switch) pairs scatter more than the nodes'
        # scores, which are medians; a pair within the others' scatter is noise
        clean = {
            k: float(v)  # type: ignore[arg-type]
            for k, v in pairs[link].items()
            if error_of(v) is None and not set(k) & suspects
        }
        for (a, c), (slow, why) in out.items():
            by = [x for x in (a, c) if x in suspects]
            others = [x for k, x in clean.items() if k != (a, c)]
            spread = fleet_bound(others, rule) if len(others) >= MIN_TO_COMPARE - 1 else None
            if slow and by:
                why = f"{why}; explained by suspect node {' and '.join(by)}"
            elif slow and (a, c) in clean:
                if spread is None or not spread.low(clean[(a, c)]):
                    slow, why = False, None  # within the other pairs' scatter
                else:
                    of = "the median of the other pairs between non-suspect nodes"
                    x = clean[(a, c)]
                    why = (
                        spread.below_text("busbw", x, "GB/s", f" on link {link}", of=of)
                        + f"; a single slow pair: {a} and {c} are fine with their other partners"
                    )
            pairs_v[(link, a, c)] = PairVerdict(slow, slow and not by, why)
    return Verdict(
        {n: NodeVerdict(bool(r), tuple(r)) for n, r in reasons.items()},
        pairs_v,
        intra_v,
        tuple(notes),
        bounds,
    )


def _gpu(g: Mapping[str, Any]) -> str:
    return f"GPU{g.get('index', '?')}" + (f" on {g['node']}" if g.get("node") else "")


def health_reasons(gpus: Sequence[Mapping[str, Any]]) -> list[str]:
    """The faults NVML shows in a node's GPUs (``HealthRecord.gpus``), one sentence each.

    A fault: a PCIe link trained narrower than its maximum (``rated.pcie_training``); a PCIe
    generation below the maximum *under load* (at idle NVML's current generation drops to save
    power, so an idle reading is normal); a slowdown clock reason (``throttle.SLOWDOWN_MASK``:
    thermal or hardware protection cut the clock); uncorrected ECC errors; a GPU that could not
    be read. Not a fault: SwPowerCap, BoardLimit, Reliability and the benign bits: the board's
    own limits under load, set on healthy GPUs (``workloads/throttle.py`` says why)."""
    out = []
    for g in gpus:
        if g.get("error"):
            out.append(f"{_gpu(g)} could not be read: {g['error']}")
            continue
        fault, _ = pcie_training(g)
        if fault:
            out.append(fault)
        gc, gm = g.get("pcie_gen_current"), g.get("pcie_gen_max")
        if g.get("under_load") and gc and gm and gc < gm:
            out.append(
                f"{_gpu(g)} PCIe at gen{gc} of gen{gm} under load: the link trained at a lower "
                "generation (at idle a lower generation is normal power saving, not under load)"
            )
        bits = g.get("clock_reasons") or 0
        if bits & SLOWDOWN_MASK:
            out.append(f"{_gpu(g)} {','.join(reason_names(bits & SLOWDOWN_MASK))}")
        ecc = g.get("ecc_uncorrected")
        if ecc:
            out.append(f"{_gpu(g)} {ecc} uncorrected ECC errors since the driver loaded")
    return out
