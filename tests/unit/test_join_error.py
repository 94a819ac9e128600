"""Why a cluster cannot be joined, in one line (orchestrator/raycluster/reach.py), without Ray.

The error texts are Ray 2.60's, captured from real failed joins: a closed port, a port where
something other than a GCS listens, a head started with RAY_AUTH_MODE=token joined without or
with a wrong token. The CLI's topo and doctor turn the error into exit 2 (the integration test
tests/integration/test_join_error.py runs `linksweep run --address` against real addresses).
"""

from __future__ import annotations

import socket
import types

import pytest

from orchestrator.errors import EXIT_BAD_INPUT
from orchestrator.raycluster.reach import (
    ClusterUnreachable,
    cause_line,
    join_cause,
    join_error,
    split_address,
    tcp_probe,
)
from tests.unit.stand_in import stand_in

# ray.init's ConnectionError, its cause (node.py's RuntimeError, whose text carries the last
# attempt's traceback) and the C++ client's log lines, as session._join joins them.
TIMED_OUT = """\
ConnectionError: Failed to connect to Ray cluster at 192.0.2.2:45680
RuntimeError: Failed to connect to GCS. Last connection error: Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/ray/_private/node.py", line 996, in _init_gcs_client
    client = GcsClient(
  File "python/ray/includes/common.pxi", line 144, in ray._raylet.check_status_timeout_as_rpc_error
ray.exceptions.RpcError: Timed out while waiting for GCS to become available.

[2026-11-23 21:40:33,404 W 19854 19854] rpc_client.h:153: Failed to connect to GCS at address \
192.0.2.2:45680 within 2 seconds.
[2026-11-23 21:40:39,407 W 19854 19854] gcs_client.cc:210: Failed to get cluster ID from GCS \
server: TimedOut: Timed out while waiting for GCS to become available.
"""
REFUSED_TOKEN = """\
ConnectionError: Failed to connect to Ray cluster at 192.0.2.2:46379
RuntimeError: Failed to connect to GCS. Last connection error: Traceback (most recent call last):
  File "python/ray/includes/common.pxi", line 119, in ray._raylet.check_status
ray.exceptions.AuthenticationError: RPC error: InvalidAuthToken: Authentication token is missing \
or incorrect. Ensure that the token for the cluster is available in a local file (e.g., \
~/.ray/auth_token or via RAY_AUTH_TOKEN_PATH) or as the `RAY_AUTH_TOKEN` environment variable.

[2026-11-23 21:39:20,651 W 15203 15203] gcs_client.cc:210: Failed to get cluster ID from GCS \
server: Unauthenticated: RPC error: InvalidAuthToken: Authentication token is missing or incorrect
"""
LOG_ONLY_REFUSED = (
    "[2026-11-23 21:39:26,526 W 17946 17946] gcs_client.cc:210: Failed to get cluster ID from GCS "
    "server: Unauthenticated: RPC error: InvalidAuthToken: Authentication token is missing or "
    "incorrect\n"
)
NO_TOKEN_HERE = (
    "AuthenticationError: Token authentication is enabled but no authentication token was found"
)


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("10.0.0.5:6379", ("10.0.0.5", 6379)),
        ("ray://head.example:10001", ("head.example", 10001)),
        ("[fd00::1]:6379", ("fd00::1", 6379)),
        ("auto", None),
        ("head.example", None),
        ("head:port", None),
    ],
)
def test_split_address(address, expected):
    assert split_address(address) == expected


@pytest.mark.parametrize(
    ("probe_error", "text", "cause"),
    [
        ("[Errno 111] Connection refused", "", "not_listening"),
        ("timed out", REFUSED_TOKEN, "not_listening"),  # the probe is asked first
        (None, REFUSED_TOKEN, "auth"),
        (None, LOG_ONLY_REFUSED, "auth"),  # Ray's log line alone is enough
        (None, NO_TOKEN_HERE, "auth"),
        (None, TIMED_OUT, "no_gcs"),
        (None, "ValueError: Invalid address format: head", "other"),
        (None, "", "other"),
    ],
)
def test_join_cause_from_the_probe_then_the_error_text(probe_error, text, cause):
    assert join_cause(probe_error, text) == cause


