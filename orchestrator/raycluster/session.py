"""This process's hold on Ray: join a cluster or start the embedded one, and let go of it.

:func:`connect` joins the cluster at an address (``--address`` or ``RAY_ADDRESS``), or starts
the embedded single-node cluster with its :class:`~orchestrator.watchdog.Watchdog` (a kill -9'd
driver leaves no Ray process behind) and its daemons under ``SCHED_IDLE``
(``orchestrator/daemons.py``). :func:`disconnect` undoes what :func:`connect` did, and only that: a connection the caller made
itself (the tests' session cluster) is left alone.

May import: ray, orchestrator.daemons, orchestrator.watchdog.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from dataclasses import dataclass

import ray

from orchestrator import daemons
from orchestrator.watchdog import MARKER_ENV, Watchdog


@dataclass
class Session:
    """What :func:`connect` set up in this process."""

    label: str
    """The address joined, or ``embedded``."""
    watchdog: Watchdog | None = None
    """The embedded cluster's (``orchestrator/watchdog.py``); None for a joined cluster."""


_session: Session | None = None  # set when connect() called ray.init; None otherwise


def connect(address: str | None) -> str:
    """Embedded Ray when no address and no RAY_ADDRESS; else join the cluster. Returns a label."""
    address = address or os.environ.get("RAY_ADDRESS")
    if ray.is_initialized():
        return address or "embedded"
    os.environ["RAY_DISABLE_USAGE_STATS"] = "1"
    return _join(address) if address else _start_embedded()


def _join(address: str) -> str:
    global _session
    kwargs = {}
    if not os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR"):
        # Not inside `ray job submit` (which ships --working-dir itself): ship our code.
        kwargs["runtime_env"] = {"py_modules": _code_folders()}
    ray.init(address=address, logging_level="ERROR", log_to_driver=False, **kwargs)
    _session = Session(label=address)
    return address


def _start_embedded() -> str:
    global _session
    _session = Session(label="embedded", watchdog=Watchdog())
    os.environ[MARKER_ENV] = str(os.getpid())  # inherited by every process of the cluster
    os.environ.update(daemons.quiet_env(os.environ))
    ray.init(
        address="local",  # a new cluster, never one some `ray start` left in /tmp/ray
        num_cpus=os.cpu_count() or 1,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
    )
    with contextlib.suppress(Exception):  # private API: the marker is a help, not a need
        _session.watchdog.tell(ray._private.worker._global_node.get_session_dir_path())
    daemons.yield_quietly()
    return "embedded"


def disconnect() -> None:
    """Leave Ray; for the embedded cluster, stop it and wait until none of its processes is
    left (the watchdog reaps any straggler)."""
    global _session
    session, _session = _session, None
    if session is None:
        return
    if ray.is_initialized():
        ray.shutdown()
    if session.watchdog is not None:
        session.watchdog.stop()


def quiet_daemons() -> None:
    """The embedded cluster's daemons (agents may have started since :func:`connect`) under
    ``SCHED_IDLE`` again; nothing for a joined cluster, whose processes are not ours."""
    if _session is not None and _session.watchdog is not None:
        daemons.yield_quietly()


def _code_folders() -> list[str]:
    """The folders of the ``orchestrator`` and ``workloads`` packages (found, not imported)."""
    return [
        importlib.util.find_spec(name).submodule_search_locations[0]
        for name in ("orchestrator", "workloads")
    ]
