"""Verified transports: read what NCCL really used from its ``NCCL_DEBUG=INFO`` log.

Setting ``NCCL_P2P_DISABLE=1`` proves nothing by itself: on a PHB machine NCCL already skips P2P
(default ``NCCL_P2P_LEVEL`` stops at PXB), and ``nvidia-smi topo -m`` looks the same either way.
So every run keeps its ranks' NCCL log and records the transport NCCL chose. The log lines look
like (host:pid:tid, then the local device)::

    host:123:456 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
    host:123:456 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1
    host:123:456 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC
    host:123:456 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
    host:123:456 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct
    host:123:456 [0] NCCL INFO Channel 00 : 0[1b000] -> 7[41000] via direct shared memory
    host:123:456 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0
    host:123:456 [0] NCCL INFO Channel 01 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA

``a[b] -> c[d]`` reads "rank a (device or PCI bus id b) sends to rank c". The rank that printed
the line is ``a`` on send, P2P and SHM lines, but ``c`` on ``[receive]`` lines: NCCL's
``recvSetup`` prints ``peer -> me`` (``src/transport/net.cc``). So ``TransportLine.rank`` is the
rank that printed the line and ``peer`` the other one: on ``[receive]`` lines ``rank`` is ``c``
and ``peer`` is ``a``. Any prefix is
allowed before ``NCCL INFO`` (Ray adds ``(RayTrainWorker pid=..)``), and lines that are not
channel connections (``Connected all rings``, ``Ring 00 : 7 -> 0 -> 1``, ``Trees ...``) are
ignored. NCCL 2.4-2.6 printed ``Ring 00 :`` where later versions print ``Channel 00 :``; both read.

Transport families: ``P2P`` (NVLink or PCIe peer access, any mode), ``SHM`` (through host
memory; NCCL before 2.13 calls it ``direct shared memory``), ``NET/Socket`` (TCP), ``NET/IB``
(InfiniBand/RoCE verbs, including the HPC-X/SHARP plugin that names itself ``IBext`` or
``IBext_v8``), or ``NET/<name>`` for other net plugins.
gloo runs have no such log; callers record ``GLOO_TRANSPORT`` for them.

NVLS (NVLink SHARP: reductions in the NVSwitch) and CollNet (reductions in the network, e.g. the
SHARP plugin) are not channel connections: NCCL sets them up apart from P2P, so a run with
``NCCL_P2P_DISABLE=1`` can still move data over NVLink through NVLS. Their lines, as NCCL prints
them (``src/transport/nvls.cc``, ``src/graph/connect.cc``, ``src/init.cc``,
``src/transport/coll_net.cc``)::

    NVLS multicast support is available on dev 0        (or "is not available")
    NVLS Head  4:  4 12                                 (NVLS heads of a multi-node comm)
    NVLS comm 0x55a7be5601c0 headRank 0 nHeads 8 ...    (NVLS buffers allocated)
    Connected NVLS tree
    16 coll channels, 0 nvls channels, 16 p2p channels, 16 p2p channels per peer
    8 coll channels, 0 collnet channels, 0 nvls channels, 8 p2p channels, ...
    CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA    (NCCL 2.6-2.8: "Coll 00 : 0 [send] ...")
    rank 0 Connected CollNet / Connected Collnet Chains ...
    NET/Plugin: Loaded collnet plugin SHARP (v8)        (loaded: not yet used)

:func:`nvls_used` and :func:`collnet_used` turn them into True (set up), False (the log says
not) or None (the log does not say). NVLS set up means NCCL may run collectives through the
NVSwitch; which algorithm each call used is not in an INFO log.

Env flags are read as NCCL reads them (``src/misc/param.cc``, ``src/graph/paths.cc``):
``strtol(value, NULL, 0)``, so ``"0x1"`` is 1 and ``"yes"`` is 0. ``NCCL_P2P_DISABLE`` and
``NCCL_SHM_DISABLE`` disable only when that number is exactly 1 (``disable == 1``,
``ncclParamShmDisable() == 1``); ``NCCL_NVLS_ENABLE`` (default 2) turns NVLS off only at 0.

May import: nothing (the standard library only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "GLOO_TRANSPORT",
    "NcclLog",
    "TransportLine",
    "any_true",
    "collnet_used",
    "effective_transport",
    "link_check",
    "nvls_used",
    "parse_nccl_log",
    "to_json_dict",
    "transport_family",
    "transport_families",
]

GLOO_TRANSPORT = "gloo/tcp"
"""The transport recorded for gloo (CPU) runs: gloo has one TCP transport and no log to verify."""

_VERSION_RE = re.compile(r"NCCL version:?\s+(\d+\.\d+\.\d+)")
_ENV_RE = re.compile(r"\b(NCCL_[A-Z0-9_]+) set by environment to (.*)$")
_CHANNEL_RE = re.compile(
    r"NCCL INFO\s+(?:Channel|Ring)\s+(?P<channel>\d+)(?:/\d+)?\s*:\s*"
    r"(?P<rank>\d+)(?:\[[0-9A-Za-z]*\])?\s*->\s*(?P<peer>\d+)(?:\[[0-9A-Za-z]*\])?\s*"
    r"(?:\[(?P<direction>send|receive)\]\s*)?via\s+(?P<detail>\S.*?)\s*$"
)

_NVLS_SUPPORT_RE = re.compile(r"NVLS multicast support is (not )?available")
_NVLS_SETUP_RE = re.compile(r"NVLS comm 0x|Connected NVLS|NVLS Head\s+\d+:")
_NVLS_CHANNELS_RE = re.compile(r"\b(\d+) nvls channels")
_COLLNET_CHANNELS_RE = re.compile(r"\b(\d+) collnet channels")
# NCCL 2.6-2.8 began a CollNet connection line "Coll NN :", 2.9 on "CollNet NN :".
_COLLNET_SETUP_RE = re.compile(
    r"Coll(?:Net)? \d+(?:/\d+)?\s*:\s*\d+ \[(?:send|receive)\] via COLLNET/|Connected CollNet"
    r"|Connected Collnet Chains"
)
_COLLNET_OFF_RE = re.compile(r"less than CollNet node threshold|disabling CollNet")
_COLLNET_PLUGIN_RE = re.compile(r"Loaded collnet plugin (\S+)")

# Families from fastest to slowest, for naming mixed runs ("P2P+SHM").
_FAMILY_ORDER = ("P2P", "SHM", "NET/IB", "NET/Socket")


@dataclass(frozen=True)
class TransportLine:
    """One ``Channel NN : a[..] -> b[..] via ...`` connection from the log."""

    rank: int
    """The rank that printed the line: left of ``->``, but right of it on ``[receive]`` lines."""
    channel: int
    """NCCL channel number (``Channel 03/1`` -> 3)."""
    peer: int
    """The other rank of the connection: right of ``->``, left of it on ``[receive]`` lines."""
    transport: str
    """Family: ``P2P``, ``SHM``, ``NET/Socket``, ``NET/IB`` or ``NET/<plugin>``."""
    detail: str
    """Everything after ``via``: ``P2P/IPC/read``, ``SHM/direct/direct``, ``NET/IB/0/GDRDMA``."""
    direction: str | None = None
    """``"send"`` or ``"receive"`` for NET connections, else None."""


@dataclass(frozen=True)
class NcclLog:
    """What one run's NCCL_DEBUG=INFO output says about versions, env and transports."""

    nccl_version: str | None
    """``"2.21.5"`` from ``NCCL version 2.21.5+cuda12.4`` (first one seen); None if absent."""
    channels: tuple[TransportLine, ...] = ()
    """Every channel connection line, in log order."""
    env_echo: dict[str, str] = field(default_factory=dict)
    """Variables NCCL reports as ``set by environment``, e.g. ``{"NCCL_P2P_DISABLE": "1"}``."""
    nvls_support: bool | None = None
    """``NVLS multicast support is (not) available``: True if any rank's device had it."""
    nvls_setup: bool = False
    """A line that only an NVLS set-up prints: ``NVLS comm 0x..``, ``NVLS Head``, ``Connected
    NVLS tree``."""
    nvls_channels: int | None = None
    """Largest ``N nvls channels`` count seen; None if no such line."""
    collnet_channels: int | None = None
    """Largest ``N collnet channels`` count seen (NCCL 2.2x+ prints its ring channel count
    there, ``src/init.cc``, so only 0 is evidence); None if no such line."""
    collnet_setup: bool = False
    """A ``CollNet NN/N : r [send|receive] via COLLNET/..`` (``Coll NN :`` before NCCL 2.9) or
    ``Connected CollNet`` line."""
    collnet_off: bool = False
    """NCCL said it disabled CollNet (too few nodes)."""
    collnet_plugin: str | None = None
    """``Loaded collnet plugin SHARP (v8)`` -> ``"SHARP"``: loaded, not necessarily used."""


