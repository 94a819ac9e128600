"""Planted faults of the emulated cluster, pure: parsing `--slow-node` / `--slow-pair`, their
checks, the exact tc commands the plan carries for them, and `planted_faults` on a state.
No root, no subprocess, no Ray. The real thing is tests/integration/test_emulated_faults.py.
"""

from __future__ import annotations

import shlex
from collections import Counter

import pytest

from orchestrator.emulated import (
    Fault,
    LinkShape,
    combine_shapes,
    parse_link_arg,
    parse_slow_node_arg,
    parse_slow_pair_arg,
    plan_emulated,
    planted_faults,
)


def _qdisc_steps(plan) -> dict[str, list[str]]:
    """{"lsn2/ls-ctl": ["tc -n lsn2 qdisc add ...", ...]} for every qdisc step."""
    return {s.name: [shlex.join(c) for c in s.up] for s in plan.steps if s.kind == "qdisc"}


# --------------------------------------------------------------------------------------
# Arguments


@pytest.mark.parametrize(
    "arg, expected",
    [
        ("2=100mbit", Fault("node", (2,), "100mbit")),
        ("0=1gbit,1ms", Fault("node", (0,), "1gbit", "1ms")),
        ("3=,200us", Fault("node", (3,), None, "200us")),
    ],
)
def test_parse_slow_node(arg, expected):
    assert parse_slow_node_arg(arg) == expected
    assert expected.spec() == arg


def test_parse_slow_pair_is_unordered():
    assert parse_slow_pair_arg("1-0=50mbit") == Fault("pair", (0, 1), "50mbit")
    assert parse_slow_pair_arg("0-1=50mbit,2ms") == Fault("pair", (0, 1), "50mbit", "2ms")
    assert Fault("pair", (0, 1), "50mbit").describe() == "pair 0-1 at 50mbit"
    assert Fault("node", (2,), "1mbit", "1ms").describe() == "node 2 at 1mbit +1ms one-way"


@pytest.mark.parametrize(
    "parse, arg, names",
    [
        (parse_slow_node_arg, "2", ["--slow-node", "'2'", "RATE"]),
        (parse_slow_node_arg, "2=", ["--slow-node", "RATE"]),
        (parse_slow_node_arg, "x=100mbit", ["--slow-node", "'x'", "node index"]),
        (parse_slow_node_arg, "-1=100mbit", ["--slow-node", "'-1'"]),
        (parse_slow_node_arg, "2=100mbps", ["--slow-node", "'100mbps'", "100mbit"]),
        (parse_slow_node_arg, "2=100mbit,1 ms", ["--slow-node", "'1 ms'", "200us"]),
        (parse_slow_node_arg, "2=1mbit,2ms,3", ["--slow-node", "malformed"]),
        (parse_slow_node_arg, "2=0mbit", ["--slow-node", "positive"]),
        (parse_slow_pair_arg, "1=50mbit", ["--slow-pair", "'1'", "A-B"]),
        (parse_slow_pair_arg, "1-1=50mbit", ["--slow-pair", "distinct", "'1-1'"]),
        (parse_slow_pair_arg, "0-1-2=50mbit", ["--slow-pair", "'0-1-2'"]),
        (parse_slow_pair_arg, "0-1=fast", ["--slow-pair", "'fast'", "tc bit rate"]),
    ],
)
def test_bad_fault_arguments_name_the_flag_and_the_value(parse, arg, names):
    with pytest.raises(ValueError) as e:
        parse(arg)
    for name in names:
        assert name in str(e.value)


@pytest.mark.parametrize(
    "nodes, faults, names",
    [
        (4, ["node:4=100mbit"], ["--slow-node 4=100mbit", "node 4", "--nodes 4", "0..3"]),
        (3, ["pair:0-3=1mbit"], ["--slow-pair 0-3=1mbit", "node 3", "0..2"]),
        (4, ["node:1=1mbit", "node:1=2mbit"], ["--slow-node 1=2mbit", "twice"]),
        (4, ["pair:0-1=1mbit", "pair:1-0=2mbit"], ["--slow-pair 0-1=2mbit", "twice"]),
    ],
)
def test_plan_checks_faults_against_the_cluster(nodes, faults, names):
    parsed = [
        (parse_slow_node_arg if f.startswith("node:") else parse_slow_pair_arg)(f[5:])
        for f in faults
    ]
    with pytest.raises(ValueError) as e:
        plan_emulated(nodes, [], faults=parsed)
    for name in names:
        assert name in str(e.value)


