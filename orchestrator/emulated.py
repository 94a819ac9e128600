"""Emulated multi-node Ray cluster on one Linux machine, with shaped links.

Manual
------
    linksweep cluster up --emulated --nodes 2 --link fast --link slow=100mbit
    export RAY_ADDRESS=...            # the one line `up` prints last
    linksweep run sweeps/emulated.yaml
    linksweep cluster status --emulated
    linksweep cluster down --emulated

Needs root (it creates network namespaces) plus `ip` and `tc` from iproute2.

Glossary (the same words as the rest of linksweep):
    node    one network namespace holding one Ray worker node (`<prefix>n<i>`).
    link    one named L2 segment: a bridge in the switch namespace that every node
            joins through a veth pair. Each node sees it as the interface `ls-NAME`,
            the same name on every node, so a sweep selects a path with an env that is
            identical on every rank: `GLOO_SOCKET_IFNAME: ls-slow`.
    shape   a rate (tc tbf) and/or a one-way delay (tc netem) on the egress of every
            node's `ls-NAME`. Every byte that crosses a link leaves one node through its
            egress, so both directions of a transfer are shaped, once each.
    ctl     the link Ray's own traffic uses (unshaped); a node's Ray IP is its
            `ls-ctl` address.

Topology for `--nodes 2 --link fast --link slow=100mbit` (prefix "ls"):

    root namespace            lssw (switch namespace)     lsn0, lsn1 (nodes)
    ls-host 198.18.0.254 -- h-0 --+ br-ctl  +-- n0-0 ---- ls-ctl  198.18.0.1, .2
    (Ray head: GCS, 0 CPU)        | br-fast +-- n0-1 ---- ls-fast 198.18.1.1, .2
                                  | br-slow +-- n0-2 ---- ls-slow 198.18.2.1, .2 (tbf)

Addresses come from the RFC 2544 benchmarking range 198.18.0.0/15, one /24 per link
(198.18.<k>.0/24, k=0 is ctl): never routed on the internet and unlikely to clash with
a LAN. Only ls-host and its connected route 198.18.0.0/24 appear in the root namespace.

Why the Ray head (GCS + a raylet with no CPUs and no GPUs) runs in the root namespace
rather than in lsn0: a Ray driver attaches to a raylet on its own machine and then
advertises that raylet's IP as its own address. A driver in the root namespace
attached to a raylet in lsn0 would advertise 198.18.0.1, where nothing of the driver
listens, so any object that crosses nodes through the object store (a ray.put()
argument, a return over 100 KiB from another node) hangs. Checked on Ray 2.60: inline
results worked, plasma transfers to/from lsn1 timed out. With the head raylet on
ls-host, the driver advertises 198.18.0.254, which every node reaches over ctl.
`ray.nodes()` therefore lists nodes + 1 entries; the N emulated nodes carry the custom
resource `emulated_node_<i>` and all CPUs/GPUs. The head's ports are fixed and kept
off Ray's defaults so a host `ray start --head` never collides with it.

Pure planning (`plan_emulated`, `ray_start_argv`) is separate from side effects
(`up`, `down`, `status`). `up` writes a JSON state file before each creation step, so
`down` after a crash undoes exactly what was started and nothing else. Ray processes
are found again by an env marker (`LINKSWEEP_EMULATED_ID`), by their namespace
(`ip netns pids`), and by their process tree; never by name (`ray stop` would also
stop every other Ray session on the machine).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

DEFAULT_STATE_DIR = "/tmp/linksweep-emulated"
STATE_FILE = "state.json"
STATE_VERSION = 1

# One /24 per link inside the RFC 2544 benchmarking range (see module docstring).
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

# Ray reserves 30% of RAM per node for its object store by default; N nodes on one
# machine would each claim that. Ranks return small records, so 256 MiB is plenty.
OBJECT_STORE_BYTES = 256 * 2**20

MAX_NODES = 32  # each node is a full raylet (~300 MB RSS with its agents)
MAX_LINKS = 16  # user links, besides ctl
IFNAMSIZ = 15  # Linux interface names are at most 15 characters

READY_TIMEOUT_S = 120.0  # all raylets registered; 2-core CI machines need ~20 s
RAY_START_TIMEOUT_S = 120.0
STOP_GRACE_S = 5.0  # SIGTERM -> SIGKILL; gcs_server and agents often need longer, and
# nothing of an emulated cluster is worth a graceful shutdown: it is all removed anyway
CMD_TIMEOUT_S = 30.0

MARKER_ENV = "LINKSWEEP_EMULATED_ID"

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
# The plan (pure)


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
    ctl_subnet = link_subnet(0)
    head_ip = str(ctl_subnet.network_address + HOST_OCTET)

    steps: list[Step] = []

    def netns_step(ns: str) -> Step:
        return Step(
            kind="netns",
            name=ns,
            up=(("ip", "netns", "add", ns), ("ip", "-n", ns, "link", "set", "lo", "up")),
            down=(("ip", "netns", "del", ns),),
            namespace=ns,
        )

    steps.append(netns_step(switch))
    node_namespaces = [f"{prefix}n{i}" for i in range(nodes)]
    steps.extend(netns_step(ns) for ns in node_namespaces)

    for link in all_links:
        bridge = f"br-{link.name}"
        steps.append(
            Step(
                kind="bridge",
                name=f"{switch}/{bridge}",
                up=(
                    ("ip", "-n", switch, "link", "add", bridge, "type", "bridge"),
                    ("ip", "-n", switch, "link", "set", bridge, "up"),
                ),
                down=(("ip", "-n", switch, "link", "del", bridge),),
            )
        )

    ports: dict[int, list[NodePort]] = {i: [] for i in range(nodes)}
    for k, link in enumerate(all_links):
        subnet = link_subnet(k)
        bridge = f"br-{link.name}"
        for i, ns in enumerate(node_namespaces):
            port = NodePort(
                link=link.name,
                ifname=link.ifname,
                peer=f"n{i}-{k}",
                address=str(subnet.network_address + i + 1),
            )
            ports[i].append(port)
            steps.append(
                Step(
                    kind="veth",
                    name=f"{ns}/{port.ifname}",
                    up=(
                        # Both ends are created directly in their namespaces: nothing
                        # appears in the root namespace, not even for a moment.
                        ("ip", "link", "add", port.ifname, "netns", ns, "type", "veth")
                        + ("peer", "name", port.peer, "netns", switch),
                        ("ip", "-n", switch, "link", "set", port.peer, "master", bridge),
                        ("ip", "-n", switch, "link", "set", port.peer, "up"),
                        ("ip", "-n", ns, "addr", "add", f"{port.address}/{PREFIX_LEN}")
                        + ("dev", port.ifname),
                        ("ip", "-n", ns, "link", "set", port.ifname, "up"),
                    ),
                    # Deleting one end deletes the pair.
                    down=(("ip", "-n", ns, "link", "del", port.ifname),),
                )
            )
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

    steps.append(
        Step(
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
    )

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


@dataclass(frozen=True)
class RayNodeOptions:
    """Resources each emulated node declares to Ray."""

    cpus_per_node: int = 1
    """Logical CPUs per node; every rank actor takes 1."""
    gpus_per_node: int = 0
    """Logical GPUs per node, so GPU-shaped sweeps schedule on a CPU-only machine."""
    object_store_bytes: int = OBJECT_STORE_BYTES
    include_dashboard: bool = True
    """Dashboard on the head (ls-host:8275): needed for `ray job submit`."""

    def __post_init__(self) -> None:
        if self.cpus_per_node < 1:
            raise ValueError(f"cpus_per_node must be >= 1, got {self.cpus_per_node}")
        if self.gpus_per_node < 0:
            raise ValueError(f"gpus_per_node must be >= 0, got {self.gpus_per_node}")


def ray_start_argv(
    plan: EmulatedPlan,
    opts: RayNodeOptions,
    ray_bin: str,
    temp_root: str,
    node: int | None,
) -> list[str]:
    """`ray start` for the head (node=None, root namespace) or for emulated node `node`.

    Each node gets its own Ray temp dir under temp_root: nodes started at once in one
    session dir race for the same socket names (plasma_store.1, raylet.1, ...).
    """
    label = "head" if node is None else plan.nodes[node].namespace
    common = [
        f"--temp-dir={temp_root}/{label}",
        f"--object-store-memory={opts.object_store_bytes}",
        "--disable-usage-stats",
    ]
    if node is None:
        return [
            ray_bin,
            "start",
            "--head",
            f"--node-ip-address={plan.head_ip}",
            f"--port={plan.port}",
            # No CPUs/GPUs: ranks never land on the head, which has no ls-* links.
            "--num-cpus=0",
            "--num-gpus=0",
            f"--include-dashboard={'true' if opts.include_dashboard else 'false'}",
            f"--dashboard-host={plan.head_ip}",
            f"--dashboard-port={DASHBOARD_PORT}",
            f"--ray-client-server-port={CLIENT_SERVER_PORT}",
            f"--dashboard-agent-listen-port={DASHBOARD_AGENT_PORT}",
            *common,
        ]
    n = plan.nodes[node]
    return [
        "ip",
        "netns",
        "exec",
        n.namespace,
        ray_bin,
        "start",
        f"--address={plan.address}",
        f"--node-ip-address={n.ip}",
        f"--num-cpus={opts.cpus_per_node}",
        f"--num-gpus={opts.gpus_per_node}",
        f"--resources={json.dumps({n.resource: 1})}",
        *common,
    ]


# ---------------------------------------------------------------------------------------
# Side effects


class EmulatedError(RuntimeError):
    """An emulated-cluster operation failed; the message says what and what to do."""


Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def netns_available() -> tuple[bool, str]:
    """Whether this process can create network namespaces, and why not."""
    if not sys.platform.startswith("linux"):
        return False, "linksweep cluster --emulated needs Linux network namespaces"
    if os.geteuid() != 0:
        return False, (
            "linksweep cluster --emulated needs root (it creates network namespaces); "
            "run as root or use the embedded single-node Ray"
        )
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return False, f"linksweep cluster --emulated needs `{tool}` (iproute2) on PATH"
    try:
        proc = subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, timeout=CMD_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"`ip netns list` failed: {e}"
    if proc.returncode != 0:
        return False, f"`ip netns list` failed: {proc.stderr.strip()}"
    return True, "ok"


def require_root() -> None:
    """Raise EmulatedError with a clear message unless namespaces can be created."""
    ok, why = netns_available()
    if not ok:
        raise EmulatedError(why)


_HINTS = {
    "Specified qdisc kind is unknown": (
        "this kernel lacks a tc qdisc the link shape needs: RATE needs sch_tbf, "
        "DELAY needs sch_netem (try `modprobe sch_netem`)"
    ),
    "File exists": "left over from an earlier run? try `linksweep cluster down --emulated`",
}


def _run(cmd: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=CMD_TIMEOUT_S)
    if check and proc.returncode != 0:
        err = proc.stderr.strip() or proc.stdout.strip()
        hint = next((h for key, h in _HINTS.items() if key in err), "")
        raise EmulatedError(
            f"`{shlex.join(cmd)}` failed (rc {proc.returncode}): {err}"
            + (f"\n  hint: {hint}" if hint else "")
        )
    return proc


def _netns_list() -> set[str]:
    out = _run(["ip", "netns", "list"]).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _netns_pids(ns: str) -> set[int]:
    proc = _run(["ip", "netns", "pids", ns], check=False)
    return {int(p) for p in proc.stdout.split() if p.isdigit()} if proc.returncode == 0 else set()


def _root_link_exists(name: str) -> bool:
    return _run(["ip", "link", "show", "dev", name], check=False).returncode == 0


def _state_path(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / STATE_FILE


def _write_state(path: Path, state: dict[str, Any]) -> None:
    # Write-then-rename: a crash leaves the previous state, never half a file.
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, path)


def _read_state(state_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    path = _state_path(state_dir)
    if not path.exists():
        return None
    try:
        state = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise EmulatedError(f"state file {path} is unreadable: {e}") from None
    if state.get("version") != STATE_VERSION:
        raise EmulatedError(f"state file {path} has version {state.get('version')!r}")
    return state


def _preflight(plan: EmulatedPlan, state_dir: Path) -> None:
    """Refuse to start where `up` would touch something it did not create."""
    existing = _netns_list() & set(plan.namespaces)
    if existing:
        raise EmulatedError(
            f"network namespaces {sorted(existing)} already exist; another emulated "
            f"cluster with prefix {plan.prefix!r}? `ip netns del` them or use another prefix"
        )
    if _root_link_exists(plan.host_iface):
        raise EmulatedError(f"interface {plan.host_iface} already exists in the root namespace")
    ctl = link_subnet(0)
    routes = _run(["ip", "-4", "route", "show"]).stdout
    for line in routes.splitlines():
        dest = line.split()[0] if line.split() else ""
        if dest in ("default", ""):
            continue
        try:
            net = ipaddress.IPv4Network(dest if "/" in dest else f"{dest}/32", strict=False)
        except ValueError:
            continue
        if net.overlaps(ctl):
            raise EmulatedError(
                f"the root namespace already routes {net} ({line.strip()}), which overlaps "
                f"the control subnet {ctl}; is another emulated cluster up?"
            )
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # SO_REUSEADDR as servers set it: TIME_WAIT leftovers of a previous run are fine.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", plan.port))
        except OSError as e:
            raise EmulatedError(
                f"port {plan.port} for the emulated Ray head is taken: {e}"
            ) from None
    # AF_UNIX paths are limited to 107 bytes; Ray adds ~70 below a node's temp dir
    # (<state_dir>/ray/<node>/session_<date>_<pid>/sockets/plasma_store).
    if len(str(state_dir.resolve())) > 32:
        raise EmulatedError(
            f"state dir {state_dir} is too long for Ray's socket paths; use one of "
            f"at most 32 characters such as {DEFAULT_STATE_DIR}"
        )


def _ray_env(cluster_id: str) -> dict[str, str]:
    env = dict(os.environ)
    # A RAY_ADDRESS from the caller would make `ray start --head` join that cluster.
    for key in ("RAY_ADDRESS", "RAY_NAMESPACE", "RAY_JOB_CONFIG_JSON_ENV_VAR"):
        env.pop(key, None)
    env["RAY_DISABLE_USAGE_STATS"] = "1"
    # Explicit: with RAY_AUTH_MODE unset, `ray start --head` turns token auth on when
    # ~/.ray/auth_token exists (any earlier local ray.init() writes one) while
    # `ray start --address` does not, and the nodes are then refused by their own head.
    env["RAY_AUTH_MODE"] = "disabled"
    env[MARKER_ENV] = cluster_id
    bin_dir = str(Path(sys.executable).parent)  # the venv's bin, unresolved
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    return env


def _ray_bin() -> str:
    candidate = Path(sys.executable).parent / "ray"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("ray")
    if found is None:
        raise EmulatedError(f"no `ray` executable next to {sys.executable} or on PATH")
    return found


def _proc_ids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _ppid_and_state(pid: int) -> tuple[int, str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or ')'.
    rest = stat[stat.rindex(")") + 2 :].split()
    return int(rest[1]), rest[0]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def _start_time(pid: int) -> int | None:
    """Start time in clock ticks since boot (/proc/<pid>/stat field 22): with the pid, it
    names a process uniquely, so a recorded pid that was reused is never signalled."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def _alive(pid: int) -> bool:
    info = _ppid_and_state(pid)
    return info is not None and info[1] not in ("Z", "X")