# Transports NCCL once named otherwise: 2.4 to 2.12 print SHM connections as "via direct shared
# memory" (src/transport/shm.cc); 2.13 renamed them "via SHM/<send>/<recv>".
_LEGACY_DETAILS = {"direct shared memory": "SHM"}


def transport_family(detail: str) -> str:
    """Family of a ``via`` detail: ``NET/IBext_v8/1`` -> ``NET/IB``, ``P2P/CUMEM`` -> ``P2P``,
    ``direct shared memory`` (NCCL before 2.13) -> ``SHM``."""
    if detail in _LEGACY_DETAILS:
        return _LEGACY_DETAILS[detail]
    parts = detail.split("/")
    head = parts[0]
    if head != "NET" or len(parts) < 2:
        return head
    plugin = parts[1]
    return "NET/IB" if plugin.startswith("IB") else f"NET/{plugin}"


def parse_nccl_log(text: str) -> NcclLog:
    """Parse NCCL_DEBUG=INFO output (one rank's or many ranks' concatenated)."""
    version: str | None = None
    env: dict[str, str] = {}
    channels: list[TransportLine] = []
    extra = _Extra()
    for line in text.splitlines():
        extra.read(line)  # NVLS/CollNet lines: also in logs whose prefixes were cut off
        if "NCCL" not in line:
            continue
        if version is None:
            m = _VERSION_RE.search(line)
            if m:
                version = m.group(1)
                continue
        m = _ENV_RE.search(line)
        if m:
            value = m.group(2).strip()
            # NCCL up to ~2.8 ended the sentence with a period: "... to 1."
            if value.endswith(".") and len(value) > 1:
                value = value[:-1]
            env[m.group(1)] = value
            continue
        m = _CHANNEL_RE.search(line)
        if m:
            detail = m.group("detail")
            left, right = int(m.group("rank")), int(m.group("peer"))
            receive = m.group("direction") == "receive"  # printed by the receiver: peer -> me
            channels.append(
                TransportLine(
                    rank=right if receive else left,
                    channel=int(m.group("channel")),
                    peer=left if receive else right,
                    transport=transport_family(detail),
                    detail=detail,
                    direction=m.group("direction"),
                )
            )
    return NcclLog(nccl_version=version, channels=tuple(channels), env_echo=env, **extra.fields())


