"""The emulated cluster's pure pieces: link arguments, the plan, qdisc commands, `ray start`
argv and the CLI's input checks. No root, no subprocess, no Ray.

The real cluster (root only) is tested in tests/integration/test_emulated.py.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from orchestrator.emulated import (
    DEFAULT_LINKS,
    HEAD_PORT,
    IFNAMSIZ,
    LinkShape,
    RayNodeOptions,
    link_subnet,
    parse_link_arg,
    plan_emulated,
    qdisc_commands,
    ray_start_argv,
)

REPO = Path(__file__).resolve().parents[2]
SLOW_RATE = "100mbit"


def _links() -> list[LinkShape]:
    return [parse_link_arg("fast"), parse_link_arg(f"slow={SLOW_RATE}")]


# --------------------------------------------------------------------------------------
# Link arguments


@pytest.mark.parametrize(
    "arg, expected",
    [
        ("fast", LinkShape("fast")),
        ("slow=100mbit", LinkShape("slow", "100mbit")),
        ("slow=100mbit,1ms", LinkShape("slow", "100mbit", "1ms")),
        ("wan=,200us", LinkShape("wan", None, "200us")),
        ("x1=1.5gbit", LinkShape("x1", "1.5gbit")),
    ],
)
def test_parse_link_arg(arg, expected):
    assert parse_link_arg(arg) == expected


@pytest.mark.parametrize(
    "arg, names",
    [
        ("slow=100mbps", ["100mbps", "100mbit"]),  # tc's mbps means megaBYTES: refused
        ("slow=100mbit,1 ms", ["1 ms", "200us"]),
        ("slow=fast", ["'fast'", "RATE"]),
        ("=100mbit", ["NAME"]),
        ("ctl", ["reserved"]),
        ("Slow", ["'Slow'"]),
        ("averyverylongname", ["averyverylongname", "12"]),
        ("a=1mbit,2ms,3", ["malformed"]),
        ("a=1mbit,", ["DELAY"]),
        ("a=", ["malformed"]),
    ],
)
def test_parse_link_arg_names_the_bad_part(arg, names):
    with pytest.raises(ValueError) as e:
        parse_link_arg(arg)
    for name in names:
        assert name in str(e.value)


def test_link_units():
    assert LinkShape("a", "100mbit").rate_bits_per_s == 1e8  # tc: SI units
    assert LinkShape("a", "500kbit").rate_bits_per_s == 5e5
    assert LinkShape("a", delay="200us").delay_s == pytest.approx(2e-4)
    assert LinkShape("a").rate_bits_per_s is None and not LinkShape("a").shaped


# --------------------------------------------------------------------------------------
# The plan


def test_plan_names_and_addresses():
    plan = plan_emulated(2, _links())
    assert plan.namespaces == ("lssw", "lsn0", "lsn1")
    assert [link.name for link in plan.links] == ["ctl", "fast", "slow"]
    assert plan.head_ip == "198.18.0.254"
    assert plan.address == f"198.18.0.254:{HEAD_PORT}"
    assert [n.ip for n in plan.nodes] == ["198.18.0.1", "198.18.0.2"]
    assert [n.resource for n in plan.nodes] == ["emulated_node_0", "emulated_node_1"]
    benchmarking = ipaddress.IPv4Network("198.18.0.0/15")  # RFC 2544
    for node in plan.nodes:
        # Same interface names on every node: one env selects the path on every rank.
        assert [p.ifname for p in node.ports] == ["ls-ctl", "ls-fast", "ls-slow"]
        for k, port in enumerate(node.ports):
            address = ipaddress.IPv4Address(port.address)
            assert address in link_subnet(k) and address in benchmarking
            assert len(port.ifname) <= IFNAMSIZ and len(port.peer) <= IFNAMSIZ
    addresses = [p.address for n in plan.nodes for p in n.ports]
    assert len(set(addresses)) == len(addresses)


def test_plan_touches_the_root_namespace_only_through_the_host_veth():
    plan = plan_emulated(3, _links())
    for cmd in plan.up_commands:
        assert cmd[0] in ("ip", "tc")
        if cmd[0] == "tc" or "-n" in cmd or cmd[1] == "netns":
            continue
        if cmd[:3] == ("ip", "link", "add") and "netns" in cmd[4:6]:
            continue  # a veth created straight into a node namespace
        assert plan.host_iface in cmd, cmd
    assert plan.host_iface == "ls-host"


def test_plan_shapes_every_node_egress_of_shaped_links_only():
    plan = plan_emulated(2, _links())
    tc = [cmd for cmd in plan.up_commands if cmd[0] == "tc"]
    assert len(tc) == 2  # slow on lsn0 and lsn1; fast and ctl stay unshaped
    for ns, cmd in zip(("lsn0", "lsn1"), tc, strict=True):
        assert cmd[:8] == ("tc", "-n", ns, "qdisc", "add", "dev", "ls-slow", "root")
        assert "tbf" in cmd and cmd[cmd.index("rate") + 1] == SLOW_RATE


def test_qdisc_with_delay_is_netem_with_tbf_child():
    both = qdisc_commands("n", "ls-x", LinkShape("x", "1gbit", "1ms"))
    assert [c[c.index("dev") + 2] for c in both] == ["root", "parent"]
    assert "netem" in both[0] and both[0][both[0].index("delay") + 1] == "1ms"
    assert "tbf" in both[1] and "1gbit" in both[1]
    (delay_only,) = qdisc_commands("n", "ls-x", LinkShape("x", delay="2ms"))
    assert "netem" in delay_only and "tbf" not in delay_only
    assert qdisc_commands("n", "ls-x", LinkShape("x")) == ()


def test_down_commands_undo_in_reverse():
    plan = plan_emulated(2, _links())
    down = plan.down_commands
    assert down[0] == ("ip", "link", "del", "ls-host")
    assert down[-1] == ("ip", "netns", "del", "lssw")
    assert all(step.down for step in plan.steps)
    dels = {cmd[-1] for cmd in down if cmd[:3] == ("ip", "netns", "del")}
    assert dels == set(plan.namespaces)


@pytest.mark.parametrize(
    "nodes, links, prefix, match",
    [
        (0, [], "ls", "nodes"),
        (33, [], "ls", "nodes"),
        (2, [LinkShape("a"), LinkShape("a")], "ls", "duplicate"),
        (2, [LinkShape("ctl")], "ls", "reserved"),
        (2, [], "LS", "prefix"),
    ],
)
def test_plan_rejects_bad_input(nodes, links, prefix, match):
    with pytest.raises(ValueError, match=match):
        plan_emulated(nodes, links, prefix)


def test_ray_start_argv():
    plan = plan_emulated(2, _links())
    opts = RayNodeOptions(cpus_per_node=2, gpus_per_node=2)
    head = ray_start_argv(plan, opts, "/venv/bin/ray", "/tmp/x/ray", None)
    assert head[:3] == ["/venv/bin/ray", "start", "--head"]
    assert "--num-cpus=0" in head and "--num-gpus=0" in head  # ranks never land on the head
    assert f"--port={HEAD_PORT}" in head and "--node-ip-address=198.18.0.254" in head
    node = ray_start_argv(plan, opts, "/venv/bin/ray", "/tmp/x/ray", 1)
    assert node[:5] == ["ip", "netns", "exec", "lsn1", "/venv/bin/ray"]
    assert f"--address=198.18.0.254:{HEAD_PORT}" in node
    assert "--node-ip-address=198.18.0.2" in node
    assert "--num-cpus=2" in node and "--num-gpus=2" in node
    assert '--resources={"emulated_node_1": 1}' in node
    assert "--temp-dir=/tmp/x/ray/lsn1" in node  # own temp dir: no socket-name races
    with pytest.raises(ValueError, match="cpus_per_node"):
        RayNodeOptions(cpus_per_node=0)


def test_cluster_command_bad_input_exits_2(capsys):
    from orchestrator.cli import main

    up = ["cluster", "up", "--emulated", "--state-dir", "/tmp/unused"]
    assert main([*up, "--link", "slow=100mbps"]) == 2
    assert "100mbps" in capsys.readouterr().err
    assert main([*up, "--nodes", "0"]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["cluster", "sideways", "--emulated"])
    assert exc.value.code == 2 and "invalid choice: 'sideways'" in capsys.readouterr().err
    assert main(["cluster", "status"]) == 2  # only --emulated clusters are managed here
    assert "only --emulated" in capsys.readouterr().err


def test_python_m_orchestrator_emulated_takes_the_same_arguments(capsys):
    import argparse

    from orchestrator.commands.cluster import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    p.set_defaults(emulated=True)
    a = p.parse_args(["up", "--link", "slow=1gbit", "--nodes", "3"])
    assert (a.action, a.link, a.nodes, a.emulated) == ("up", ["slow=1gbit"], 3, True)


def test_default_links_match_the_emulated_sweep():
    import yaml

    sweep = yaml.safe_load((REPO / "sweeps" / "emulated.yaml").read_text())
    names = {parse_link_arg(s).name for s in DEFAULT_LINKS}
    assert {env["GLOO_SOCKET_IFNAME"] for env in sweep["links"].values()} == {
        f"ls-{n}" for n in names
    }


LINK_MODEL_LINKS = ("r50=50mbit", "r100=100mbit", "r300=300mbit", "r1g=1gbit")


def test_one_cluster_carries_four_links_each_at_its_own_rate():
    shapes = [parse_link_arg(s) for s in LINK_MODEL_LINKS]
    plan = plan_emulated(2, shapes)
    assert [link.name for link in plan.links] == ["ctl", "r50", "r100", "r300", "r1g"]
    for node in plan.nodes:
        assert [p.ifname for p in node.ports] == ["ls-ctl", "ls-r50", "ls-r100", "ls-r300",
                                                  "ls-r1g"]  # fmt: skip
        assert len({p.address for p in node.ports}) == 5
    tc = [cmd for cmd in plan.up_commands if cmd[0] == "tc"]
    shaped = {(cmd[2], cmd[cmd.index("dev") + 1]): cmd[cmd.index("rate") + 1] for cmd in tc}
    assert shaped == {(ns, f"ls-{s.name}"): s.rate for ns in ("lsn0", "lsn1") for s in shapes}
    rates = [s.rate_bits_per_s for s in shapes]
    assert rates == [50e6, 100e6, 300e6, 1e9]


def test_link_model_sweep_names_the_four_links():
    import yaml

    from orchestrator.sweep.spec import parse_spec

    sweep = yaml.safe_load((REPO / "sweeps" / "link-model-emulated.yaml").read_text())
    spec = parse_spec(sweep)
    names = [parse_link_arg(s).name for s in LINK_MODEL_LINKS]
    assert spec.grid_links == names
    assert {k: v["GLOO_SOCKET_IFNAME"] for k, v in sweep["links"].items()} == {
        n: f"ls-{n}" for n in names
    }
    assert spec.grid.linkbench and spec.grid.placement == ["spread"]


def test_recorded_node_ips_reads_the_plan_up_wrote_node_0_first(tmp_path):
    from orchestrator.emulated import recorded_node_ips
    from orchestrator.emulated.raynodes import STATE_VERSION, state_path, write_state

    assert recorded_node_ips(tmp_path) == []  # nothing recorded
    plan = plan_emulated(3, [parse_link_arg("fast")], "lsu")
    write_state(state_path(tmp_path), {"version": STATE_VERSION, "plan": plan.to_dict()})
    assert recorded_node_ips(tmp_path) == [n.ip for n in plan.nodes]
    assert recorded_node_ips(tmp_path)[0] == str(link_subnet(0).network_address + 1)
