"""SCHED_IDLE for the processes around the ranks, and back for a rank (workloads/cpu_policy)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from workloads.cpu_policy import idle_process, normal_self

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux scheduling")


def test_every_thread_of_a_process_goes_idle_and_new_threads_inherit_it():
    code = (
        "import sys, threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "print('up', flush=True); sys.stdin.readline()\n"  # wait for the test to set it idle
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout.readline() == "up\n"
        assert idle_process(proc.pid)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        tasks = f"/proc/{proc.pid}/task"
        deadline = time.monotonic() + 10
        while len(os.listdir(tasks)) < 3:  # main, the first sleeper, the one started after
            assert time.monotonic() < deadline, "the third thread never started"
        assert {os.sched_getscheduler(int(t)) for t in os.listdir(tasks)} == {os.SCHED_IDLE}
    finally:
        proc.kill()
        proc.wait()


def test_a_gone_process_is_refused_quietly():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert idle_process(proc.pid) is False


def test_an_idle_process_goes_back_to_normal():
    code = (
        "import os\n"
        "from workloads.cpu_policy import idle_process, normal_self\n"
        "idle_process(os.getpid())\n"
        "before = os.sched_getscheduler(0)\n"
        "ok = normal_self()\n"
        "print(before == os.SCHED_IDLE, ok, os.sched_getscheduler(0) == os.SCHED_OTHER)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=root, check=True).stdout.split()  # fmt: skip
    assert out[0] == "True"
    # Leaving SCHED_IDLE needs privilege (or RLIMIT_NICE): as root it works, else it says so.
    assert out[1:] == (["True", "True"] if os.geteuid() == 0 else ["False", "False"])


def test_normal_self_in_a_normal_thread_changes_nothing():
    assert os.sched_getscheduler(0) == os.SCHED_OTHER
    assert normal_self() is True