class _Extra:
    """The NVLS and CollNet facts of a log, gathered line by line."""

    def __init__(self) -> None:
        self.nvls_support: bool | None = None
        self.nvls_setup = False
        self.nvls_channels: int | None = None
        self.collnet_channels: int | None = None
        self.collnet_setup = False
        self.collnet_off = False
        self.collnet_plugin: str | None = None

    def read(self, line: str) -> None:
        if "NVLS" in line or "nvls" in line:
            m = _NVLS_SUPPORT_RE.search(line)
            if m:
                self.nvls_support = bool(self.nvls_support) or m.group(1) is None
            if _NVLS_SETUP_RE.search(line):
                self.nvls_setup = True
            m = _NVLS_CHANNELS_RE.search(line)
            if m:
                self.nvls_channels = max(int(m.group(1)), self.nvls_channels or 0)
        if "ollNet" in line or "ollnet" in line or "COLLNET" in line:
            m = _COLLNET_CHANNELS_RE.search(line)
            if m:
                self.collnet_channels = max(int(m.group(1)), self.collnet_channels or 0)
            if _COLLNET_SETUP_RE.search(line):
                self.collnet_setup = True
            if _COLLNET_OFF_RE.search(line):
                self.collnet_off = True
            m = _COLLNET_PLUGIN_RE.search(line)
            if m:
                self.collnet_plugin = m.group(1)

    def fields(self) -> dict:
        return dict(vars(self))