def test_cluster_command_rejects_bad_faults_with_exit_2_before_root(capsys):
    from orchestrator.cli import main

    up = ["cluster", "up", "--emulated", "--state-dir", "/tmp/unused", "--nodes", "4"]
    assert main([*up, "--slow-node", "4=100mbit"]) == 2
    err = capsys.readouterr().err
    assert "--slow-node 4=100mbit" in err and "0..3" in err
    assert main([*up, "--slow-pair", "2-2=50mbit"]) == 2
    assert "distinct" in capsys.readouterr().err
    assert main([*up, "--slow-node", "1=fast"]) == 2
    assert "'fast'" in capsys.readouterr().err


def test_python_m_orchestrator_emulated_takes_the_fault_flags():
    import argparse

    from orchestrator.commands.cluster import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    a = p.parse_args(["up", "--slow-node", "2=1mbit", "--slow-node", "3=2mbit", "--slow-pair",
                      "0-1=5mbit"])  # fmt: skip
    assert (a.slow_node, a.slow_pair) == (["2=1mbit", "3=2mbit"], ["0-1=5mbit"])


# --------------------------------------------------------------------------------------
# The plan's tc commands


def test_slow_node_shapes_both_directions_of_every_link_ctl_included():
    plan = plan_emulated(4, [parse_link_arg("fast")], faults=[parse_slow_node_arg("2=100mbit")])
    tbf = "tbf rate 100mbit burst 125000 latency 50ms"
    assert _qdisc_steps(plan) == {
        # node 2's egress, in its namespace
        "lsn2/ls-ctl": [f"tc -n lsn2 qdisc add dev ls-ctl root handle 1: {tbf}"],
        "lsn2/ls-fast": [f"tc -n lsn2 qdisc add dev ls-fast root handle 1: {tbf}"],
        # node 2's ingress: the switch-side peer's egress, in the switch namespace
        "lssw/n2-0": [f"tc -n lssw qdisc add dev n2-0 root handle 1: {tbf}"],
        "lssw/n2-1": [f"tc -n lssw qdisc add dev n2-1 root handle 1: {tbf}"],
    }
    down = {s.name: s.down for s in plan.steps if s.kind == "qdisc"}
    assert down["lssw/n2-0"] == (("tc", "-n", "lssw", "qdisc", "del", "dev", "n2-0", "root"),)
    assert plan.faults == (Fault("node", (2,), "100mbit"),)
    # The ingress qdisc comes after the veth that creates its device.
    names = [(s.kind, s.name) for s in plan.steps]
    assert names.index(("qdisc", "lssw/n2-0")) > names.index(("veth", "lsn2/ls-ctl"))


def test_slow_pair_filters_by_address_in_both_directions_on_every_link():
    plan = plan_emulated(3, [parse_link_arg("fast")], faults=[parse_slow_pair_arg("1-0=50mbit")])
    cls = "htb rate 50mbit ceil 50mbit burst 65536 cburst 65536 quantum 65536"

    def egress(ns: str, dev: str, dst: str) -> list[str]:
        tc = f"tc -n {ns}"
        return [
            f"{tc} qdisc add dev {dev} root handle 1: htb",  # no default: others unshaped
            f"{tc} class add dev {dev} parent 1: classid 1:2 {cls}",
            f"{tc} filter add dev {dev} parent 1: protocol ip prio 1 u32 match ip dst "
            f"{dst}/32 flowid 1:2",
        ]

    assert _qdisc_steps(plan) == {
        "lsn0/ls-ctl": egress("lsn0", "ls-ctl", "198.18.0.2"),
        "lsn1/ls-ctl": egress("lsn1", "ls-ctl", "198.18.0.1"),
        "lsn0/ls-fast": egress("lsn0", "ls-fast", "198.18.1.2"),
        "lsn1/ls-fast": egress("lsn1", "ls-fast", "198.18.1.1"),
    }  # node 2 and the switch are untouched: pairs (0,2) and (1,2) keep their speed


