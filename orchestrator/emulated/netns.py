"""Applying and undoing the plan with `ip` and `tc`: namespaces, veths, bridges, qdiscs.

Also the checks that must pass before anything is created: whether this process may create
network namespaces at all (`netns_available`, `require_root`) and whether `up` would touch
something it did not create (`preflight`). Every command runs with a timeout; a failure
raises EmulatedError with the command, its stderr and, for known messages, a hint.

May import: blueprint, shapes.
"""

from __future__ import annotations

import ipaddress
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from orchestrator.emulated.blueprint import EmulatedPlan, Step
from orchestrator.emulated.shapes import DEFAULT_STATE_DIR, EmulatedError, link_subnet

CMD_TIMEOUT_S = 30.0

_HINTS = {
    "Specified qdisc kind is unknown": (
        "this kernel lacks a tc qdisc the link shape needs: RATE needs sch_tbf, "
        "DELAY needs sch_netem (try `modprobe sch_netem`)"
    ),
    "File exists": "left over from an earlier run? try `linksweep cluster down --emulated`",
}


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


def subnet_in_use() -> str | None:
    """The root namespace's route overlapping the emulated control subnet (another emulated
    cluster, or a LAN on 198.18.0.0/24), if any."""
    ctl = link_subnet(0)
    routes = subprocess.run(["ip", "-4", "route", "show"], capture_output=True, text=True).stdout
    for line in routes.splitlines():
        try:
            if ipaddress.ip_network(line.split()[0], strict=False).overlaps(ctl):
                return line.strip()
        except (ValueError, IndexError):  # "default", a blank line
            continue
    return None


def cluster_unavailable() -> str | None:
    """Why an emulated cluster cannot be brought up here now (no namespaces, or the subnet is
    held), or None: what tests and benchmarks check before they bring one up."""
    ok, why = netns_available()
    if not ok:
        return why
    if route := subnet_in_use():
        return f"another emulated cluster holds {link_subnet(0)} in the root namespace ({route})"
    return None


def require_root() -> None:
    """Raise EmulatedError with a clear message unless namespaces can be created."""
    ok, why = netns_available()
    if not ok:
        raise EmulatedError(why)


def run(cmd: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one command; with check, a non-zero exit raises EmulatedError (with a hint)."""
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=CMD_TIMEOUT_S)
    if check and proc.returncode != 0:
        err = proc.stderr.strip() or proc.stdout.strip()
        hint = next((h for key, h in _HINTS.items() if key in err), "")
        raise EmulatedError(
            f"`{shlex.join(cmd)}` failed (rc {proc.returncode}): {err}"
            + (f"\n  hint: {hint}" if hint else "")
        )
    return proc


def netns_list() -> set[str]:
    """Names of the network namespaces that exist now."""
    out = run(["ip", "netns", "list"]).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def netns_pids(ns: str) -> set[int]:
    """Processes inside namespace `ns` (none when it does not exist)."""
    proc = run(["ip", "netns", "pids", ns], check=False)
    return {int(p) for p in proc.stdout.split() if p.isdigit()} if proc.returncode == 0 else set()


def root_link_exists(name: str) -> bool:
    return run(["ip", "link", "show", "dev", name], check=False).returncode == 0


def qdisc_show(namespace: str, ifname: str) -> str:
    """`tc qdisc show` of one interface inside a namespace ("" when it cannot be read)."""
    return run(["tc", "-n", namespace, "qdisc", "show", "dev", ifname], check=False).stdout.strip()


def preflight(plan: EmulatedPlan, state_dir: Path) -> None:
    """Refuse to start where `up` would touch something it did not create."""
    existing = netns_list() & set(plan.namespaces)
    if existing:
        raise EmulatedError(
            f"network namespaces {sorted(existing)} already exist; another emulated "
            f"cluster with prefix {plan.prefix!r}? `ip netns del` them or use another prefix"
        )
    if root_link_exists(plan.host_iface):
        raise EmulatedError(f"interface {plan.host_iface} already exists in the root namespace")
    ctl = link_subnet(0)
    routes = run(["ip", "-4", "route", "show"]).stdout
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


def apply_steps(plan: EmulatedPlan, before_step: Callable[[int], None]) -> None:
    """Run every step's `up` commands in order; `before_step(i + 1)` is called before step
    i starts, so a caller can record how far creation got before it touches anything."""
    for i, step in enumerate(plan.steps):
        before_step(i + 1)
        for cmd in step.up:
            run(cmd)


def undo_steps(started: Sequence[dict[str, Any]]) -> None:
    """Undo started steps (as stored in the state file) in reverse order, tolerating things
    already gone (with their namespace, or never fully created)."""
    for step in reversed(started):
        for cmd in step["down"]:
            run(cmd, check=False)


def replace_qdiscs(old: Sequence[dict[str, Any]], new: Sequence[Step]) -> list[str]:
    """Reshape a live cluster's devices from the qdisc steps `old` (as stored in the state
    file) to those of `new` (a plan's steps): each device whose tc commands differ loses its
    root qdisc (children and filters go with it) and gets the new one. Returns the devices
    changed, by step name (``<namespace>/<device>``). The namespaces, links and addresses
    must be the same in both: only qdisc steps are read."""
    before = {s["name"]: s for s in old if s["kind"] == "qdisc"}
    after = {s.name: s for s in new if s.kind == "qdisc"}
    changed = []
    for name in sorted(before.keys() | after.keys()):
        was, will = before.get(name), after.get(name)
        if was is not None and will is not None and _same(was["up"], will.up):
            continue
        if was is not None:
            for cmd in was["down"]:
                run(cmd)
        if will is not None:
            for cmd in will.up:
                run(cmd)
        changed.append(name)
    return changed


def _same(stored: Sequence[Sequence[str]], planned: Sequence[Sequence[str]]) -> bool:
    """Whether commands read back from JSON (lists) equal a plan's (tuples)."""
    return [list(c) for c in stored] == [list(c) for c in planned]


def leftovers(started: Sequence[dict[str, Any]], host_iface: str) -> list[str]:
    """What started steps created and is still there after `undo_steps`."""
    namespaces = [s["namespace"] for s in started if s["kind"] == "netns"]
    present = netns_list() & set(namespaces)
    found = [f"namespace {ns} still exists" for ns in sorted(present)]
    if any(s["kind"] == "host_veth" for s in started) and root_link_exists(host_iface):
        found.append(f"interface {host_iface} still exists")
    return found


def wait_removed(
    started: Sequence[dict[str, Any]], host_iface: str, timeout_s: float = 10.0
) -> list[str]:
    """:func:`leftovers`, polled until empty or ``timeout_s``: ``down`` returns only when every
    namespace and interface it removed is gone (or says which are not)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = leftovers(started, host_iface)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)