def nvls_used(log: NcclLog) -> bool | None:
    """Did NCCL set up NVLS? True: an NVLS set-up line or a non-zero ``nvls channels`` count;
    False: ``NVLS multicast support is not available``, ``0 nvls channels`` or NCCL echoing
    ``NCCL_NVLS_ENABLE`` as 0; None: the log does not say (``support is available`` alone only
    says the device could)."""
    if log.nvls_setup or (log.nvls_channels or 0) > 0:
        return True
    if log.nvls_support is False or log.nvls_channels == 0:
        return False
    if "NCCL_NVLS_ENABLE" in log.env_echo and _strtol(log.env_echo["NCCL_NVLS_ENABLE"]) == 0:
        return False
    return None


def collnet_used(log: NcclLog) -> bool | None:
    """Did NCCL set up CollNet? True: a ``CollNet .. via COLLNET/`` or ``Connected CollNet``
    line; False: ``0 collnet channels``, NCCL disabling it, or ``NCCL_COLLNET_ENABLE`` echoed
    as 0; None otherwise (a loaded collnet plugin alone is not use)."""
    if log.collnet_setup:
        return True
    if log.collnet_channels == 0 or log.collnet_off:
        return False
    if "NCCL_COLLNET_ENABLE" in log.env_echo and _strtol(log.env_echo["NCCL_COLLNET_ENABLE"]) == 0:
        return False
    return None


def any_true(values) -> bool | None:
    """Several ranks' answers as one: True if any says True, else False if any says False."""
    values = list(values)
    if True in values:
        return True
    return False if False in values else None


def transport_families(log: NcclLog) -> list[str]:
    """Distinct transport families seen, sorted."""
    return sorted({c.transport for c in log.channels})


def to_json_dict(log: NcclLog) -> dict:
    """The stored form: ``{"nccl_version": "2.21.5", "transports": ["P2P", "SHM"], "nvls": None,
    "collnet": None}`` (``nvls``/``collnet``: :func:`nvls_used`, :func:`collnet_used`)."""
    return {
        "nccl_version": log.nccl_version,
        "transports": transport_families(log),
        "nvls": nvls_used(log),
        "collnet": collnet_used(log),
    }


def effective_transport(families: list[str]) -> str:
    """One label for a run: ``"P2P"``, ``"SHM"``, ``"P2P+NET/IB"``...; ``"unknown"`` if none."""
    distinct = set(families)
    if not distinct:
        return "unknown"
    known = [f for f in _FAMILY_ORDER if f in distinct]
    return "+".join(known + sorted(distinct - set(_FAMILY_ORDER)))


