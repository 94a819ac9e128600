"""This process's hold on Ray: join a cluster or start the embedded one, and let go of it.

:func:`connect` joins the cluster at an address (``--address`` or ``RAY_ADDRESS``), or starts
the embedded single-node cluster with its :class:`~orchestrator.watchdog.Watchdog` (a kill -9'd
driver leaves no Ray process behind) and its daemons under ``SCHED_IDLE``
(``orchestrator/daemons.py``). A join that fails raises :class:`ClusterUnreachable` with one line
naming the address and the likely cause, within a bounded wait, without Ray's log lines.
:func:`disconnect` undoes what :func:`connect` did, and only that: a connection the caller made
itself (the tests' session cluster) is left alone. :func:`held` keeps one connection for several
commands run in this process (a bench's sweeps): their launchers are kept from one to the next,
and each command's ``disconnect`` leaves it alone until the hold ends. :func:`gauge` and
:func:`metrics_endpoint`: what this process publishes through its node's metrics agent, and
where that node exports it for Prometheus (``orchestrator/metrics``).

May import: reach, orchestrator.daemons, orchestrator.watchdog, ray.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import ray

from orchestrator import daemons
from orchestrator.raycluster.reach import ClusterUnreachable, join_error, split_address, tcp_probe
from orchestrator.watchdog import MARKER_ENV, Watchdog

# How long a join may wait. Ray 2.60 (ray/_private/node.py, _init_gcs_client) makes 20
# attempts ~1 s apart, and each waits up to py_gcs_connect_timeout_s (30 s) for the GCS's
# answer after two 5 s gRPC connects: minutes for a port that is not a GCS, 20 s of log lines
# for a refused token. An answer that did not come in one attempt rarely comes in the next.
JOIN_ATTEMPTS = 2  # RAY_gcs_server_port_wait_time_s: read by node.py at each ray.init
GCS_ANSWER_TIMEOUT_S = 10  # RAY_py_gcs_connect_timeout_s: RayConfig, read when ray is imported
_JOIN_ENV = {
    "RAY_gcs_server_port_wait_time_s": str(JOIN_ATTEMPTS),
    "RAY_py_gcs_connect_timeout_s": str(GCS_ANSWER_TIMEOUT_S),
}


@dataclass
class Session:
    """What :func:`connect` set up in this process."""

    label: str
    """The address joined, or ``embedded``."""
    watchdog: Watchdog | None = None
    """The embedded cluster's (``orchestrator/watchdog.py``); None for a joined cluster."""


_session: Session | None = None  # set when connect() called ray.init; None otherwise
_holding = False  # inside held(): disconnect() waits for its end


def connect(address: str | None) -> str:
    """Embedded Ray when no address and no RAY_ADDRESS; else join the cluster. Returns a label.

    Raises :class:`ClusterUnreachable` when the cluster at the address cannot be joined."""
    address = address or os.environ.get("RAY_ADDRESS")
    if ray.is_initialized():
        return address or "embedded"
    os.environ["RAY_DISABLE_USAGE_STATS"] = "1"
    return _join(address) if address else _start_embedded()


def _join(address: str) -> str:
    global _session
    target = _dialled(address)
    hp = split_address(target or address)
    probe_error = tcp_probe(*hp) if hp is not None else None  # at once, where Ray waits ~40 s
    if probe_error is not None:
        message = join_error(address, target, probe_error, "", _auth_mode(), GCS_ANSWER_TIMEOUT_S)
        raise ClusterUnreachable(message)
    kwargs = {}
    if not os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR"):
        # Not inside `ray job submit` (which ships --working-dir itself): ship our code.
        kwargs["runtime_env"] = {"py_modules": _code_folders()}
    with _bounded_join(), _stderr_captured() as log:
        try:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False, **kwargs)
        except Exception as exc:  # noqa: BLE001 - ConnectionError, AuthenticationError, ...
            text = _chain_text(exc) + "\n" + log.read()
            message = join_error(address, target, None, text, _auth_mode(), GCS_ANSWER_TIMEOUT_S)
            raise ClusterUnreachable(message) from exc
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