def _is_marked(pid: int, cluster_id: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{MARKER_ENV}={cluster_id}".encode() in environ.split(b"\0")


def _cluster_pids(state: dict[str, Any], namespaces: Sequence[str]) -> set[int]:
    """Every live process that belongs to this emulated cluster.

    Marked by env; in one of its namespaces; recorded by `up` with the same start time;
    or a descendant of any of these. Ray's Python processes rename themselves with
    setproctitle, which overwrites their environ (and so the marker): while their parent
    lives they are found as descendants, after a crash by their recorded start time.
    """
    cluster_id = state["cluster_id"]
    me = os.getpid()
    pids = {p for p in _proc_ids() if p != me and _is_marked(p, cluster_id)}
    for pid, start in state.get("start_times", {}).items():
        if _start_time(int(pid)) == start:
            pids.add(int(pid))
    for ns in namespaces:
        pids |= _netns_pids(ns)
    children: dict[int, list[int]] = {}
    for p in _proc_ids():
        info = _ppid_and_state(p)
        if info is not None:
            children.setdefault(info[0], []).append(p)
    stack = list(pids)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in pids and child != me:
                pids.add(child)
                stack.append(child)
    return {p for p in pids if _alive(p)}


def _terminate(pids: set[int], log: Log) -> set[int]:
    """SIGTERM, wait up to STOP_GRACE_S, then SIGKILL; returns pids still alive."""

    def signal_all(sig: signal.Signals) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def wait(deadline: float) -> set[int]:
        while True:
            left = {p for p in pids if _alive(p)}
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.1)

    if not pids:
        return set()
    log(f"stopping {len(pids)} Ray processes")
    signal_all(signal.SIGTERM)
    left = wait(time.monotonic() + STOP_GRACE_S)
    if left:
        names = sorted({_comm(p) for p in left})
        log(f"{len(left)} still running after {STOP_GRACE_S:.0f} s ({', '.join(names)}); SIGKILL")
        pids = left
        signal_all(signal.SIGKILL)
        left = wait(time.monotonic() + 5.0)
    return left


