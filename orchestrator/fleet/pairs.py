"""The fleet check's pair schedule: which node pairs are measured, in which rounds. Pure.

A fleet check (``linksweep fleet``) measures inter-node all_reduce busbw between two nodes at a
time. Pairs that share no node can run at once, so pairs are grouped into *rounds*: no node is in
two pairs of a round, and a round's pairs do not contend for a node's NIC. What ``--pairs``
chooses:

- ``all``: every pair exactly once, as a round-robin tournament by the circle method (fix the
  first node, rotate the others one place per round; with an odd count a phantom node is added
  and whoever meets it sits the round out). N-1 rounds for even N, N for odd N: the fewest
  possible, since each round holds at most floor(N/2) of the N(N-1)/2 pairs.
- ``ring``: each node with its two neighbours in ``nodes`` order, (i, i+1 mod N). The ring's
  edges split into the even-numbered and the odd-numbered ones: 2 rounds for even N; an odd ring
  needs a third round for the edge closing it (an odd cycle cannot be 2-coloured). N = 2: the
  one pair, one round. Each node meets 2 partners, in time independent of N.
- ``sample:K``: K rounds of the tournament, drawn at random (``random.Random(seed)``: the same
  seed gives the same rounds on every machine), so each node meets about K partners (K, or K-1
  in a round where an odd fleet gives it the bye). K >= N-1 is ``all``. Whole rounds are drawn,
  rather than random pairs, so every drawn round is still full and no node waits twice.

Why several partners per node matter: a slow node is told from a slow pair by being slow with
most of its partners (``orchestrator/fleet/suspects.py``); ``ring`` gives 2, ``sample:K`` about K,
``all`` N-1. Every pair is written in the order its nodes appear in ``nodes``.

May import: nothing (the standard library only).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

PAIRS_FORMS = "all, ring or sample:K with K >= 1"
"""The forms ``--pairs`` accepts, as an error message quotes them."""

_SAMPLE_RE = re.compile(r"^sample:(\d+)$")

Round = list[tuple[str, str]]


@dataclass(frozen=True)
class PairsChoice:
    """Which pairs a fleet check measures (``--pairs``)."""

    kind: Literal["all", "ring", "sample"]
    """all: every pair; ring: each node with its two neighbours; sample: K tournament rounds."""
    k: int | None = None
    """sample only: how many tournament rounds to draw (>= 1); None for all and ring."""

    def __post_init__(self) -> None:
        if self.kind not in ("all", "ring", "sample"):
            raise ValueError(f"PairsChoice.kind: {self.kind!r} is not one of all, ring, sample")
        if self.kind == "sample":
            if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
                raise ValueError(f"PairsChoice.k: {self.k!r} for sample must be an int >= 1")
        elif self.k is not None:
            raise ValueError(
                f"PairsChoice.k: {self.k!r} given for {self.kind}; only sample takes K"
            )

    def label(self) -> str:
        """``all``, ``ring`` or ``sample:K``: what ``--pairs`` took and ``fleet_checks`` stores."""
        return f"sample:{self.k}" if self.kind == "sample" else self.kind


def parse_pairs(text: str) -> PairsChoice:
    """``--pairs`` text -> PairsChoice; anything else raises ValueError naming the flag."""
    t = str(text).strip().lower()
    if t in ("all", "ring"):
        return PairsChoice(t)  # type: ignore[arg-type]
    m = _SAMPLE_RE.match(t)
    if m and int(m.group(1)) >= 1:
        return PairsChoice("sample", int(m.group(1)))
    raise ValueError(f"--pairs: {text!r} is not one of the allowed forms: {PAIRS_FORMS}")


def _check_nodes(nodes: Sequence[str]) -> list[str]:
    dup = sorted(n for n, count in Counter(nodes).items() if count > 1)
    if dup:
        raise ValueError(f"nodes: duplicate node ids {dup}; each node must appear once")
    return list(nodes)


def _ordered(a: str, b: str, pos: dict[str, int]) -> tuple[str, str]:
    return (a, b) if pos[a] < pos[b] else (b, a)


def tournament(nodes: Sequence[str]) -> list[Round]:
    """Every pair once, in N-1 rounds (even N) or N rounds (odd N): the circle method."""
    ids = _check_nodes(nodes)
    if len(ids) < 2:
        return []
    pos = {n: i for i, n in enumerate(ids)}
    seats: list[str | None] = [*ids, None] if len(ids) % 2 else list(ids)  # None: the bye
    m = len(seats)
    rounds: list[Round] = []
    for _ in range(m - 1):
        pairs = [(seats[i], seats[m - 1 - i]) for i in range(m // 2)]
        rounds.append([_ordered(a, b, pos) for a, b in pairs if a is not None and b is not None])
        seats = [seats[0], seats[-1], *seats[1:-1]]  # fix seat 0, rotate the rest one place
    return rounds


def ring(nodes: Sequence[str]) -> list[Round]:
    """Pairs (i, i+1 mod N) in the fewest rounds: 2 for even N, 3 for odd N >= 3, 1 for N = 2."""
    ids = _check_nodes(nodes)
    n = len(ids)
    if n < 2:
        return []
    if n == 2:
        return [[(ids[0], ids[1])]]
    pos = {x: i for i, x in enumerate(ids)}
    edge = [_ordered(ids[i], ids[(i + 1) % n], pos) for i in range(n)]
    if n % 2 == 0:
        return [edge[0::2], edge[1::2]]
    return [edge[0 : n - 1 : 2], edge[1 : n - 1 : 2], [edge[n - 1]]]


def pair_rounds(nodes: Sequence[str], choice: PairsChoice, seed: int = 0) -> list[Round]:
    """The rounds of node pairs ``choice`` measures (see the module docstring)."""
    if choice.kind == "ring":
        return ring(nodes)
    rounds = tournament(nodes)
    if choice.kind == "all" or choice.k is None or choice.k >= len(nodes) - 1:
        return rounds
    drawn = sorted(random.Random(seed).sample(range(len(rounds)), choice.k))
    return [rounds[i] for i in drawn]


def disjoint_rounds(pairs: Sequence[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """``pairs`` in rounds with no node twice in a round (greedy, in the order given): for
    measuring again the few pairs a check found slow."""
    rounds: list[list[tuple[str, str]]] = []
    busy: list[set[str]] = []
    for a, b in pairs:
        for r, used in zip(rounds, busy, strict=True):
            if a not in used and b not in used:
                r.append((a, b))
                used.update((a, b))
                break
        else:
            rounds.append([(a, b)])
            busy.append({a, b})
    return rounds
