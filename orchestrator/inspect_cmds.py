"""``linksweep topo``, ``transports`` and ``doctor``: look at hardware and logs, change nothing.

Each command returns an exit code (the ``cli`` convention: 0 fine, 1 a check found a problem,
2 bad input) and prints plain text on stdout; errors go to stderr. ``--json`` output is exactly
the stored form (``topo.to_json_dict`` / ``nccl_log.to_json_dict``), one line, so scripts can
rely on it.

- ``topo_command``: parse a saved ``nvidia-smi topo -m`` (``--parse FILE``), or probe every node
  of the Ray cluster and print its matrix and NVML inventory.
- ``transports_command``: which transports an ``NCCL_DEBUG=INFO`` log shows, channel by channel.
- ``doctor_command``: everything on the cluster that could make link variants measure something
  other than the link (``discovery.doctor_findings``); exit 1 if any finding invalidates a link
  comparison.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from orchestrator import nccl_log, topo
from orchestrator.discovery import (
    Finding,
    NodeReport,
    discover_nodes,
    doctor_findings,
    parse_report_topo,
)
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, err

__all__ = ["doctor_command", "topo_command", "transports_command"]


def _read_text(path: str, what: str) -> str | None:
    """The file's text, or None after saying on stderr why it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        err(f"{what} {path}: no such file")
    except IsADirectoryError:
        err(f"{what} {path}: is a directory, expected a text file")
    except OSError as exc:
        err(f"{what} {path}: cannot read: {exc.strerror or exc}")
    return None


