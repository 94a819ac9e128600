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
    host:123:456 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0
    host:123:456 [0] NCCL INFO Channel 01 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA

``a[b] -> c[d]`` reads "rank a (device or PCI bus id b) sends to rank c": ``TransportLine.rank``
is ``a`` and ``peer`` is ``c``, whatever the ``[send]``/``[receive]`` tag says. Any prefix is
allowed before ``NCCL INFO`` (Ray adds ``(RayTrainWorker pid=..)``), and lines that are not
channel connections (``Connected all rings``, ``Ring 00 : 7 -> 0 -> 1``, ``Trees ...``) are
ignored. NCCL 2.4-2.6 printed ``Ring 00 :`` where later versions print ``Channel 00 :``; both read.

Transport families: ``P2P`` (NVLink or PCIe peer access, any mode), ``SHM`` (through host
memory), ``NET/Socket`` (TCP), ``NET/IB`` (InfiniBand/RoCE verbs, including the HPC-X/SHARP
plugin that names itself ``IBext`` or ``IBext_v8``), or ``NET/<name>`` for other net plugins.
gloo runs have no such log; callers record ``GLOO_TRANSPORT`` for them.

May import: nothing (the standard library only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "GLOO_TRANSPORT",
    "NcclLog",
    "TransportLine",
    "effective_transport",
    "link_check",
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

# Families from fastest to slowest, for naming mixed runs ("P2P+SHM").
_FAMILY_ORDER = ("P2P", "SHM", "NET/IB", "NET/Socket")


@dataclass(frozen=True)
class TransportLine:
    """One ``Channel NN : a[..] -> b[..] via ...`` connection from the log."""

    rank: int
    """Sending rank: the number before ``[`` left of ``->``."""
    channel: int
    """NCCL channel number (``Channel 03/1`` -> 3)."""
    peer: int
    """Receiving rank: the number before ``[`` right of ``->``."""
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


def transport_family(detail: str) -> str:
    """Family of a ``via`` detail: ``NET/IBext_v8/1`` -> ``NET/IB``, ``P2P/CUMEM`` -> ``P2P``."""
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
    for line in text.splitlines():
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
            channels.append(
                TransportLine(
                    rank=int(m.group("rank")),
                    channel=int(m.group("channel")),
                    peer=int(m.group("peer")),
                    transport=transport_family(detail),
                    detail=detail,
                    direction=m.group("direction"),
                )
            )
    return NcclLog(nccl_version=version, channels=tuple(channels), env_echo=env)


def transport_families(log: NcclLog) -> list[str]:
    """Distinct transport families seen, sorted."""
    return sorted({c.transport for c in log.channels})


def to_json_dict(log: NcclLog) -> dict:
    """The stored form: ``{"nccl_version": "2.21.5", "transports": ["P2P", "SHM"]}``."""
    return {"nccl_version": log.nccl_version, "transports": transport_families(log)}


def effective_transport(families: list[str]) -> str:
    """One label for a run: ``"P2P"``, ``"SHM"``, ``"P2P+NET/IB"``...; ``"unknown"`` if none."""
    distinct = set(families)
    if not distinct:
        return "unknown"
    known = [f for f in _FAMILY_ORDER if f in distinct]
    return "+".join(known + sorted(distinct - set(_FAMILY_ORDER)))


def _env_on(env: dict[str, str], name: str) -> bool:
    """NCCL reads these flags as integers: "1" disables, "0"/unset/garbage do not."""
    try:
        return int(env.get(name, "0").strip()) != 0
    except ValueError:
        return False


def _p2p_off(env: dict[str, str]) -> bool:
    # NCCL_P2P_LEVEL=LOC (legacy integer 0) means "never use P2P", the same as disabling it.
    level = env.get("NCCL_P2P_LEVEL", "").strip().upper()
    return _env_on(env, "NCCL_P2P_DISABLE") or level in ("LOC", "0")


def link_check(link_env: dict[str, str], families: list[str], link_class: str) -> str:
    """Did NCCL use the transport the link variant asked for? ``"ok"``/``"mismatch"``/``"unknown"``.

    ``link_env`` is the variant's environment, ``families`` what the log showed, ``link_class``
    the hardware link between the run's GPUs (``run_link_class``). Mismatch when:

    - the variant disables P2P (``NCCL_P2P_DISABLE=1`` or ``NCCL_P2P_LEVEL=LOC``) but P2P was used;
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
    if p2p_off and shm_off and "SHM" in distinct:
        return "mismatch"
    nvlink = re.fullmatch(r"NV\d+", link_class or "") is not None
    if not p2p_off and nvlink and any(f == "SHM" or f.startswith("NET") for f in distinct):
        return "mismatch"
    return "ok"
