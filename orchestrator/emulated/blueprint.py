"""The plan of an emulated cluster: every name, address and `ip`/`tc` command, as data.

`plan_emulated` computes an `EmulatedPlan` from the node count, the link shapes and the
planted faults; `netns` applies and undoes its steps and `raynodes` starts Ray on it.
Pure: no side effects.

May import: faults, shapes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.emulated.faults import (
    Fault,
    egress_commands,
    egress_shapes,
    ingress_shape,
    validate_faults,
)
from orchestrator.emulated.shapes import (
    CTL_LINK,
    HEAD_PORT,
    HOST_OCTET,
    HOST_PEER,
    MAX_LINKS,
    MAX_NODES,
    PREFIX_LEN,
    Command,
    LinkShape,
    link_subnet,
    qdisc_commands,
)


@dataclass(frozen=True)
class Step:
    """One creation step and its undo. `down` undoes only steps whose creation started."""

    kind: str
    """What it creates: netns, bridge, veth, qdisc or host_veth."""
    name: str
    """Human name, e.g. "lsn0" or "lsn0/ls-slow"."""
    up: tuple[Command, ...]
    down: tuple[Command, ...]
    namespace: str | None = None
    """The namespace this step creates (kind netns only)."""


@dataclass(frozen=True)
class NodePort:
    """One node's interface on one link."""

    link: str
    ifname: str
    """Interface name inside the node namespace: ls-<link>."""
    peer: str
    """The switch-side end of the veth pair, enslaved to the link's bridge."""
    address: str
    """IPv4 address, without prefix length."""


@dataclass(frozen=True)
class EmulatedNode:
    index: int
    namespace: str
    ip: str
    """Ray node IP: the node's ls-ctl address."""
    resource: str
    """Custom Ray resource that pins work to this node: emulated_node_<i>."""
    ports: tuple[NodePort, ...]


@dataclass(frozen=True)
class EmulatedPlan:
    prefix: str
    switch_namespace: str
    nodes: tuple[EmulatedNode, ...]
    links: tuple[LinkShape, ...]
    """All links, ctl first."""
    host_iface: str
    head_ip: str
    port: int
    steps: tuple[Step, ...]
    faults: tuple[Fault, ...] = ()
    """Planted faults (`--slow-node`, `--slow-pair`), already in `steps`' tc commands."""

    @property
    def address(self) -> str:
        return f"{self.head_ip}:{self.port}"

    @property
    def namespaces(self) -> tuple[str, ...]:
        return (self.switch_namespace, *(n.namespace for n in self.nodes))

    @property
    def up_commands(self) -> list[Command]:
        return [cmd for step in self.steps for cmd in step.up]

    @property
    def down_commands(self) -> list[Command]:
        return [cmd for step in reversed(self.steps) for cmd in step.down]

    def link(self, name: str) -> LinkShape:
        for link in self.links:
            if link.name == name:
                return link
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"address": self.address}


def _qdisc_step(ns: str, dev: str, up: tuple[Command, ...]) -> list[Step]:
    """The step that shapes `dev` in `ns` (none when `up` is empty). Deleting the root
    qdisc removes its children and filters too."""
    if not up:
        return []
    down = (("tc", "-n", ns, "qdisc", "del", "dev", dev, "root"),)
    return [Step(kind="qdisc", name=f"{ns}/{dev}", up=up, down=down)]


def _netns_step(ns: str) -> Step:
    return Step(
        kind="netns",
        name=ns,
        up=(("ip", "netns", "add", ns), ("ip", "-n", ns, "link", "set", "lo", "up")),
        down=(("ip", "netns", "del", ns),),
        namespace=ns,
    )


def _bridge_step(switch: str, link: LinkShape) -> Step:
    bridge = f"br-{link.name}"
    return Step(
        kind="bridge",
        name=f"{switch}/{bridge}",
        up=(
            ("ip", "-n", switch, "link", "add", bridge, "type", "bridge"),
            ("ip", "-n", switch, "link", "set", bridge, "up"),
        ),
        down=(("ip", "-n", switch, "link", "del", bridge),),
    )


