"""Nodes a sweep keeps off: the spec key, resolving entries against alive nodes,
fleet suspects, capacity without the excluded nodes, the label selector placement uses."""

from __future__ import annotations

import pytest

from orchestrator.cli import main
from orchestrator.sweep.exclusions import (
    excluded_node_ids,
    exclusion_notes,
    label_selector,
    resolve_exclusions,
    resume_entries,
    suspect_entries,
    usable_nodes,
)
from orchestrator.sweep.planner import NodeCapacity, check_capacity
from orchestrator.sweep.spec import SpecError, parse_spec

ID_A = "a1" * 28  # Ray node ids are 56 hex characters
ID_B = "b2" * 28
ID_C = "c3" * 28
NODES = [
    {"node_id": ID_A, "ip": "10.0.0.1", "hostname": "gpu-01.cluster.local"},
    {"node_id": ID_B, "ip": "10.0.0.2", "hostname": "gpu-02.cluster.local"},
    # two Ray nodes started on one machine share its IP and hostname
    {"node_id": ID_C, "ip": "10.0.0.3", "hostname": "shared"},
    {"node_id": "d4" * 28, "ip": "10.0.0.3", "hostname": "shared"},
]
F = "exclude_nodes"


def ids(excluded):
    return [r["node_id"] for r in excluded]


# --- the spec key ----------------------------------------------------------------------------


def test_spec_key_defaults_empty_and_is_stored():
    assert parse_spec({"name": "x"}).exclude_nodes == []
    spec = parse_spec({"name": "x", "exclude_nodes": [" 10.0.0.2 ", ID_A]})
    assert spec.exclude_nodes == ["10.0.0.2", ID_A]  # stripped
    assert spec.to_json_dict()["exclude_nodes"] == ["10.0.0.2", ID_A]
    assert parse_spec({"name": "x", "exclude_nodes": "gpu-01"}).exclude_nodes == ["gpu-01"]


@pytest.mark.parametrize("bad", [[""], ["ok", "  "], [3], ["ok", None], [{"ip": "x"}]])
def test_spec_key_rejects_empty_and_non_string_entries(bad):
    with pytest.raises(SpecError) as exc:
        parse_spec({"name": "x", "exclude_nodes": bad})
    text = str(exc.value)
    assert "exclude_nodes:" in text and "non-empty strings" in text
    assert repr([b for b in bad if b != "ok"]) in text  # names the bad entries


# --- resolution ------------------------------------------------------------------------------


def test_resolve_by_id_ip_and_hostname():
    assert ids(resolve_exclusions([(ID_B, F)], NODES)) == [ID_B]
    assert ids(resolve_exclusions([("10.0.0.1", F)], NODES)) == [ID_A]
    assert ids(resolve_exclusions([("gpu-02.cluster.local", F)], NODES)) == [ID_B]
    assert ids(resolve_exclusions([("GPU-02", F)], NODES)) == [ID_B]  # short name, any case
    assert ids(resolve_exclusions([(ID_A.upper(), F)], NODES)) == [ID_A]
    (r,) = resolve_exclusions([("10.0.0.2", F)], NODES)
    assert r == {
        "entry": "10.0.0.2",
        "source": F,
        "node_id": ID_B,
        "ip": "10.0.0.2",
        "hostname": "gpu-02.cluster.local",
    }


def test_a_partial_name_or_address_matches_nothing():
    # no prefix matching: '10.0.0' or 'gpu' must not exclude anything
    for entry in ("10.0.0", "gpu", "gpu-0", ID_A[:12], "cluster.local"):
        (r,) = resolve_exclusions([(entry, F)], NODES)
        assert r["node_id"] is None, entry


def test_unmatched_entry_is_kept_with_no_node_and_warned():
    excluded = resolve_exclusions([("gone-host", F), (ID_A, F)], NODES)
    assert ids(excluded) == [None, ID_A]  # entry order
    gone = next(r for r in excluded if r["node_id"] is None)
    assert gone == {
        "entry": "gone-host",
        "source": F,
        "node_id": None,
        "ip": None,
        "hostname": None,
    }
    assert excluded_node_ids(excluded) == (ID_A,)
    notes = exclusion_notes(excluded)
    assert any(n.startswith("warning:") and "'gone-host'" in n for n in notes)
    assert any("excluded node " + ID_A[:12] in n for n in notes)


def test_hostname_shared_by_several_nodes_excludes_all_and_says_so():
    excluded = resolve_exclusions([("shared", F)], NODES)
    assert ids(excluded) == [ID_C, "d4" * 28]
    (note,) = exclusion_notes(excluded)
    assert "matches 2 nodes, all excluded" in note and ID_C[:12] in note


def test_duplicates_exclude_a_node_once_under_its_first_entry():
    entries = [
        ("10.0.0.1", F),
        (ID_A, F),  # the same node by id
        ("10.0.0.1", F),  # the same entry twice
        (ID_A, "fleet f1"),  # and by a fleet check
        ("gone", F),
        ("gone", F),
    ]
    excluded = resolve_exclusions(entries, NODES)
    assert [(r["entry"], r["source"], r["node_id"]) for r in excluded] == [
        ("10.0.0.1", F, ID_A),
        ("gone", F, None),
    ]
    assert excluded_node_ids(excluded) == (ID_A,)


