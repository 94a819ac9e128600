"""Link shapes, the plan of an emulated cluster, and its constants. Pure: no side effects.

`parse_link_arg` turns a `--link NAME=RATE,DELAY` argument into a `LinkShape`;
`plan_emulated` computes every name, address and `ip`/`tc` command of a cluster as data
(`EmulatedPlan`), which `netns` applies and undoes and `raynodes` starts Ray on.

May import: nothing (the standard library only).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

DEFAULT_STATE_DIR = "/tmp/linksweep-emulated"

# One /24 per link inside the RFC 2544 benchmarking range (see the package docstring).
SUBNET_PREFIX = "198.18"
PREFIX_LEN = 24
HOST_OCTET = 254  # ls-host's address on ctl; nodes use .1 .. .N
CTL_LINK = "ctl"
IFACE_PREFIX = "ls-"  # fixed, independent of `prefix`: sweeps name interfaces ls-NAME
HOST_PEER = "h-0"  # the switch-side end of ls-host

# Head ports in the root namespace: off Ray's defaults (6379, 8265, 10001, 52365) so the
# emulated head and a host `ray start --head` can run side by side. Ports of the nodes
# live in their own namespaces and cannot collide with anything.
HEAD_PORT = 6390
DASHBOARD_PORT = 8275
CLIENT_SERVER_PORT = 20001  # outside Ray's worker port range 10002-19999
DASHBOARD_AGENT_PORT = 52375

MAX_NODES = 32  # each node is a full raylet (~300 MB RSS with its agents)
MAX_LINKS = 16  # user links, besides ctl
IFNAMSIZ = 15  # Linux interface names are at most 15 characters

DEFAULT_LINKS = ("fast", "slow=500mbit")  # what sweeps/emulated.yaml and the quickstart expect


class EmulatedError(RuntimeError):
    """An emulated-cluster operation failed; the message says what and what to do."""


Log = Callable[[str], None]
"""Where progress messages go (`up` and `down` print them on stderr by default)."""


# ---------------------------------------------------------------------------------------
# Link shapes


_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,11}$")  # "ls-" + 12 = 15 = IFNAMSIZ
_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|tbit)$")
_DELAY_RE = re.compile(r"^(\d+(?:\.\d+)?)(us|ms|s)$")
_RATE_UNITS = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}  # tc: SI
_DELAY_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}

LINK_FORMATS = (
    "use NAME, NAME=RATE or NAME=RATE,DELAY (or NAME=,DELAY) with NAME like fast "
    "(lowercase, <= 12 chars), RATE like 100mbit, 1gbit, 500kbit (tc bit rates) and "
    "DELAY like 1ms, 200us"
)


@dataclass(frozen=True)
class LinkShape:
    """One named link and how it is shaped on every node's egress."""

    name: str
    """Link name; every node gets the interface `ls-<name>`. `ctl` is reserved for Ray."""
    rate: str | None = None
    """tc rate per node egress, e.g. "100mbit" (SI: 1 mbit = 1e6 bit/s); None: unshaped."""
    delay: str | None = None
    """One-way delay added at each node's egress (tc netem), e.g. "1ms"; None: none."""

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise ValueError(f"link name {self.name!r} is not allowed; {LINK_FORMATS}")
        if self.rate is not None and not _RATE_RE.match(self.rate):
            raise ValueError(
                f"link {self.name!r}: rate {self.rate!r} is not a tc bit rate; {LINK_FORMATS}"
            )
        if self.delay is not None and not _DELAY_RE.match(self.delay):
            raise ValueError(
                f"link {self.name!r}: delay {self.delay!r} is not a tc time; {LINK_FORMATS}"
            )
        if self.rate is not None and self.rate_bits_per_s <= 0:
            raise ValueError(f"link {self.name!r}: rate {self.rate!r} must be positive")

    @property
    def ifname(self) -> str:
        return IFACE_PREFIX + self.name

    @property
    def shaped(self) -> bool:
        return self.rate is not None or self.delay is not None

    @property
    def rate_bits_per_s(self) -> float | None:
        if self.rate is None:
            return None
        number, unit = _RATE_RE.match(self.rate).groups()
        return float(number) * _RATE_UNITS[unit]

    @property
    def delay_s(self) -> float | None:
        if self.delay is None:
            return None
        number, unit = _DELAY_RE.match(self.delay).groups()
        return float(number) * _DELAY_UNITS[unit]

    def describe(self) -> str:
        parts = [p for p in (self.rate, self.delay and f"+{self.delay} one-way") if p]
        return " ".join(parts) if parts else "unshaped"