def _veth_step(switch: str, ns: str, bridge: str, port: NodePort) -> Step:
    return Step(
        kind="veth",
        name=f"{ns}/{port.ifname}",
        up=(
            # Both ends are created directly in their namespaces: nothing appears in the
            # root namespace, not even for a moment.
            ("ip", "link", "add", port.ifname, "netns", ns, "type", "veth")
            + ("peer", "name", port.peer, "netns", switch),
            ("ip", "-n", switch, "link", "set", port.peer, "master", bridge),
            ("ip", "-n", switch, "link", "set", port.peer, "up"),
            ("ip", "-n", ns, "addr", "add", f"{port.address}/{PREFIX_LEN}") + ("dev", port.ifname),
            ("ip", "-n", ns, "link", "set", port.ifname, "up"),
        ),
        # Deleting one end deletes the pair.
        down=(("ip", "-n", ns, "link", "del", port.ifname),),
    )


def _host_veth_step(switch: str, host_iface: str, head_ip: str) -> Step:
    return Step(
        kind="host_veth",
        name=host_iface,
        up=(
            ("ip", "link", "add", host_iface, "type", "veth")
            + ("peer", "name", HOST_PEER, "netns", switch),
            ("ip", "-n", switch, "link", "set", HOST_PEER, "master", f"br-{CTL_LINK}"),
            ("ip", "-n", switch, "link", "set", HOST_PEER, "up"),
            ("ip", "addr", "add", f"{head_ip}/{PREFIX_LEN}", "dev", host_iface),
            ("ip", "link", "set", host_iface, "up"),
        ),
        down=(("ip", "link", "del", host_iface),),
    )


def plan_emulated(
    nodes: int,
    links: Sequence[LinkShape],
    prefix: str = "ls",
    faults: Sequence[Fault] = (),
) -> EmulatedPlan:
    """Every name, address and ip/tc command of an emulated cluster; no side effects.

    Faults are validated against `nodes` (ValueError naming the flag) and shaped into the
    qdisc steps: one step, one root qdisc per shaped device (see `faults`).
    """
    if not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
        raise ValueError(f"nodes must be an int in 1..{MAX_NODES}, got {nodes!r}")
    if not re.match(r"^[a-z][a-z0-9]{0,7}$", prefix):
        raise ValueError(f"prefix {prefix!r} must match [a-z][a-z0-9]{{0,7}}")
    user_links = list(links)
    if len(user_links) > MAX_LINKS:
        raise ValueError(f"at most {MAX_LINKS} links, got {len(user_links)}")
    names = [link.name for link in user_links]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate link names: {duplicates}")
    if CTL_LINK in names:
        raise ValueError(f"link name {CTL_LINK!r} is reserved for Ray's own traffic")
    all_links = (LinkShape(CTL_LINK), *user_links)
    validate_faults(nodes, faults)

    switch = f"{prefix}sw"
    host_iface = f"{prefix}-host"
    head_ip = str(link_subnet(0).network_address + HOST_OCTET)
    node_namespaces = [f"{prefix}n{i}" for i in range(nodes)]

    steps = [_netns_step(switch), *(_netns_step(ns) for ns in node_namespaces)]
    steps.extend(_bridge_step(switch, link) for link in all_links)
    ports: dict[int, list[NodePort]] = {i: [] for i in range(nodes)}
    for k, link in enumerate(all_links):
        subnet = link_subnet(k)
        addresses = [str(subnet.network_address + i + 1) for i in range(nodes)]
        for i, ns in enumerate(node_namespaces):
            port = NodePort(
                link=link.name, ifname=link.ifname, peer=f"n{i}-{k}", address=addresses[i]
            )
            ports[i].append(port)
            steps.append(_veth_step(switch, ns, f"br-{link.name}", port))
            base, partners = egress_shapes(faults, link, i)
            classes = [(addresses[j], shape) for j, shape in partners]
            steps += _qdisc_step(ns, port.ifname, egress_commands(ns, port.ifname, base, classes))
            ingress = ingress_shape(faults, link.name, i)
            if ingress is not None:
                steps += _qdisc_step(switch, port.peer, qdisc_commands(switch, port.peer, ingress))
    steps.append(_host_veth_step(switch, host_iface, head_ip))

    emulated_nodes = tuple(
        EmulatedNode(
            index=i,
            namespace=ns,
            ip=ports[i][0].address,
            resource=f"emulated_node_{i}",
            ports=tuple(ports[i]),
        )
        for i, ns in enumerate(node_namespaces)
    )
    return EmulatedPlan(
        prefix=prefix,
        switch_namespace=switch,
        nodes=emulated_nodes,
        links=all_links,
        host_iface=host_iface,
        head_ip=head_ip,
        port=HEAD_PORT,
        steps=tuple(steps),
        faults=tuple(faults),
    )