def test_usable_nodes_and_label_selector():
    excluded = resolve_exclusions([(ID_B, F), ("10.0.0.1", F), ("gone", F)], NODES)
    caps = [NodeCapacity(n["node_id"], cpus=2, gpus=0) for n in NODES]
    assert [n.node_id for n in usable_nodes(caps, excluded)] == [ID_C, "d4" * 28]
    assert label_selector(excluded_node_ids(excluded)) == {"ray.io/node-id": f"!in({ID_A},{ID_B})"}
    assert label_selector(()) is None


# --- fleet suspects --------------------------------------------------------------------------


def suspect(kind, node_id, ip, partner_id=None, partner_ip=None, why="slow"):
    return {
        "fleet_id": "f1",
        "kind": kind,
        "node_id": node_id,
        "ip": ip,
        "hostname": None,
        "partner_id": partner_id,
        "partner_ip": partner_ip,
        "link": "default" if kind == "pair" else None,
        "why": why,
    }


def test_suspect_nodes_become_entries_and_pairs_only_a_warning():
    rows = [
        suspect("node", ID_B, "10.0.0.2", why="busbw 0.1 of the median with 3 partners"),
        suspect("pair", ID_A, "10.0.0.1", ID_C, "10.0.0.3", why="pair busbw low"),
    ]
    entries, notes = suspect_entries("f1", rows)
    assert entries == [(ID_B, "fleet f1")]
    (warning,) = notes
    assert "10.0.0.1 <-> 10.0.0.3" in warning and "not excluded" in warning
    assert "exclude_nodes" in warning and "pair busbw low" in warning
    excluded = resolve_exclusions(entries, NODES)
    assert [(r["source"], r["node_id"]) for r in excluded] == [("fleet f1", ID_B)]


def test_a_fleet_with_no_suspect_node_says_so():
    entries, notes = suspect_entries("f2", [])
    assert entries == [] and notes == ["fleet f2 named no suspect node: nothing excluded from it"]
    entries, notes = suspect_entries("f3", [suspect("pair", ID_A, "10.0.0.1", ID_B, "10.0.0.2")])
    assert entries == [] and "fleet f3 named no suspect node" in notes[0]


def test_resume_re_resolves_the_fleet_entries_it_stored():
    stored = [
        {"entry": "10.0.0.1", "source": F, "node_id": ID_A, "ip": "10.0.0.1", "hostname": "h"},
        {"entry": ID_B, "source": "fleet f1", "node_id": ID_B, "ip": "10.0.0.2", "hostname": "h"},
        {"entry": ID_C, "source": "fleet f1", "node_id": None, "ip": None, "hostname": None},
    ]
    # the file's own entries come back from the (unchanged) spec, not from the stored list
    assert resume_entries(stored) == [(ID_B, "fleet f1"), (ID_C, "fleet f1")]
    assert resume_entries(None) == []


# --- capacity --------------------------------------------------------------------------------

TWO = [NodeCapacity(ID_A, cpus=2, gpus=0), NodeCapacity(ID_B, cpus=2, gpus=0)]


def test_capacity_counts_only_nodes_not_excluded():
    spread = parse_spec({"name": "x", "world_size": 2, "grid": {"placement": ["spread"]}})
    check_capacity(spread, TWO)
    excluded = resolve_exclusions([("10.0.0.2", F)], NODES)
    with pytest.raises(SpecError) as exc:
        check_capacity(spread, TWO, excluded)
    text = str(exc.value)
    assert "'spread'" in text and "the cluster has 1 node(s)" in text  # what is needed
    assert "allowed: world_size <= 1" in text
    assert "1 excluded node(s)" in text and ID_B[:12] in text and "'10.0.0.2'" in text
    # pack fits on the node left; an unmatched entry changes nothing
    pack = parse_spec({"name": "x", "world_size": 2, "grid": {"placement": ["pack"]}})
    check_capacity(pack, TWO, excluded + resolve_exclusions([("gone", F)], NODES))


def test_capacity_when_every_node_is_excluded():
    pack = parse_spec({"name": "x", "world_size": 1})
    excluded = resolve_exclusions([(ID_A, F), (ID_B, "fleet f1")], NODES)
    with pytest.raises(SpecError) as exc:
        check_capacity(pack, TWO, excluded)
    text = str(exc.value)
    assert "every alive node is excluded" in text
    assert ID_A[:12] in text and ID_B[:12] in text and "fleet f1" in text


def test_capacity_excluding_the_big_node_refuses_pack():
    spec = parse_spec({"name": "x", "world_size": 4, "grid": {"placement": ["pack"]}})
    nodes = [NodeCapacity(ID_A, cpus=32, gpus=4), NodeCapacity(ID_B, cpus=32, gpus=2)]
    check_capacity(spec, nodes)
    with pytest.raises(SpecError) as exc:
        check_capacity(spec, nodes, resolve_exclusions([(ID_A, F)], NODES))
    assert "largest node has 2 GPU" in str(exc.value)


def test_run_help_documents_exclusion(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert "--exclude-suspects FLEET_ID" in out and "exclude_nodes:" in out
    assert "sweeps.excluded_nodes" in out
