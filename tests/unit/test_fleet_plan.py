"""The fleet check's pair schedule (orchestrator/fleet/pairs.py) for N = 2..17: every pair once for
``all`` in the fewest rounds, two partners per node for ``ring``, reproducible draws for
``sample:K``, no node twice in any round, and --pairs parsing with errors that name the flag."""

from __future__ import annotations

from collections import Counter
from itertools import combinations

import pytest

from orchestrator.fleet.pairs import PairsChoice, pair_rounds, parse_pairs, ring, tournament

SIZES = range(2, 18)


def _nodes(n: int) -> list[str]:
    # ids that do not sort like their positions, so the pair order is checked against ``nodes``
    return [f"node-{(7 * i) % 101:03d}" for i in range(n)]


def _assert_rounds_disjoint(rounds):
    for r in rounds:
        used = [x for pair in r for x in pair]
        assert len(used) == len(set(used)), f"a node is in two pairs of round {r}"


def _assert_ordered(rounds, nodes):
    pos = {n: i for i, n in enumerate(nodes)}
    for r in rounds:
        for a, b in r:
            assert pos[a] < pos[b], (a, b)


@pytest.mark.parametrize("n", SIZES)
def test_all_is_a_tournament_every_pair_once(n):
    nodes = _nodes(n)
    rounds = pair_rounds(nodes, parse_pairs("all"))
    flat = [p for r in rounds for p in r]
    assert Counter(flat) == Counter(combinations(nodes, 2))  # every pair exactly once, in order
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    _assert_rounds_disjoint(rounds)
    _assert_ordered(rounds, nodes)
    # full rounds: floor(N/2) pairs in each, so an odd fleet sits exactly one node out per round
    assert {len(r) for r in rounds} == {n // 2}
    if n % 2:
        byes = [next(iter(set(nodes) - {x for p in r for x in p})) for r in rounds]
        assert sorted(byes) == sorted(nodes)


@pytest.mark.parametrize("n", SIZES)
def test_ring_gives_every_node_its_two_neighbours(n):
    nodes = _nodes(n)
    rounds = pair_rounds(nodes, parse_pairs("ring"))
    flat = [p for r in rounds for p in r]
    assert len(flat) == len(set(flat))
    _assert_rounds_disjoint(rounds)
    _assert_ordered(rounds, nodes)
    if n == 2:
        assert rounds == [[(nodes[0], nodes[1])]]
        return
    assert len(rounds) == (2 if n % 2 == 0 else 3)
    partners = Counter(x for p in flat for x in p)
    assert partners == {x: 2 for x in nodes}
    wanted = {tuple(sorted((nodes[i], nodes[(i + 1) % n]), key=nodes.index)) for i in range(n)}
    assert set(flat) == wanted


@pytest.mark.parametrize("n", SIZES)
def test_sample_draws_whole_tournament_rounds_reproducibly(n):
    nodes = _nodes(n)
    every = set(combinations(nodes, 2))
    for k in (1, 2, 3):
        choice = parse_pairs(f"sample:{k}")
        rounds = pair_rounds(nodes, choice, seed=11)
        assert rounds == pair_rounds(nodes, choice, seed=11)  # seeded: the same draw again
        flat = [p for r in rounds for p in r]
        assert set(flat) <= every and len(flat) == len(set(flat))  # a subset, no repeats
        _assert_rounds_disjoint(rounds)
        _assert_ordered(rounds, nodes)
        if k >= n - 1:
            assert rounds == pair_rounds(nodes, parse_pairs("all"))
        else:
            assert len(rounds) == k
            assert all(r in tournament(nodes) for r in rounds)


def test_sample_seeds_draw_different_rounds():
    nodes = _nodes(12)
    draws = {str(pair_rounds(nodes, parse_pairs("sample:3"), seed=s)) for s in range(8)}
    assert len(draws) > 1


def test_fewer_than_two_nodes_have_no_rounds():
    for choice in ("all", "ring", "sample:2"):
        assert pair_rounds([], parse_pairs(choice)) == []
        assert pair_rounds(["solo"], parse_pairs(choice)) == []


def test_duplicate_node_ids_are_refused():
    for fn in (tournament, ring):
        with pytest.raises(ValueError, match=r"nodes: duplicate node ids \['b'\]"):
            fn(["a", "b", "c", "b"])


@pytest.mark.parametrize(
    "text, kind, k, label",
    [
        ("all", "all", None, "all"),
        (" RING ", "ring", None, "ring"),
        ("sample:1", "sample", 1, "sample:1"),
        ("sample:12", "sample", 12, "sample:12"),
    ],
)
def test_parse_pairs(text, kind, k, label):
    choice = parse_pairs(text)
    assert (choice.kind, choice.k, choice.label()) == (kind, k, label)


@pytest.mark.parametrize("text", ["", "every", "sample", "sample:0", "sample:-1", "sample:x", "3"])
def test_bad_pairs_text_names_the_flag_and_the_forms(text):
    with pytest.raises(ValueError) as err:
        parse_pairs(text)
    msg = str(err.value)
    assert msg.startswith("--pairs:") and repr(text) in msg
    assert "all, ring or sample:K with K >= 1" in msg


def test_pairs_choice_validates_its_fields():
    with pytest.raises(ValueError, match="PairsChoice.k"):
        PairsChoice("sample", 0)
    with pytest.raises(ValueError, match="PairsChoice.k"):
        PairsChoice("all", 3)
    with pytest.raises(ValueError, match="PairsChoice.kind"):
        PairsChoice("star")  # type: ignore[arg-type]


def test_disjoint_rounds_put_no_node_twice_in_a_round_and_keep_every_pair():
    from orchestrator.fleet.pairs import disjoint_rounds

    pairs = [("a", "b"), ("a", "c"), ("b", "c"), ("c", "d"), ("e", "f")]
    rounds = disjoint_rounds(pairs)
    assert sorted(p for r in rounds for p in r) == sorted(pairs)
    for r in rounds:
        nodes = [x for p in r for x in p]
        assert len(nodes) == len(set(nodes))
    assert rounds[0] == [("a", "b"), ("c", "d"), ("e", "f")]
    assert disjoint_rounds([]) == []