def test_fault_on_a_shaped_link_combines_into_one_root_qdisc_per_device():
    plan = plan_emulated(
        3,
        [parse_link_arg("slow=500mbit"), parse_link_arg("wan=1gbit")],
        faults=[
            parse_slow_node_arg("2=100mbit"),  # slower than slow and wan: wins on both
            parse_slow_pair_arg("0-2=50mbit"),
            parse_slow_pair_arg("1-2=800mbit"),  # faster than the slow link: link wins
        ],
    )
    steps = _qdisc_steps(plan)
    roots = Counter(
        (c[2], c[c.index("dev") + 1])
        for s in plan.steps
        for c in s.up
        if c[:1] == ("tc",) and "root" in c and "add" in c
    )
    assert set(roots.values()) == {1}  # never two `qdisc add ... root` on one device
    assert len(roots) == len(steps)
    # Node 2 on slow: all traffic at 100mbit (default class), to node 0 at 50mbit, to node 1
    # at 100mbit (min of 500mbit link, 100mbit node, 800mbit pair).
    assert steps["lsn2/ls-slow"] == [
        "tc -n lsn2 qdisc add dev ls-slow root handle 1: htb default 1",
        "tc -n lsn2 class add dev ls-slow parent 1: classid 1:1 htb rate 100mbit ceil 100mbit "
        "burst 125000 cburst 125000 quantum 65536",
        "tc -n lsn2 class add dev ls-slow parent 1: classid 1:2 htb rate 50mbit ceil 50mbit "
        "burst 65536 cburst 65536 quantum 65536",
        "tc -n lsn2 filter add dev ls-slow parent 1: protocol ip prio 1 u32 match ip dst "
        "198.18.1.1/32 flowid 1:2",
        "tc -n lsn2 class add dev ls-slow parent 1: classid 1:3 htb rate 100mbit ceil 100mbit "
        "burst 125000 cburst 125000 quantum 65536",
        "tc -n lsn2 filter add dev ls-slow parent 1: protocol ip prio 1 u32 match ip dst "
        "198.18.1.2/32 flowid 1:3",
    ]
    # Node 1 on slow: the link's 500mbit for everything, the 800mbit pair changes nothing.
    assert "classid 1:1 htb rate 500mbit" in steps["lsn1/ls-slow"][1]
    assert "classid 1:2 htb rate 500mbit" in steps["lsn1/ls-slow"][2]
    # Node 0 on wan: 1gbit default, 50mbit to node 2 (198.18.2.3).
    assert "classid 1:2 htb rate 50mbit" in steps["lsn0/ls-wan"][2]
    assert "match ip dst 198.18.2.3/32 flowid 1:2" in steps["lsn0/ls-wan"][3]
    # Node 2's ingress carries only the fault: the link's shape is applied at the sender.
    assert steps["lssw/n2-1"] == [
        "tc -n lssw qdisc add dev n2-1 root handle 1: tbf rate 100mbit burst 125000 latency 50ms"
    ]
    # Untouched: node 1's ctl (only its pair to node 2 there), node 0/1 ingress.
    assert not any(name.startswith("lssw/n0") or name.startswith("lssw/n1") for name in steps)


def test_delays_add_and_a_delay_only_class_gets_an_unshaped_rate():
    assert combine_shapes(
        "x", LinkShape("a", "1gbit", "1ms"), LinkShape("b", "50mbit", "500us")
    ) == LinkShape("x", "50mbit", "1500us")
    assert combine_shapes("x", LinkShape("a"), LinkShape("b", None, "2ms")) == LinkShape(
        "x", None, "2ms"
    )
    plan = plan_emulated(
        2, [parse_link_arg("slow=500mbit,1ms")], faults=[parse_slow_pair_arg("0-1=,2ms")]
    )
    steps = _qdisc_steps(plan)["lsn0/ls-slow"]
    assert "classid 1:1 htb rate 500mbit" in steps[1]
    assert steps[2].endswith("parent 1:1 handle 2: netem delay 1ms limit 100000")
    assert "classid 1:2 htb rate 500mbit" in steps[3]  # the link's rate; the pair adds delay
    assert steps[4].endswith("parent 1:2 handle 3: netem delay 3000us limit 100000")
    assert "classid 1:2 htb rate 100gbit" in _qdisc_steps(plan)["lsn0/ls-ctl"][1]


def test_no_faults_leaves_the_plan_as_it_was():
    links = [parse_link_arg("fast"), parse_link_arg("slow=100mbit")]
    plan = plan_emulated(2, links)
    assert plan.faults == ()
    assert _qdisc_steps(plan) == {
        f"lsn{i}/ls-slow": [
            f"tc -n lsn{i} qdisc add dev ls-slow root handle 1: tbf rate 100mbit burst 125000 "
            "latency 50ms"
        ]
        for i in (0, 1)
    }


# --------------------------------------------------------------------------------------
# What a report reads back


def test_planted_faults_reads_the_state_with_node_ips():
    faults = [parse_slow_node_arg("2=100mbit"), parse_slow_pair_arg("0-1=50mbit,1ms")]
    state = {"plan": plan_emulated(4, [], faults=faults).to_dict()}
    assert planted_faults(state) == [
        {
            "kind": "node",
            "nodes": ["198.18.0.3"],
            "node_indices": [2],
            "rate": "100mbit",
            "delay": None,
            "describe": "node 2 at 100mbit",
        },
        {
            "kind": "pair",
            "nodes": ["198.18.0.1", "198.18.0.2"],
            "node_indices": [0, 1],
            "rate": "50mbit",
            "delay": "1ms",
            "describe": "pair 0-1 at 50mbit +1ms one-way",
        },
    ]
    assert planted_faults({"plan": plan_emulated(2, []).to_dict()}) == []
    assert planted_faults({}) == []  # a state file from before faults existed