def _record_pids(state: dict[str, Any], label: str, pids: set[int]) -> None:
    starts = {p: _start_time(p) for p in sorted(pids)}
    state["pids"][label] = [p for p, t in starts.items() if t is not None]
    state["start_times"].update({str(p): t for p, t in starts.items() if t is not None})


def _gcs_nodes(address: str, timeout_s: float = 5.0) -> list[dict[str, Any]] | None:
    """Nodes the GCS at `address` knows, or None when it cannot be reached."""
    host, port = address.rsplit(":", 1)
    try:
        # GcsClient waits ~40 s for an unreachable GCS; a plain connect fails fast.
        with socket.create_connection((host, int(port)), timeout=1.0):
            pass
    except OSError:
        return None
    try:
        from ray._raylet import GcsClient  # private, but the only client that needs no
        from ray.core.generated.gcs_pb2 import GcsNodeInfo  # ray.init(); Ray 2.60

        infos = GcsClient(address=address).get_all_node_info(timeout=timeout_s)
    except Exception:
        return None
    alive = GcsNodeInfo.GcsNodeState.ALIVE
    return [
        {
            "ip": info.node_manager_address,
            "alive": info.state == alive,
            "is_head": info.is_head_node,
            "resources": dict(info.resources_total),
        }
        for info in infos.values()
    ]


