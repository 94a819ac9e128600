"""Why a Ray cluster cannot be joined, said in one line; and the TCP probe asked first.

``session.connect`` calls :func:`tcp_probe` before ``ray.init``: a port nobody listens on fails a
plain TCP connect at once, where Ray's own client tries for ~40 s per attempt. When the join
fails anyway, :func:`join_error` turns Ray's error text into the line the CLI prints (the
message of :class:`ClusterUnreachable`). Pure but for the probe, so the wording is unit-tested
without Ray.

May import: nothing (the standard library only).
"""

from __future__ import annotations

import re
import socket
from typing import Literal

PROBE_TIMEOUT_S = 2.0  # a TCP handshake takes milliseconds on any network a sweep runs over
MAX_LINE_CHARS = 300  # the one line quoted from Ray's error when no cause below fits

JoinCause = Literal["not_listening", "auth", "no_gcs", "other"]
"""Why a join failed: nothing listens at the address; the cluster refused this process's
token (Ray token authentication); something listens but no Ray GCS answered; anything else."""

# Ray 2.60's texts: the GCS answers "Unauthenticated: RPC error: InvalidAuthToken: ..." and the
# client raises ray.exceptions.AuthenticationError; compared in lower case.
_AUTH_MARKERS = (
    "invalidauthtoken",
    "unauthenticated",
    "authenticationerror",
    "authentication token",
)
_NO_TOKEN_MARKER = "no authentication token was found"  # RAY_AUTH_MODE=token, yet no token here
_NO_GCS_MARKER = "timed out while waiting for gcs"
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception)\b[^:\s]*:\s*\S")


class ClusterUnreachable(Exception):
    """``session.connect`` could not join the cluster; the message names the address and the
    likely cause in one line (for ``errors.err``, no traceback)."""


def split_address(address: str) -> tuple[str, int] | None:
    """(host, port) of ``host:port`` (also ``ray://host:port``, ``[v6]:port``); None when the
    address names no port (``auto``: Ray looks for the cluster itself)."""
    rest = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def tcp_probe(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when something accepts a TCP connection at host:port within ``timeout_s``; else
    why not (the error's text: refused, timed out, unknown host)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return str(exc) or type(exc).__name__


def join_cause(probe_error: str | None, error_text: str) -> JoinCause:
    """The likely cause, from the probe's answer (None: the TCP connect succeeded) and the text
    of Ray's error and log."""
    if probe_error is not None:
        return "not_listening"
    low = error_text.lower()
    if any(m in low for m in _AUTH_MARKERS):
        return "auth"
    if _NO_GCS_MARKER in low:
        return "no_gcs"
    return "other"


def join_error(
    address: str,
    target: str | None,
    probe_error: str | None,
    error_text: str,
    auth_mode: str | None,
    attempt_timeout_s: float,
) -> str:
    """The one line :class:`ClusterUnreachable` carries: where, and the likely cause.

    ``target`` is the host:port Ray dials (it swaps a loopback host for this machine's IP);
    ``probe_error`` what :func:`tcp_probe` said of it (None: it connected); ``error_text`` the
    text of Ray's error and log (empty when the probe failed: Ray was not asked); ``auth_mode`` is this process's ``RAY_AUTH_MODE``; ``attempt_timeout_s`` how long one join
    attempt waited for the GCS to answer."""
    where = address if target in (None, address) else f"{address} (Ray dials {target})"
    hp = split_address(target or address)
    host_port = f"{hp[0]}:{hp[1]}" if hp else address
    cause = join_cause(probe_error, error_text)
    if cause == "not_listening":
        port = hp[1] if hp else "PORT"
        why = (
            f"nothing accepts connections on {host_port} ({probe_error}; is the head up, "
            f"started with `ray start --head --port {port}`? the right host and port? a "
            "firewall?)"
        )
    elif cause == "auth":
        why = _auth_advice(error_text, auth_mode)
    elif cause == "no_gcs":
        why = (
            f"{host_port} accepts connections but no Ray GCS answered within "
            f"{attempt_timeout_s:.0f} s (is it the port `ray start --head` printed, default "
            "6379? an overloaded head?)"
        )
    else:
        why = cause_line(error_text)
    return f"cannot join the Ray cluster at {where}: {why}"


def _auth_advice(error_text: str, auth_mode: str | None) -> str:
    fix = "or, on a trusted network, start the cluster with RAY_AUTH_MODE=disabled"
    if _NO_TOKEN_MARKER in error_text.lower():
        return (
            "RAY_AUTH_MODE=token is set here but no token was found: put the cluster's token "
            f"(the head's ~/.ray/auth_token) in RAY_AUTH_TOKEN or ~/.ray/auth_token, {fix}"
        )
    if (auth_mode or "").lower() != "token":
        return (
            "the cluster uses Ray token authentication and this process sends no token "
            f"(RAY_AUTH_MODE is {auth_mode or 'unset'} here; with an explicit address Ray sends "
            "one only under RAY_AUTH_MODE=token): run with RAY_AUTH_MODE=token and the "
            f"cluster's token in RAY_AUTH_TOKEN or ~/.ray/auth_token, {fix}"
        )
    return (
        "the cluster refused this process's token (Ray token authentication; RAY_AUTH_TOKEN or "
        f"~/.ray/auth_token here is not the head's): use the head's ~/.ray/auth_token, {fix}"
    )


def cause_line(error_text: str) -> str:
    """The deepest ``Type: message`` line of an error's text (Ray chains a join's errors), else
    its first line; bounded."""
    lines = [ln.strip() for ln in error_text.splitlines() if ln.strip()]
    found = [ln for ln in lines if _EXC_LINE.match(ln)]
    line = found[-1] if found else (lines[0] if lines else "no error text")
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 3] + "..."
