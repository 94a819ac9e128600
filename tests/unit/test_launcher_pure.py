"""The launcher's pure helpers (the fork path itself is tests/integration/test_launcher.py)."""

from __future__ import annotations

import signal
from types import SimpleNamespace

from workloads.launcher import _death, _no_main


def test_children_get_sys_path_but_never_the_parents_main():
    def prep(name):
        return {"sys_path": ["/x"], "init_main_from_path": "/ray/default_worker.py", "name": name}

    wrapped = _no_main(prep)
    assert wrapped("p") == {"sys_path": ["/x"], "name": "p"}
    assert _no_main(wrapped) is wrapped  # installed once, however many launchers


def test_death_says_the_signal_or_the_exit_code():
    killed = SimpleNamespace(pid=7, exitcode=-signal.SIGKILL)
    assert "rank process 7 was killed by signal SIGKILL" in _death(killed)
    assert "exited with code 3" in _death(SimpleNamespace(pid=7, exitcode=3))
    assert "stopped answering" in _death(SimpleNamespace(pid=7, exitcode=None))