_STRTOL_RE = re.compile(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")


def _strtol(value: str) -> int:
    """C's ``strtol(value, NULL, 0)``, as NCCL reads its integer env vars: leading blanks, a sign,
    ``0x`` hex, leading-``0`` octal or decimal, stopping at the first other character; 0 when
    no digits start the string (``"yes"``, ``""``)."""
    m = _STRTOL_RE.match(value)
    if not m:
        return 0
    digits = m.group(2)
    if digits[:2] in ("0x", "0X"):
        number = int(digits, 16)
    elif digits.startswith("0"):
        number = int(digits, 8)
    else:
        number = int(digits)
    return -number if m.group(1) == "-" else number


def _env_on(env: dict[str, str], name: str) -> bool:
    """A ``*_DISABLE`` flag as NCCL reads it: on only when ``strtol`` gives exactly 1
    (``src/graph/paths.cc`` ``disable == 1``, ``src/transport/shm.cc``
    ``ncclParamShmDisable() == 1``). ``"2"``, ``"true"`` or ``"-1"`` leave it off."""
    return name in env and _strtol(env[name]) == 1


def _p2p_off(env: dict[str, str]) -> bool:
    """``NCCL_P2P_DISABLE=1``, or ``NCCL_P2P_LEVEL`` at LOC: the name ``LOC`` (case-sensitive,
    ``strcmp``) or an old-style number whose ``strtol`` is 0 (``src/graph/paths.cc``
    ``ncclGetLevel``; NCCL reads the level only when the disable flag is not 1)."""
    if _env_on(env, "NCCL_P2P_DISABLE"):
        return True
    level = env.get("NCCL_P2P_LEVEL")
    if level is None:
        return False
    if level == "LOC":
        return True
    return level[:1].isdigit() and _strtol(level) == 0


def _nvls_setting(env: dict[str, str]) -> int | None:
    """``NCCL_NVLS_ENABLE`` as NCCL reads it (0 off, 1 required, 2 auto); None if unset or empty
    (NCCL then takes its default, 2)."""
    value = env.get("NCCL_NVLS_ENABLE")
    return None if value is None or value == "" else _strtol(value)


def link_check(
    link_env: dict[str, str], families: list[str], link_class: str, nvls: bool | None = None
) -> str:
    """Did NCCL use the transport the link variant asked for? ``"ok"``/``"mismatch"``/``"unknown"``.

    ``link_env`` is the environment the ranks ran with (the link's variables plus what the
    planner added, e.g. ``NCCL_NVLS_ENABLE=0`` on a P2P-disabled link), ``families`` what the log
    showed, ``link_class`` the hardware link between the run's GPUs (``run_link_class``),
    ``nvls`` whether the log shows NVLS set up (:func:`nvls_used`). Mismatch when:

    - the variant disables P2P (``NCCL_P2P_DISABLE=1`` or ``NCCL_P2P_LEVEL=LOC``) but P2P was used;
    - it disables P2P and NVLS was set up, unless the env explicitly enables NVLS
      (``NCCL_NVLS_ENABLE`` set non-zero): ``no_p2p`` means no NVLink at all;
    - the env turns NVLS off (``NCCL_NVLS_ENABLE=0``) yet NVLS was set up;
    - it disables P2P and SHM but P2P or SHM was used (traffic should be on NET);
    - it leaves P2P on, the GPUs share NVLink (``NV#``), yet SHM or NET was used: the NVLink
      variant did not measure NVLink (e.g. ranks could not see each other's GPU).

    Unknown when the log had no channel lines (NCCL_DEBUG not set, or a gloo run).
    """
    distinct = set(families)
    if not distinct:
        return "unknown"
    p2p_off = _p2p_off(link_env)
    shm_off = _env_on(link_env, "NCCL_SHM_DISABLE")
    if p2p_off and "P2P" in distinct:
        return "mismatch"
    nvls_env = _nvls_setting(link_env)
    if nvls and (nvls_env == 0 or (p2p_off and not nvls_env)):
        return "mismatch"
    if p2p_off and shm_off and "SHM" in distinct:
        return "mismatch"
    nvlink = re.fullmatch(r"NV\d+", link_class or "") is not None
    if not p2p_off and nvlink and any(f == "SHM" or f.startswith("NET") for f in distinct):
        return "mismatch"
    return "ok"