def _error(probe_error=None, text="", auth_mode=None, target="192.0.2.2:46379") -> str:
    return join_error("127.0.0.1:46379", target, probe_error, text, auth_mode, 10)


def test_nothing_listening_names_the_address_the_reason_and_the_port_to_start():
    msg = _error("[Errno 111] Connection refused")
    assert msg.startswith(
        "cannot join the Ray cluster at 127.0.0.1:46379 (Ray dials 192.0.2.2:46379): "
    )
    assert "nothing accepts connections on 192.0.2.2:46379 ([Errno 111] Connection refused" in msg
    assert "ray start --head --port 46379" in msg
    assert "\n" not in msg


def test_the_dialled_address_is_shown_only_when_it_differs():
    assert "Ray dials" not in _error("refused", target="127.0.0.1:46379")
    assert "Ray dials" not in _error("refused", target=None)


def test_a_refused_token_says_how_to_send_one_or_turn_auth_off():
    unset = _error(text=REFUSED_TOKEN)
    assert "this process sends no token (RAY_AUTH_MODE is unset here" in unset
    assert "RAY_AUTH_MODE=token" in unset and "RAY_AUTH_TOKEN or ~/.ray/auth_token" in unset
    assert "RAY_AUTH_MODE=disabled" in unset
    wrong = _error(text=REFUSED_TOKEN, auth_mode="token")
    assert "refused this process's token" in wrong and "head's ~/.ray/auth_token" in wrong
    missing = _error(text=NO_TOKEN_HERE, auth_mode="token")
    assert "RAY_AUTH_MODE=token is set here but no token was found" in missing
    assert all("\n" not in m for m in (unset, wrong, missing))


def test_no_gcs_answer_and_other_errors():
    assert "accepts connections but no Ray GCS answered within 10 s" in _error(text=TIMED_OUT)
    other = _error(text="ConnectionError: boom\nValueError: Invalid address format: x:y:z")
    assert other.endswith(": ValueError: Invalid address format: x:y:z")


def test_cause_line_takes_the_deepest_exception_line_bounded():
    assert cause_line(TIMED_OUT) == (
        "ray.exceptions.RpcError: Timed out while waiting for GCS to become available."
    )
    assert cause_line("no exception here\nsecond") == "no exception here"
    assert cause_line("") == "no error text"
    assert len(cause_line("RuntimeError: " + "x" * 1000)) == 300


def test_tcp_probe_answers_none_when_listening_and_why_not_otherwise():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert tcp_probe(*server.getsockname()) is None
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, not listening: the connect is refused
        assert "refused" in tcp_probe(*closed.getsockname()).lower()


@pytest.mark.parametrize("command", ["topo", "doctor"])
def test_topo_and_doctor_exit_2_with_one_line_when_the_cluster_cannot_be_joined(
    monkeypatch, capsys, command
):
    from orchestrator.cli import main
    from orchestrator.commands import doctor, topo

    def unreachable(address):
        raise ClusterUnreachable(f"cannot join the Ray cluster at {address}: refused")

    # the real session imports ray, which unit tests never do: a stand-in module
    fake_session = types.ModuleType("orchestrator.raycluster.session")
    fake_session.connect = unreachable
    stand_in(monkeypatch, fake_session)
    for module in (topo, doctor):
        monkeypatch.setattr(module, "discover_nodes", lambda: pytest.fail("not connected"))
    code = main([command, "--address", "10.0.0.5:6379"])
    assert code == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err == "linksweep: cannot join the Ray cluster at 10.0.0.5:6379: refused\n"