@contextlib.contextmanager
def held(address: str | None) -> Iterator[str]:
    """:func:`connect` once for every command run inside (each one's :func:`disconnect` does
    nothing until the end); :func:`disconnect` on the way out. Yields the label."""
    global _holding
    label = connect(address)
    _holding = True
    try:
        yield label
    finally:
        _holding = False
        disconnect()


def disconnect() -> None:
    """Leave Ray; for the embedded cluster, stop it and wait until none of its processes is
    left (the watchdog reaps any straggler). Nothing inside :func:`held`."""
    global _session
    if _holding:
        return
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


def gauge(name: str, description: str, labels: tuple[str, ...]):
    """A Ray gauge (``ray.util.metrics.Gauge``) of this process: its values go to this node's
    metrics agent, which exports them for Prometheus as ``ray_`` + ``name`` (Ray reports every
    10 s). Needs a connection (:func:`connect`)."""
    from ray.util.metrics import Gauge

    return Gauge(name, description=description, tag_keys=labels)


def metrics_endpoint() -> tuple[str, int] | None:
    """(IP, port) where the node this process runs on exports its metrics for Prometheus
    (``ray start --metrics-export-port``; Ray picks a free port when not told), None when the
    node has no metrics agent (a ``ray[minimal]`` install) or cannot say."""
    with contextlib.suppress(Exception):  # the node table is Ray's to change
        node_id = ray.get_runtime_context().get_node_id()
        for node in ray.nodes():
            if node.get("NodeID") == node_id:
                port = int(node.get("MetricsExportPort") or 0)
                return (node["NodeManagerAddress"], port) if port > 0 else None
    return None


def _dialled(address: str) -> str | None:
    """The host:port Ray will dial for ``address`` (a loopback host becomes this machine's
    IP); None when Ray cannot say (then the probe uses ``address`` as given)."""
    with contextlib.suppress(Exception), _stderr_captured():  # private API; it logs failures
        from ray._private.services import canonicalize_bootstrap_address

        return canonicalize_bootstrap_address(address)
    return None


def _code_folders() -> list[str]:
    """The folders of the ``orchestrator`` and ``workloads`` packages (found, not imported)."""
    return [
        importlib.util.find_spec(name).submodule_search_locations[0]
        for name in ("orchestrator", "workloads")
    ]


def _auth_mode() -> str | None:
    return os.environ.get("RAY_AUTH_MODE")


@contextlib.contextmanager
def _bounded_join() -> Iterator[None]:
    """:data:`_JOIN_ENV` for one ``ray.init`` (values already set are kept), then the
    environment as it was. RayConfig read the environment when ray was imported:
    ``Config.initialize`` reads it again (Ray's own token set-up does the same) and keeps the
    bound for this process's later GCS clients; without it only the attempts are bounded."""
    before = {k: os.environ.get(k) for k in _JOIN_ENV}
    os.environ.update({k: v for k, v in _JOIN_ENV.items() if before[k] is None})
    with contextlib.suppress(Exception):  # private API
        from ray._raylet import Config

        Config.initialize("")
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)


class _Log:
    def __init__(self, file) -> None:
        self.file = file

    def read(self) -> str:
        self.file.seek(0)
        return self.file.read().decode(errors="replace")


@contextlib.contextmanager
def _stderr_captured() -> Iterator[_Log]:
    """File descriptor 2 into a temporary file for the block: Ray's C++ client logs every
    failed attempt there (``gcs_client.cc``), whatever ``logging_level`` says. A failed join
    reads it for its cause; after a successful one it is written out unchanged."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as file:
        os.dup2(file.fileno(), 2)
        log = _Log(file)
        failed = True
        try:
            yield log
            failed = False
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if not failed and (text := log.read()):
                sys.stderr.write(text)


def _chain_text(exc: BaseException) -> str:
    """``Type: message`` of the error and of each error it was raised from."""
    parts = []
    seen: BaseException | None = exc
    while seen is not None and len(parts) < 8:
        parts.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)
