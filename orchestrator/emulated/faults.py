"""Faults planted in an emulated cluster: a slow node, or a slow pair of nodes. Pure.

    linksweep cluster up --emulated --nodes 4 --slow-node 2=100mbit
    linksweep cluster up --emulated --nodes 4 --slow-pair 0-1=50mbit,1ms

A slow node (`--slow-node I=RATE[,DELAY]`) is a NIC that negotiated down: every interface
of node I, ctl included, is shaped in both directions, its egress on `ls-<link>` in the
node's namespace and its ingress on the switch-side peer `n<I>-<k>` (that veth's egress in
the switch namespace). A slow pair (`--slow-pair A-B=RATE[,DELAY]`) is a bad path between
two nodes: on every link, ctl included, A's egress to B's address on that link and B's
egress to A's are shaped; the other pairs keep their speed.

One root qdisc per device, whatever is planted on it (`egress_commands`): a link's own
shape, a slow node's and its slow pairs are combined, never stacked by two `tc qdisc add
root` (the second would fail with "File exists"). Combining takes the slowest rate and adds
the delays (`shapes.combine_shapes`), so node I's traffic on a 500mbit link planted at
100mbit leaves at 100mbit; a 1ms link with a 2ms slow node delays by 3ms each way. On the
ingress side only the fault's own shape is added: the link's shape was applied once
already, at the sender's egress. With slow pairs a device's root is an `htb` qdisc: class
1:1 (the default) carries all other traffic at the link's or slow node's shape, or, when
neither shapes it, no class (htb sends unclassified packets unshaped); class 1:<k+1> per
slow partner at the combined shape, chosen by a u32 filter on `ip dst`; a delay is a netem
leaf under its class. htb, not prio: the kernel linksweep is tested on (6.18, built without
modules) has sch_htb and sch_tbf but neither sch_prio nor sch_netem (DELAY needs netem).

`planted_faults(state)` reads the faults of a recorded cluster back, with the nodes' Ray
IPs, for reports ("planted: node 2 at 100mbit").

May import: shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.emulated.shapes import (
    DELAY_RE,
    RATE_RE,
    Command,
    LinkShape,
    burst_bytes,
    combine_shapes,
    qdisc_commands,
)

FaultKind = Literal["node", "pair"]
FLAGS: dict[str, str] = {"node": "--slow-node", "pair": "--slow-pair"}
# An htb class needs a rate: a delay-only shape (or fault) gets this one, far above what
# a veth pair carries on one machine, so only the delay shows.
UNSHAPED_RATE = "100gbit"

FAULT_FORMATS = {
    "node": "use I=RATE or I=RATE,DELAY (or I=,DELAY) with I a node index, e.g. 2=100mbit",
    "pair": "use A-B=RATE or A-B=RATE,DELAY (or A-B=,DELAY) with A, B two node indices, "
    "e.g. 0-1=50mbit",
}
_SHAPE_FORMS = "RATE like 100mbit, 1gbit, 500kbit (tc bit rates), DELAY like 1ms, 200us"


@dataclass(frozen=True)
class Fault:
    """One planted fault: a node (or a pair of nodes) whose traffic is shaped slower."""

    kind: FaultKind
    """"node": every interface of one node, both directions; "pair": only the traffic
    between two nodes, on every link."""
    nodes: tuple[int, ...]
    """Node indices: (i,) for a node, (a, b) with a < b for a pair."""
    rate: str | None = None
    """tc rate, e.g. "100mbit"; None: rate unchanged."""
    delay: str | None = None
    """One-way delay added, e.g. "1ms"; None: none."""

    def __post_init__(self) -> None:
        flag = FLAGS.get(self.kind)
        if flag is None:
            raise ValueError(f"fault kind {self.kind!r} is not one of {sorted(FLAGS)}")
        want = 1 if self.kind == "node" else 2
        if len(self.nodes) != want or not all(isinstance(i, int) and i >= 0 for i in self.nodes):
            raise ValueError(f"{flag}: nodes {self.nodes!r} must be {want} node indices >= 0")
        if self.kind == "pair" and not self.nodes[0] < self.nodes[1]:
            raise ValueError(
                f"{flag} {self.spec()}: a pair is two distinct nodes, smaller index first"
            )
        if self.rate is None and self.delay is None:
            raise ValueError(
                f"{flag} {self.spec()}: give a RATE, a DELAY or both; {FAULT_FORMATS[self.kind]}"
            )
        if self.rate is not None and not RATE_RE.match(self.rate):
            raise ValueError(
                f"{flag} {self.spec()}: rate {self.rate!r} is not a tc bit rate; {_SHAPE_FORMS}"
            )
        if self.delay is not None and not DELAY_RE.match(self.delay):
            raise ValueError(
                f"{flag} {self.spec()}: delay {self.delay!r} is not a tc time; {_SHAPE_FORMS}"
            )
        if self.rate is not None and float(RATE_RE.match(self.rate).group(1)) <= 0:
            raise ValueError(f"{flag} {self.spec()}: rate {self.rate!r} must be positive")

    def shape(self, link: str) -> LinkShape:
        """This fault's rate and delay, as a shape of `link`."""
        return LinkShape(link, self.rate, self.delay)

    def spec(self) -> str:
        """The flag's argument: "2=100mbit", "0-1=50mbit,1ms"."""
        who = "-".join(str(i) for i in self.nodes)
        shape = self.rate or ""
        if self.delay is not None:
            shape += f",{self.delay}"
        return f"{who}={shape}"

    def describe(self) -> str:
        """ "node 2 at 100mbit", "pair 0-1 at 50mbit +1ms one-way"."""
        who = "-".join(str(i) for i in self.nodes)
        parts = [p for p in (self.rate, self.delay and f"+{self.delay} one-way") if p]
        return f"{self.kind} {who} at {' '.join(parts)}"


