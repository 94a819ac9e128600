"""Which of the embedded cluster's processes yield the CPU to the ranks (orchestrator/daemons)."""

from orchestrator.daemons import is_daemon

PY = b"/venv/bin/python\0-u\0/venv/lib/python3.11/site-packages/ray/"


def test_the_clusters_daemons_are_recognised():
    assert is_daemon(b"/venv/lib/python3.11/site-packages/ray/core/src/ray/gcs/gcs_server\0--x")
    assert is_daemon(PY + b"_private/log_monitor.py\0--session-dir=/tmp/ray/s")
    assert is_daemon(b"/venv/bin/python\0/venv/lib/ray/dashboard/dashboard.py\0--host=1")
    assert is_daemon(PY + b"autoscaler/_private/monitor.py\0--logs-dir=/tmp")
    assert is_daemon(b"ray::DashboardAgent\0")
    assert is_daemon(b"ray::RuntimeEnvAgent\0")
    assert is_daemon(PY + b"dashboard/agent.py\0--node-id=abc")


def test_the_raylet_workers_and_ranks_are_not():
    raylet = (
        b"/venv/lib/ray/core/src/ray/raylet/raylet\0--raylet_socket_name=/tmp/s\0"
        b"--store_socket_name=/tmp/p\0--dashboard_agent_command=/venv/bin/python -u "
        b"/venv/lib/ray/dashboard/agent.py\0--runtime_env_agent_command=/venv/bin/python -u "
        b"/venv/lib/ray/_private/runtime_env/agent/main.py"
    )
    assert not is_daemon(raylet)  # its workers inherit its niceness
    assert not is_daemon(b"ray::Launcher.run_rank\0")
    assert not is_daemon(b"ray::IDLE\0")
    assert not is_daemon(b"/venv/bin/python\0-B\0-c\0from multiprocessing.forkserver import main")
    assert not is_daemon(b"/venv/bin/python\0/venv/bin/linksweep\0run\0s.yaml")
    assert not is_daemon(b"")


def test_quiet_env_slows_the_clusters_housekeeping_but_keeps_what_the_user_set():
    from orchestrator.daemons import QUIET_ENV, quiet_env

    assert quiet_env({}) == QUIET_ENV
    assert int(QUIET_ENV["REPORTER_UPDATE_INTERVAL_MS"]) > 5000  # Ray's default is 5 s
    mine = {"REPORTER_UPDATE_INTERVAL_MS": "1000"}
    assert "REPORTER_UPDATE_INTERVAL_MS" not in quiet_env(mine)
