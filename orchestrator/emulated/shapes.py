"""Link shapes, the tc commands that shape one device, and the constants of an emulated
cluster. Pure: no side effects.

`parse_link_arg` turns a `--link NAME=RATE,DELAY` argument into a `LinkShape`;
`qdisc_commands` is the tc (tbf and/or netem) that shapes one device's egress;
`combine_shapes` is what two shapes on one path amount to (the slower rate, the delays
added). The plan that uses them is `plan.plan_emulated`.

May import: nothing (the standard library only).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass

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
RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|tbit)$")
DELAY_RE = re.compile(r"^(\d+(?:\.\d+)?)(us|ms|s)$")
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
        if self.rate is not None and not RATE_RE.match(self.rate):
            raise ValueError(
                f"link {self.name!r}: rate {self.rate!r} is not a tc bit rate; {LINK_FORMATS}"
            )
        if self.delay is not None and not DELAY_RE.match(self.delay):
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
        number, unit = RATE_RE.match(self.rate).groups()
        return float(number) * _RATE_UNITS[unit]

    @property
    def delay_s(self) -> float | None:
        if self.delay is None:
            return None
        number, unit = DELAY_RE.match(self.delay).groups()
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
# tc commands for one device


Command = tuple[str, ...]


def link_subnet(index: int) -> ipaddress.IPv4Network:
    """Link k's subnet: 198.18.k.0/24 (k=0 is ctl)."""
    return ipaddress.IPv4Network(f"{SUBNET_PREFIX}.{index}.0/{PREFIX_LEN}")


def combine_shapes(name: str, *shapes: LinkShape) -> LinkShape:
    """What several shapes in series on one path amount to: the slowest rate wins (a
    packet cannot leave faster than the slowest pacer lets it) and the delays add.

    >>> combine_shapes("ctl", LinkShape("a", "1gbit", "1ms"), LinkShape("b", "50mbit", "500us"))
    LinkShape(name='ctl', rate='50mbit', delay='1500us')
    """
    rated = [s for s in shapes if s.rate is not None]
    rate = min(rated, key=lambda s: s.rate_bits_per_s).rate if rated else None
    delayed = [s for s in shapes if s.delay is not None]
    if len(delayed) <= 1:
        delay = delayed[0].delay if delayed else None
    else:  # microseconds: tc's finest unit here, and exact for every sum of ms and us
        delay = f"{round(sum(s.delay_s for s in delayed) * 1e6)}us"
    return LinkShape(name, rate, delay)


def burst_bytes(rate_bits_per_s: float) -> int:
    """Token bucket size for a rate: at least 64 KiB so a GSO segment always fits (tbf would
    have to split it), else 10 ms of tokens."""
    return max(64 * 1024, int(rate_bits_per_s / 8 / 100))


def qdisc_commands(namespace: str, dev: str, link: LinkShape) -> tuple[Command, ...]:
    """tc commands that shape `dev`'s egress inside `namespace`.

    rate only: tbf at root. delay only: netem at root. Both: netem at root with tbf as
    its child (the layout of the tc-netem(8) examples), so a packet waits out the delay
    and is then paced at the rate.
    """
    tc = ("tc", "-n", namespace, "qdisc", "add", "dev", dev)
    tbf: tuple[str, ...] = ()
    if link.rate is not None:
        # latency bounds the queue at 50 ms of traffic.
        burst = burst_bytes(link.rate_bits_per_s)
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