def _wait_ready(plan: EmulatedPlan, timeout_s: float) -> list[dict[str, Any]]:
    """Poll the GCS until the head and every node are alive (bounded by timeout_s)."""
    want = {plan.head_ip, *(n.ip for n in plan.nodes)}
    deadline = time.monotonic() + timeout_s
    seen: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        seen = _gcs_nodes(plan.address) or []
        alive = {n["ip"] for n in seen if n["alive"]}
        if want <= alive:
            return seen
        time.sleep(0.5)
    alive = {n["ip"] for n in seen if n["alive"]}
    raise EmulatedError(
        f"Ray nodes {sorted(want - alive)} not alive after {timeout_s:.0f} s "
        f"(alive: {sorted(alive)})"
    )


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _start_ray(argvs: dict[str, list[str]], env: dict[str, str], log_dir: Path) -> None:
    """Run `ray start` commands concurrently; raise with the log tail of any failure."""
    procs = {}
    for label, argv in argvs.items():
        log_path = log_dir / f"ray-start-{label}.log"
        with log_path.open("w") as out:
            # Own session: a Ctrl-C at the terminal must not reach the Ray daemons.
            procs[label] = (
                subprocess.Popen(
                    argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                ),
                log_path,
            )
    deadline = time.monotonic() + RAY_START_TIMEOUT_S
    failures = []
    for label, (proc, log_path) in procs.items():
        try:
            rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = "timeout"
        if rc != 0:
            failures.append(f"`ray start` for {label} failed ({rc}):\n{_tail(log_path)}")
    if failures:
        raise EmulatedError("\n".join(failures))