def parse_link_arg(s: str) -> LinkShape:
    """Parse `NAME`, `NAME=RATE`, `NAME=RATE,DELAY` or `NAME=,DELAY` into a LinkShape.

    >>> parse_link_arg("slow=100mbit,1ms")
    LinkShape(name='slow', rate='100mbit', delay='1ms')
    """
    text = s.strip()
    name, sep, shape = text.partition("=")
    if not name:
        raise ValueError(f"bad link {s!r}: missing NAME; {LINK_FORMATS}")
    if name == CTL_LINK:
        raise ValueError(
            f"bad link {s!r}: {CTL_LINK!r} is reserved for Ray's own traffic; pick another name"
        )
    if not sep:
        rate, delay = None, None
    else:
        parts = shape.split(",")
        if len(parts) > 2 or not any(parts):
            raise ValueError(f"bad link {s!r}: shape {shape!r} is malformed; {LINK_FORMATS}")
        rate = parts[0] or None
        delay = parts[1] if len(parts) == 2 and parts[1] else None
        if len(parts) == 2 and not parts[1]:
            raise ValueError(f"bad link {s!r}: empty DELAY after ','; {LINK_FORMATS}")
    try:
        return LinkShape(name, rate, delay)
    except ValueError as e:
        raise ValueError(f"bad link {s!r}: {e}") from None


# ---------------------------------------------------------------------------------------
# The plan


Command = tuple[str, ...]


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


def link_subnet(index: int) -> ipaddress.IPv4Network:
    """Link k's subnet: 198.18.k.0/24 (k=0 is ctl)."""
    return ipaddress.IPv4Network(f"{SUBNET_PREFIX}.{index}.0/{PREFIX_LEN}")


def qdisc_commands(namespace: str, dev: str, link: LinkShape) -> tuple[Command, ...]:
    """tc commands that shape `dev`'s egress inside `namespace`.

    rate only: tbf at root. delay only: netem at root. Both: netem at root with tbf as
    its child (the layout of the tc-netem(8) examples), so a packet waits out the delay
    and is then paced at the rate.
    """
    tc = ("tc", "-n", namespace, "qdisc", "add", "dev", dev)
    tbf: tuple[str, ...] = ()
    if link.rate is not None:
        rate_bytes_per_s = link.rate_bits_per_s / 8
        # burst: at least 64 KiB so a GSO segment always fits (tbf would have to split
        # it), else 10 ms of tokens; latency bounds the queue at 50 ms of traffic.
        burst = max(64 * 1024, int(rate_bytes_per_s / 100))
        tbf = ("tbf", "rate", link.rate, "burst", str(burst), "latency", "50ms")
    if link.delay is not None:
        # limit: netem's default queue (1000 packets) throttles fast links with delay.
        netem = ("netem", "delay", link.delay, "limit", "100000")
        if not tbf:
            return ((*tc, "root", "handle", "1:", *netem),)
        return (
            (*tc, "root", "handle", "1:", *netem),
            (*tc, "parent", "1:1", "handle", "10:", *tbf),
        )
    if tbf:
        return ((*tc, "root", "handle", "1:", *tbf),)
    return ()


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


def plan_emulated(nodes: int, links: Sequence[LinkShape], prefix: str = "ls") -> EmulatedPlan:
    """Every name, address and ip/tc command of an emulated cluster; no side effects."""
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

    switch = f"{prefix}sw"
    host_iface = f"{prefix}-host"
    head_ip = str(link_subnet(0).network_address + HOST_OCTET)
    node_namespaces = [f"{prefix}n{i}" for i in range(nodes)]

    steps = [_netns_step(switch), *(_netns_step(ns) for ns in node_namespaces)]
    steps.extend(_bridge_step(switch, link) for link in all_links)
    ports: dict[int, list[NodePort]] = {i: [] for i in range(nodes)}
    for k, link in enumerate(all_links):
        subnet = link_subnet(k)
        for i, ns in enumerate(node_namespaces):
            port = NodePort(
                link=link.name,
                ifname=link.ifname,
                peer=f"n{i}-{k}",
                address=str(subnet.network_address + i + 1),
            )
            ports[i].append(port)
            steps.append(_veth_step(switch, ns, f"br-{link.name}", port))
            shape = qdisc_commands(ns, port.ifname, link)
            if shape:
                steps.append(
                    Step(
                        kind="qdisc",
                        name=f"{ns}/{port.ifname}",
                        up=shape,
                        down=(("tc", "-n", ns, "qdisc", "del", "dev", port.ifname, "root"),),
                    )
                )
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
    )