def _parse(kind: FaultKind, s: str) -> Fault:
    flag, forms = FLAGS[kind], FAULT_FORMATS[kind]
    who, sep, shape = s.strip().partition("=")
    if not sep or not shape:
        raise ValueError(f"{flag} {s!r}: missing =RATE; {forms}")
    ids = who.split("-")
    if len(ids) != (1 if kind == "node" else 2) or not all(x.strip().isdigit() for x in ids):
        what = "a node index" if kind == "node" else "two node indices A-B"
        raise ValueError(f"{flag} {s!r}: {who!r} is not {what}; {forms}")
    nodes = tuple(int(x) for x in ids)
    if kind == "pair":
        if nodes[0] == nodes[1]:
            raise ValueError(f"{flag} {s!r}: a pair needs two distinct nodes, got {who!r}")
        nodes = tuple(sorted(nodes))
    parts = shape.split(",")
    if len(parts) > 2 or (len(parts) == 2 and not parts[1]):
        raise ValueError(f"{flag} {s!r}: shape {shape!r} is malformed; {forms}")
    return Fault(kind, nodes, parts[0] or None, parts[1] if len(parts) == 2 else None)


def parse_slow_node_arg(s: str) -> Fault:
    """`--slow-node I=RATE[,DELAY]` (or `I=,DELAY`) as a Fault.

    >>> parse_slow_node_arg("2=100mbit")
    Fault(kind='node', nodes=(2,), rate='100mbit', delay=None)
    """
    return _parse("node", s)


def parse_slow_pair_arg(s: str) -> Fault:
    """`--slow-pair A-B=RATE[,DELAY]` (or `A-B=,DELAY`) as a Fault; the pair is unordered.

    >>> parse_slow_pair_arg("1-0=50mbit,1ms")
    Fault(kind='pair', nodes=(0, 1), rate='50mbit', delay='1ms')
    """
    return _parse("pair", s)


def validate_faults(nodes: int, faults: Sequence[Fault]) -> None:
    """Raise ValueError (naming the flag, the bad value and what is allowed) unless every
    fault fits a cluster of `nodes` nodes: indices in range, each node or pair once."""
    seen: set[tuple[str, tuple[int, ...]]] = set()
    for f in faults:
        flag = FLAGS[f.kind]
        bad = [i for i in f.nodes if i >= nodes]
        if bad:
            raise ValueError(
                f"{flag} {f.spec()}: node {bad[0]} is out of range; "
                f"with --nodes {nodes} use 0..{nodes - 1}"
            )
        if (f.kind, f.nodes) in seen:
            raise ValueError(
                f"{flag} {f.spec()}: {f.kind} {'-'.join(map(str, f.nodes))} "
                f"is planted twice; give each {f.kind} once"
            )
        seen.add((f.kind, f.nodes))


def node_fault(faults: Sequence[Fault], i: int) -> Fault | None:
    """The slow-node fault planted on node i, if any."""
    return next((f for f in faults if f.kind == "node" and f.nodes == (i,)), None)