def up(
    nodes: int,
    links: Sequence[LinkShape],
    state_dir: str | os.PathLike[str] = DEFAULT_STATE_DIR,
    *,
    cpus_per_node: int = 1,
    gpus_per_node: int = 0,
    prefix: str = "ls",
    include_dashboard: bool = True,
    ready_timeout_s: float = READY_TIMEOUT_S,
    log: Log = _stderr,
) -> str:
    """Create namespaces, links and Ray nodes; return the Ray address `<head_ip>:<port>`.

    On any failure (Ctrl-C included) everything created so far is removed again.
    """
    require_root()
    plan = plan_emulated(nodes, links, prefix)
    opts = RayNodeOptions(cpus_per_node, gpus_per_node, include_dashboard=include_dashboard)
    state_dir = Path(state_dir)
    path = _state_path(state_dir)
    if path.exists():
        raise EmulatedError(
            f"an emulated cluster is already recorded in {path}; "
            "run `linksweep cluster down --emulated` first"
        )
    _preflight(plan, state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    temp_dir = state_dir / "ray"
    log_dir = state_dir / "logs"
    state: dict[str, Any] = {
        "version": STATE_VERSION,
        "cluster_id": uuid.uuid4().hex,
        "created_at": time.time(),
        "plan": plan.to_dict(),
        "steps": [asdict(step) for step in plan.steps],
        "steps_started": 0,
        "ray_temp_dir": str(temp_dir),
        "ray_started": False,
        "pids": {},
        "start_times": {},
        "address": None,
    }
    _write_state(path, state)
    try:
        log(f"creating {len(plan.namespaces)} namespaces and {len(plan.links)} links")
        for i, step in enumerate(plan.steps):
            state["steps_started"] = i + 1
            _write_state(path, state)
            for cmd in step.up:
                _run(cmd)

        env = _ray_env(state["cluster_id"])
        ray_bin = _ray_bin()
        temp_dir.mkdir(parents=True, exist_ok=True)
        log_dir.mkdir(parents=True, exist_ok=True)
        state["ray_started"] = True
        _write_state(path, state)

        log(f"starting the Ray head on {plan.address} (root namespace, no CPUs/GPUs)")
        _start_ray({"head": ray_start_argv(plan, opts, ray_bin, str(temp_dir), None)}, env, log_dir)
        _record_pids(state, "head", _cluster_pids(state, []))
        _write_state(path, state)

        log(f"starting {nodes} Ray nodes ({opts.cpus_per_node} CPU, {opts.gpus_per_node} GPU each)")
        _start_ray(
            {
                n.namespace: ray_start_argv(plan, opts, ray_bin, str(temp_dir), n.index)
                for n in plan.nodes
            },
            env,
            log_dir,
        )
        for n in plan.nodes:
            _record_pids(state, n.namespace, _netns_pids(n.namespace))
        _write_state(path, state)

        _wait_ready(plan, ready_timeout_s)
        state["address"] = plan.address
        _write_state(path, state)
    except BaseException:
        log("emulated cluster: up failed; removing what was created")
        down(state_dir, log=log, keep_logs=True)
        log(f"Ray logs of the failed attempt: {temp_dir}/<node>/session_*/logs and {log_dir}")
        raise
    return plan.address


def down(
    state_dir: str | os.PathLike[str] = DEFAULT_STATE_DIR,
    *,
    log: Log = _stderr,
    keep_logs: bool = False,
) -> list[str]:
    """Stop the Ray processes and remove everything `up` started; return leftovers.

    Tolerates things already gone and a state file from an `up` that crashed midway.
    keep_logs leaves Ray's temp dir and the `ray start` logs (for a failed `up`).
    """
    require_root()
    state = _read_state(state_dir)
    if state is None:
        log(f"no emulated cluster recorded in {_state_path(state_dir)}; nothing to do")
        return []
    started = [s for s in state["steps"][: state["steps_started"]]]
    namespaces = [s["namespace"] for s in started if s["kind"] == "netns"]

    leftovers: list[str] = []
    pids = _cluster_pids(state, namespaces)
    still = _terminate(pids, log)
    leftovers += [f"process {p} did not exit" for p in sorted(still)]

    if started:
        log(f"removing {len(started)} network steps")
    for step in reversed(started):
        for cmd in step["down"]:
            _run(cmd, check=False)  # gone already (with its namespace) is fine

    present = _netns_list() & set(namespaces)
    leftovers += [f"namespace {ns} still exists" for ns in sorted(present)]
    host_iface = state["plan"]["host_iface"]
    if any(s["kind"] == "host_veth" for s in started) and _root_link_exists(host_iface):
        leftovers.append(f"interface {host_iface} still exists")

    state_dir = Path(state_dir)
    if not keep_logs:
        shutil.rmtree(state["ray_temp_dir"], ignore_errors=True)
        shutil.rmtree(state_dir / "logs", ignore_errors=True)
    if leftovers:
        for item in leftovers:
            log(f"left over: {item}")
        log(f"keeping {_state_path(state_dir)} so `down` can be retried")
        return leftovers
    _state_path(state_dir).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not empty: something else lives there
        state_dir.rmdir()
    log("emulated cluster removed")
    return []


def status(state_dir: str | os.PathLike[str] = DEFAULT_STATE_DIR) -> dict[str, Any]:
    """Nodes (namespace, ip, alive), link shapes as tc reports them, and the address."""
    state = _read_state(state_dir)
    if state is None:
        return {"up": False, "state_file": str(_state_path(state_dir))}
    plan = state["plan"]
    address = plan["address"]
    gcs = _gcs_nodes(address) or []
    alive_ips = {n["ip"] for n in gcs if n["alive"]}
    namespaces = _netns_list()
    nodes = [
        {
            "namespace": n["namespace"],
            "ip": n["ip"],
            "resource": n["resource"],
            "namespace_exists": n["namespace"] in namespaces,
            "alive": n["ip"] in alive_ips,
        }
        for n in plan["nodes"]
    ]
    links = []
    for link in plan["links"]:
        ifname = IFACE_PREFIX + link["name"]
        qdiscs = {}
        for n in plan["nodes"]:
            if n["namespace"] in namespaces:
                out = _run(
                    ["tc", "-n", n["namespace"], "qdisc", "show", "dev", ifname], check=False
                ).stdout.strip()
                qdiscs[n["namespace"]] = out
        links.append(
            {
                "name": link["name"],
                "ifname": ifname,
                "rate": link["rate"],
                "delay": link["delay"],
                "subnet": str(link_subnet([x["name"] for x in plan["links"]].index(link["name"]))),
                "qdiscs": qdiscs,
            }
        )
    return {
        "up": state["address"] is not None and all(n["alive"] for n in nodes),
        "address": address,
        "head_ip": plan["head_ip"],
        "head_alive": plan["head_ip"] in alive_ips,
        "dashboard": f"http://{plan['head_ip']}:{DASHBOARD_PORT}",
        "nodes": nodes,
        "links": links,
        "pids": state["pids"],
        "state_file": str(_state_path(state_dir)),
    }


# ---------------------------------------------------------------------------------------
# Link check: a gloo all_reduce across two nodes through one link


def busbw_gbps(msg_bytes: int, seconds: float, world_size: int) -> float:
    """all_reduce bus bandwidth in GB/s (1e9 B/s): bytes * 2(n-1)/n / t (nccl-tests)."""
    return msg_bytes * 2 * (world_size - 1) / world_size / seconds / 1e9


def measure_link_busbw(
    address: str,
    link: str,
    *,
    nodes: Sequence[int] = (0, 1),
    msg_bytes: int = 16 * 2**20,
    warmup: int = 1,
    iters: int = 3,
    rendezvous_port: int = 29511,
    timeout_s: float = 180.0,
) -> dict[str, Any]:
    """Time a gloo all_reduce between emulated nodes through `ls-<link>`.

    One Ray actor per node, pinned by its `emulated_node_<i>` resource, started with
    `GLOO_SOCKET_IFNAME=ls-<link>` (a fresh process per link: the env is read at
    process-group creation). Rendezvous goes over ctl; gloo's data then flows through
    the link. Each iteration: barrier, all_reduce, max over ranks; the median is
    reported. Also reports bytes each rank sent through the link (its tx counter), so
    the path is verified, not assumed. Calls ray.init(address) if needed: run it in a
    process that may hold a Ray connection.
    """
    import ray

    if not ray.is_initialized():
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    ifname = IFACE_PREFIX + link
    world = len(nodes)
    by_resource = {info["NodeManagerAddress"]: info for info in ray.nodes() if info.get("Alive")}
    node_ips = []
    for i in nodes:
        match = [
            ip for ip, info in by_resource.items() if f"emulated_node_{i}" in info["Resources"]
        ]
        if not match:
            raise EmulatedError(f"no alive Ray node with resource emulated_node_{i}")
        node_ips.append(match[0])

    # Defined here so cloudpickle ships it by value: workers need no linksweep install.
    class GlooRank:
        def run(self, rank, world_size, init_method, ifname, numel, warmup, iters):
            import datetime
            import time as _time

            import torch
            import torch.distributed as dist

            def tx_bytes(name):
                with open(f"/sys/class/net/{name}/statistics/tx_bytes") as f:
                    return int(f.read())

            dist.init_process_group(
                "gloo",
                init_method=init_method,
                rank=rank,
                world_size=world_size,
                timeout=datetime.timedelta(seconds=120),
            )
            try:
                x = torch.ones(numel, dtype=torch.float32)
                for _ in range(warmup):
                    dist.all_reduce(x)
                tx0 = tx_bytes(ifname)
                times = []
                for _ in range(iters):
                    dist.barrier()
                    t0 = _time.perf_counter()
                    dist.all_reduce(x)
                    times.append(_time.perf_counter() - t0)
                tx1 = tx_bytes(ifname)
            finally:
                dist.destroy_process_group()
            return {"times_s": times, "link_tx_bytes": tx1 - tx0}

    remote_cls = ray.remote(num_cpus=0, max_restarts=0)(GlooRank)
    actors = [
        remote_cls.options(
            resources={f"emulated_node_{i}": 0.01},
            runtime_env={"env_vars": {"GLOO_SOCKET_IFNAME": ifname}},
        ).remote()
        for i in nodes
    ]
    init_method = f"tcp://{node_ips[0]}:{rendezvous_port}"
    numel = msg_bytes // 4
    try:
        refs = [
            a.run.remote(rank, world, init_method, ifname, numel, warmup, iters)
            for rank, a in enumerate(actors)
        ]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        if len(ready) != len(refs):
            raise EmulatedError(f"gloo all_reduce over {ifname} did not finish in {timeout_s} s")
        results = ray.get(refs)
    finally:
        for a in actors:
            ray.kill(a)
    per_iter = [max(r["times_s"][k] for r in results) for k in range(iters)]
    step_time_s = sorted(per_iter)[len(per_iter) // 2]
    return {
        "link": link,
        "ifname": ifname,
        "world_size": world,
        "msg_bytes": msg_bytes,
        "iters": iters,
        "time_s": per_iter,
        "median_time_s": step_time_s,
        "busbw_gbps": busbw_gbps(msg_bytes, step_time_s, world),
        "link_tx_bytes_per_rank": [r["link_tx_bytes"] for r in results],
    }


# ---------------------------------------------------------------------------------------
# CLI entry point

DEFAULT_LINKS = ("fast", "slow=100mbit")  # what sweeps/emulated.yaml expects


def _print_status(st: dict[str, Any]) -> None:
    print(f"address    {st['address']}  (head {'alive' if st['head_alive'] else 'DOWN'})")
    print(f"dashboard  {st['dashboard']}")
    for n in st["nodes"]:
        state = "alive" if n["alive"] else ("no namespace" if not n["namespace_exists"] else "DOWN")
        print(f"node       {n['namespace']:8} {n['ip']:15} {n['resource']:18} {state}")
    for link in st["links"]:
        shape = " ".join(x for x in (link["rate"], link["delay"]) if x) or "unshaped"
        qdisc = next(iter(link["qdiscs"].values()), "").splitlines()
        print(f"link       {link['ifname']:10} {link['subnet']:16} {shape:12} {' | '.join(qdisc)}")


def cluster_command(
    action: str,
    nodes: int,
    links: list[str],
    state_dir: str,
    cpus_per_node: int,
    gpus_per_node: int,
) -> int:
    """`linksweep cluster up|down|status|check --emulated`. Exit codes: 0 ok, 1 failed,
    2 bad input (bad link, not root). `up` ends with the single line RAY_ADDRESS=<addr>.
    `links` empty means DEFAULT_LINKS."""
    state_dir = state_dir or DEFAULT_STATE_DIR
    if action not in ("up", "down", "status", "check"):
        _stderr(f"unknown action {action!r}; use up, down, status or check")
        return 2
    shapes: list[LinkShape] = []
    if action == "up":  # bad input is reported before anything else, root or not
        try:
            shapes = [parse_link_arg(s) for s in (links or DEFAULT_LINKS)]
            plan_emulated(nodes, shapes)
            RayNodeOptions(cpus_per_node, gpus_per_node)
        except ValueError as e:
            _stderr(str(e))
            return 2
    ok, why = netns_available()
    if not ok:
        _stderr(why)
        return 2
    try:
        if action == "up":
            address = up(
                nodes,
                shapes,
                state_dir,
                cpus_per_node=cpus_per_node,
                gpus_per_node=gpus_per_node,
            )
            _print_status(status(state_dir))
            print(f"RAY_ADDRESS={address}", flush=True)
            return 0
        if action == "down":
            return 1 if down(state_dir) else 0
        st = status(state_dir)
        if action == "status":
            if "address" not in st:
                print(f"no emulated cluster (no {st['state_file']})")
                return 1
            _print_status(st)
            return 0 if st["up"] else 1
        # check: one gloo all_reduce per user link between nodes 0 and 1
        if not st.get("up"):
            _stderr("no emulated cluster is up; run `linksweep cluster up --emulated` first")
            return 1
        if len(st["nodes"]) < 2:
            _stderr("check needs at least 2 nodes")
            return 2
        for link in st["links"][1:]:
            r = measure_link_busbw(st["address"], link["name"])
            shape = link["rate"] or "unshaped"
            expect = ""
            if link["rate"]:
                rate_gbps = LinkShape(link["name"], link["rate"]).rate_bits_per_s / 8 / 1e9
                expect = f" (tc rate {rate_gbps:.4f} GB/s: {r['busbw_gbps'] / rate_gbps:.0%})"
            print(f"{link['ifname']:10} {shape:10} busbw {r['busbw_gbps']:.4f} GB/s{expect}")
        return 0
    except EmulatedError as e:
        _stderr(f"error: {e}")
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m orchestrator.emulated up --nodes 2 --link fast --link slow=100mbit`;
    the same as `linksweep cluster ... --emulated`, for use without the linksweep CLI."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m orchestrator.emulated")
    p.add_argument("action", choices=["up", "down", "status", "check"])
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--link", action="append", default=[], metavar="NAME=RATE[,DELAY]")
    p.add_argument("--state-dir", default=DEFAULT_STATE_DIR)
    p.add_argument("--cpus-per-node", type=int, default=1)
    p.add_argument("--gpus-per-node", type=int, default=0)
    a = p.parse_args(argv)
    return cluster_command(a.action, a.nodes, a.link, a.state_dir, a.cpus_per_node, a.gpus_per_node)


if __name__ == "__main__":
    sys.exit(main())