def _grid(header: Sequence[str], rows: Sequence[Sequence[object]], indent: str = "  ") -> str:
    """Left-aligned columns, two spaces apart; None shows as '-'."""
    cells = [[str(h) for h in header]] + [["-" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join(
        indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in cells
    )


# ---------------------------------------------------------------------------------------------
# topo
# ---------------------------------------------------------------------------------------------


def _topo_table(t: topo.Topology) -> str:
    header = ["", *t.gpus, *t.nics, "CPU Affinity", "NUMA Affinity"]
    rows = []
    for a in t.gpus:
        rows.append(
            [
                a,
                *("X" if a == b else t.links[(a, b)] for b in t.gpus),
                *(t.nic_links[(a, nic)] for nic in t.nics),
                t.cpu_affinity.get(a),
                t.numa_affinity.get(a),
            ]
        )
    text = _grid(header, rows)
    if t.nic_legend:
        text += "\n  NICs: " + ", ".join(f"{k}={v}" for k, v in t.nic_legend.items())
    return text


def _fmt_w(w: float | None) -> str | None:
    return None if w is None else f"{w:.0f}"


def _inventory_table(inventory: list[dict]) -> str:
    header = [
        "gpu",
        "name",
        "pci_bus_id",
        "mem_GB",
        "pcie_gen",
        "pcie_width",
        "power_W/default",
        "temp_C",
        "nvlinks",
    ]
    rows = []
    for g in inventory:
        mem = g.get("memory_total_bytes")
        rows.append(
            [
                g.get("index"),
                g.get("name"),
                g.get("pci_bus_id"),
                None if mem is None else f"{mem / 1e9:.1f}",
                f"{g.get('pcie_gen_current')}/{g.get('pcie_gen_max')}",
                f"x{g.get('pcie_width_current')}/x{g.get('pcie_width_max')}",
                f"{_fmt_w(g.get('power_limit_w'))}/{_fmt_w(g.get('power_default_limit_w'))}",
                None if g.get("temp_c") is None else f"{g['temp_c']:.0f}",
                g.get("nvlink_active_count"),
            ]
        )
    return _grid(header, rows)


def _node_title(r: NodeReport) -> str:
    return (
        f"== node {r.hostname or '?'} ({r.ip or '?'}, Ray node {r.node_id[:12]}): "
        f"Ray advertises {r.cpus:g} CPU, {r.gpus:g} GPU"
    )


def _print_node_topology(r: NodeReport) -> None:
    t = parse_report_topo(r)
    if t is not None:
        print("topology (nvidia-smi topo -m):")
        print(_topo_table(t))
    elif r.topo_text is None:
        print(f"topology: no GPUs / nvidia-smi not found: {r.topo_status}")
    else:
        print(f"topology: {r.topo_status}; the text as nvidia-smi printed it:")
        print(r.topo_text.rstrip())
    if r.nvml_ok and r.inventory:
        print("GPUs (NVML):")
        print(_inventory_table(r.inventory))
    elif r.nvml_ok:
        print(f"GPUs (NVML): none ({r.nvml_status})")
    else:
        print(f"GPUs (NVML): no GPUs / NVML absent: {r.nvml_status or 'not probed'}")


def topo_command(address: str | None, parse_file: str | None, as_json: bool) -> int:
    """``linksweep topo``: parse a saved ``nvidia-smi topo -m`` file, or probe the cluster."""
    if parse_file is not None:
        text = _read_text(parse_file, "topo --parse")
        if text is None:
            return EXIT_BAD_INPUT
        try:
            parsed = topo.parse_topo(text)
        except topo.TopoParseError as exc:
            err(f"topo --parse {parse_file}: not readable as nvidia-smi topo -m output: {exc}")
            return EXIT_BAD_INPUT
        if as_json:
            print(json.dumps(topo.to_json_dict(parsed)))
        else:
            print(f"{parse_file}: {len(parsed.gpus)} GPU(s), {len(parsed.nics)} NIC(s)")
            print(_topo_table(parsed))
            print(f"fingerprint {topo.topology_fingerprint(parsed)}")
        return EXIT_OK

    from orchestrator.raycluster.reach import ClusterUnreachable
    from orchestrator.raycluster.session import connect

    try:
        connect(address)
    except ClusterUnreachable as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    reports = discover_nodes()
    if as_json:
        out = []
        for r in reports:
            t = parse_report_topo(r)
            out.append(
                {
                    "node": r.hostname,
                    "node_id": r.node_id,
                    "ip": r.ip,
                    "topo": None if t is None else topo.to_json_dict(t),
                    "topo_status": r.topo_status,
                    "nvml": "ok" if r.nvml_ok else f"absent: {r.nvml_status}",
                    "gpus": r.inventory,
                    "error": r.error,
                }
            )
        print(json.dumps(out))
        return EXIT_OK
    for r in reports:
        print(_node_title(r))
        if r.error is not None:
            print(f"probe failed: {r.error}")
        else:
            _print_node_topology(r)
        print()
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# transports
# ---------------------------------------------------------------------------------------------


def transports_command(parse_file: str, as_json: bool) -> int:
    """``linksweep transports --parse FILE``: what NCCL says it used, from its INFO log."""
    text = _read_text(parse_file, "transports --parse")
    if text is None:
        return EXIT_BAD_INPUT
    log = nccl_log.parse_nccl_log(text)
    if log.nccl_version is None and not log.channels and not log.env_echo:
        err(
            f"transports --parse {parse_file}: no NCCL log lines found (no 'NCCL version', "
            "'Channel NN : a -> b via ...' or 'set by environment' line); was the run started "
            "with NCCL_DEBUG=INFO?"
        )
        return EXIT_BAD_INPUT
    if as_json:
        print(json.dumps(nccl_log.to_json_dict(log)))
        return EXIT_OK
    families = nccl_log.transport_families(log)
    print(f"NCCL version: {log.nccl_version or 'not in log'}")
    for name, value in log.env_echo.items():
        print(f"env: {name}={value}")
    if not log.channels:
        print(
            "no channel connection lines (NCCL prints them at communicator init with "
            "NCCL_DEBUG=INFO; this excerpt has none)"
        )
        return EXIT_OK
    print(
        f"transports: {', '.join(families)} (run label "
        f"{nccl_log.effective_transport(families)}), {len(log.channels)} channel line(s)"
    )
    rows = [[c.rank, c.peer, c.channel, c.direction, c.transport, c.detail] for c in log.channels]
    print(_grid(["rank", "peer", "channel", "direction", "transport", "detail"], rows))
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# doctor
# ---------------------------------------------------------------------------------------------


def _p2p_table(p2p: list[list[bool | None]]) -> str:
    n = len(p2p)
    names = [f"GPU{i}" for i in range(n)]
    rows = [
        [names[i], *("X" if v is None else ("yes" if v else "NO") for v in p2p[i])]
        for i in range(n)
    ]
    return _grid(["", *names], rows)


def _print_findings(findings: list[Finding]) -> None:
    for f in findings:
        mark = "INVALIDATES" if f.invalidates else "note"
        print(f"  [{mark}] {f.code}: {f.message}")


def doctor_command(address: str | None) -> int:
    """``linksweep doctor``: can this cluster's link variants be trusted? Exit 1 if not."""
    from orchestrator.raycluster.reach import ClusterUnreachable
    from orchestrator.raycluster.session import connect

    try:
        connect(address)
    except ClusterUnreachable as exc:
        err(str(exc))
        return EXIT_BAD_INPUT
    reports = discover_nodes()
    findings = doctor_findings(reports)

    for r in reports:
        print(_node_title(r))
        if r.error is not None:
            print(f"probe failed: {r.error}")
        else:
            _print_node_topology(r)
            if r.p2p is not None:
                print("P2P access (torch.cuda.can_device_access_peer, row -> column):")
                print(_p2p_table(r.p2p))
            elif r.inventory or r.cuda_device_count:
                print(f"P2P access: unknown ({r.cuda_status})")
            print(
                "versions: "
                f"driver {r.driver_version or '-'}, CUDA (driver) {r.cuda_version or '-'}, "
                f"NCCL {r.nccl_version or '-'}, torch {r.torch_version or '-'}"
                f" (CUDA build {r.torch_cuda or '-'})"
            )
        mine = [f for f in findings if f.node_id == r.node_id and f.node != "*"]
        if mine:
            print("findings:")
            _print_findings(mine)
        print()

    cluster = [f for f in findings if f.node == "*"]
    for f in cluster:
        if f.code == "cpu_only":
            print(f.message)
    rest = [f for f in cluster if f.code != "cpu_only"]
    if rest:
        print("cluster:")
        _print_findings(rest)

    bad = [f for f in findings if f.invalidates]
    if bad:
        print(
            f"doctor: {len(bad)} problem(s) would invalidate link comparisons "
            "(marked INVALIDATES above); fix them or read results with that in mind"
        )
        return EXIT_FAILED
    notes = sum(f.code != "cpu_only" for f in findings)
    print(f"doctor: nothing invalidates link comparisons ({notes} note(s))")
    return EXIT_OK