def egress_shapes(
    faults: Sequence[Fault], link: LinkShape, i: int
) -> tuple[LinkShape, list[tuple[int, LinkShape]]]:
    """Node i's egress on `link`: the shape of all its traffic there (the link's, combined
    with a slow node's), and per slow partner j (ascending) the shape of its traffic to j
    (that, combined with the pair's)."""
    slow_node = node_fault(faults, i)
    base = combine_shapes(link.name, link, *([slow_node.shape(link.name)] if slow_node else []))
    pairs = sorted(
        (f.nodes[1] if f.nodes[0] == i else f.nodes[0], f)
        for f in faults
        if f.kind == "pair" and i in f.nodes
    )
    return base, [(j, combine_shapes(link.name, base, f.shape(link.name))) for j, f in pairs]


def ingress_shape(faults: Sequence[Fault], link: str, i: int) -> LinkShape | None:
    """What shapes node i's ingress on `link` (the switch-side peer's egress): a slow
    node's own shape, or None."""
    slow_node = node_fault(faults, i)
    return slow_node.shape(link) if slow_node else None


def egress_commands(
    namespace: str, dev: str, base: LinkShape, classes: Sequence[tuple[str, LinkShape]]
) -> tuple[Command, ...]:
    """tc for one device's egress: all traffic shaped as `base`, except packets to each
    address of `classes`, shaped as its LinkShape. One root qdisc: without classes the
    plain tbf/netem of `qdisc_commands`; with classes an `htb` root (see the module
    docstring), class 1:1 for `base` (the default; none when base is unshaped: htb then
    sends unclassified packets unshaped from its direct queue) and class 1:<k+1> for the
    k-th address, chosen by a u32 filter on `ip dst`, a netem leaf where it has a delay."""
    if not classes:
        return qdisc_commands(namespace, dev, base)
    tc = ("tc", "-n", namespace)
    default = ("default", "1") if base.shaped else ()
    cmds: list[Command] = [
        (*tc, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", *default)
    ]
    if base.shaped:
        cmds += _htb_class(tc, dev, 1, base)
    for minor, (address, shape) in enumerate(classes, start=2):
        cmds += _htb_class(tc, dev, minor, shape)
        cmds.append(
            (*tc, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1")
            + ("u32", "match", "ip", "dst", f"{address}/32", "flowid", f"1:{minor}")
        )
    return tuple(cmds)


def _htb_class(tc: Command, dev: str, minor: int, shape: LinkShape) -> list[Command]:
    """One htb class at the shape's rate (ceil = rate: it never borrows), plus a netem leaf
    (handle <minor + 1>:) for its delay. A delay-only shape gets UNSHAPED_RATE."""
    rate = shape.rate or UNSHAPED_RATE
    burst = str(burst_bytes(LinkShape("x", rate).rate_bits_per_s))
    # quantum: explicit, so tc does not warn that rate / r2q is big; with ceil = rate no
    # class borrows, so it does not change what each class gets.
    cmds: list[Command] = [
        (*tc, "class", "add", "dev", dev, "parent", "1:", "classid", f"1:{minor}", "htb")
        + ("rate", rate, "ceil", rate, "burst", burst, "cburst", burst, "quantum", "65536")
    ]
    if shape.delay is not None:
        cmds.append(
            (*tc, "qdisc", "add", "dev", dev, "parent", f"1:{minor}", "handle", f"{minor + 1:x}:")
            + ("netem", "delay", shape.delay, "limit", "100000")
        )
    return cmds


def planted_faults(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The faults of a recorded emulated cluster (its state file's JSON), with the nodes'
    Ray IPs (their ctl addresses): `[{"kind": "node", "nodes": ["198.18.0.3"],
    "node_indices": [2], "rate": "100mbit", "delay": None, "describe": "node 2 at
    100mbit"}]`; `[]` when none were planted (or the state predates faults)."""
    plan = state.get("plan") or {}
    ips = {n["index"]: n["ip"] for n in plan.get("nodes") or []}
    out = []
    for raw in plan.get("faults") or []:
        f = Fault(raw["kind"], tuple(raw["nodes"]), raw.get("rate"), raw.get("delay"))
        out.append(
            {
                "kind": f.kind,
                "nodes": [ips[i] for i in f.nodes],
                "node_indices": list(f.nodes),
                "rate": f.rate,
                "delay": f.delay,
                "describe": f.describe(),
            }
        )
    return out
