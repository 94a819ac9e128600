"""The suite's two lanes (tests/lanes.py): which tests are quiet, their order, the background
lane's priority (a real child process, as an xdist worker is)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import lanes
from tests.lanes import ALONE, BACKGROUND_NICE, QUIET, lane_of, quiet_first

REPO = Path(__file__).resolve().parents[2]
MODULE = "tests/integration/test_x.py"


def test_a_quiet_marker_or_fixture_puts_a_test_in_the_quiet_lane():
    assert lane_of(MODULE, ["tmp_path"], ["quiet", "slow"]) == QUIET
    assert lane_of(MODULE, ["tmp_path"], [ALONE]) == QUIET
    assert lane_of(MODULE, ["emulated_cluster", "tmp_path"], []) == QUIET
    assert lane_of(MODULE, ["hung_sweep"], ["slow"]) == QUIET


def test_every_other_test_keeps_its_module_so_module_fixtures_are_set_up_once():
    assert lane_of(MODULE, ["tmp_path", "write_sweep"], ["slow", "root"]) == "integration/test_x"
    assert lane_of("tests/unit/test_y.py", [], []) == "unit/test_y"


def test_the_quiet_tests_come_first_each_side_in_its_order():
    lanes = ["a", QUIET, "b", "a", QUIET]
    assert quiet_first(lanes) == [1, 4, 0, 2, 3]
    assert quiet_first([]) == []


_PRIORITIES = """
import json, os
from tests.lanes import enter_lane
seen = [os.nice(0)]
enter_lane("quiet")
seen.append(os.nice(0))
enter_lane("tests/unit/test_y.py")
seen.append(os.nice(0))
enter_lane("tests/unit/test_z.py")
seen.append(os.nice(0))
print(json.dumps(seen))
"""


def _priorities(worker: str | None) -> list[int]:
    env = dict(os.environ)
    env.pop("PYTEST_XDIST_WORKER", None)
    if worker is not None:
        env["PYTEST_XDIST_WORKER"] = worker
    proc = subprocess.run(
        [sys.executable, "-c", _PRIORITIES],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(proc.stdout)


def test_a_worker_lowers_its_priority_once_at_its_first_background_test():
    base = os.nice(0)  # this test may itself run in a background worker: niceness stops at 19
    low = min(19, base + BACKGROUND_NICE)
    assert _priorities("gw1") == [base, base, low, low]


def test_one_process_without_xdist_keeps_its_priority():
    base = os.nice(0)
    assert _priorities(None) == [base] * 4


_CONFTEST = """
import pytest
from tests.conftest import assign_lanes

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    assign_lanes(items)
"""
_MODULE = """
import pytest

@pytest.mark.quiet
def test_q1(): pass

def test_b1(): pass

def test_b2(): pass

@pytest.mark.quiet
def test_q2(): pass

def test_b3(): pass
"""


def test_xdist_runs_each_group_on_one_worker_the_quiet_one_first(tmp_path):
    """The real hook under xdist, as pyproject runs it: every quiet test on one worker, first
    there; each module's other tests on one worker. Fails where xdist ignores the groups (with
    pytest 9.2: tests/lanes.py)."""
    (tmp_path / "conftest.py").write_text(_CONFTEST)
    for name in ("test_m1.py", "test_m2.py"):
        (tmp_path / name).write_text(_MODULE)
    args = [
        "-n",
        "2",
        "--dist",
        "loadgroup",
        "--no-loadscope-reorder",
        "-v",
        "-p",
        "no:cacheprovider",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *args, "-o", "markers=quiet: q", str(tmp_path)],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran: dict[str, list[str]] = {}  # worker -> node ids, in the order they ran
    for line in proc.stdout.splitlines():
        if line.startswith("[gw") and "PASSED" in line:
            worker, nodeid = line.split()[0], line.split()[-1]
            ran.setdefault(worker, []).append(nodeid)
    workers_of = {}
    for worker, nodeids in ran.items():
        for nodeid in nodeids:
            workers_of.setdefault(nodeid.rpartition("@")[2], set()).add(worker)
    assert sorted(workers_of) == sorted([QUIET, "test_m1", "test_m2"]), ran
    assert all(len(w) == 1 for w in workers_of.values()), workers_of
    (quiet_worker,) = workers_of[QUIET]
    assert [n.rpartition("@")[2] for n in ran[quiet_worker][:4]] == [QUIET] * 4, ran


@pytest.fixture
def in_a_worker(tmp_path, monkeypatch):
    """This process as an xdist worker whose controller made the lock folder ``tmp_path``."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv(lanes.LOCK_DIR_ENV, str(tmp_path))
    return tmp_path


def _can_lock(folder: Path, how: int) -> bool:
    """Whether another worker could take the lanes' lock ``how`` now (a fresh open file: flock
    locks belong to it, so it contends as another process would), without waiting."""
    fd = os.open(folder / "lanes", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_an_alone_test_waits_for_no_background_test_and_none_starts_beside_it(in_a_worker):
    with lanes.running("integration/test_x", alone=False):
        assert not _can_lock(in_a_worker, fcntl.LOCK_EX)  # an alone test would wait
        assert _can_lock(in_a_worker, fcntl.LOCK_SH)  # another background test would not
    assert _can_lock(in_a_worker, fcntl.LOCK_EX)  # ended: the alone test starts
    with lanes.running(QUIET, alone=True):
        assert not _can_lock(in_a_worker, fcntl.LOCK_SH)  # the background lane waits
    assert _can_lock(in_a_worker, fcntl.LOCK_SH)


def test_consecutive_alone_tests_keep_the_lock_between_them(in_a_worker):
    with lanes.running(QUIET, alone=True, next_alone=True):
        pass
    assert not _can_lock(in_a_worker, fcntl.LOCK_SH)  # kept for the next alone test
    with lanes.running(QUIET, alone=True, next_alone=False):
        assert not _can_lock(in_a_worker, fcntl.LOCK_SH)
    assert _can_lock(in_a_worker, fcntl.LOCK_SH)  # the last one lets the background go


def test_a_child_forked_in_a_test_and_outliving_it_holds_no_lock(in_a_worker):
    """A process a background test forks (multiprocessing's fork ranks) shares the lock's open
    file; if it outlived the test it would hold the lock, and every alone test after it would
    wait forever. Its copy closes at the fork."""
    read, write = os.pipe()
    up_read, up_write = os.pipe()
    with lanes.running("integration/test_x", alone=False):
        pid = os.fork()
        if pid == 0:  # the child (past fork's hooks): says so, lives until the pipe closes
            try:
                os.close(write)
                os.write(up_write, b"1")
                os.read(read, 1)
            finally:
                os._exit(0)
        os.close(read)
        os.close(up_write)
        assert os.read(up_read, 1) == b"1"
        os.close(up_read)
    try:
        assert _can_lock(in_a_worker, fcntl.LOCK_EX)  # the child lives on, holding nothing
    finally:
        os.close(write)
        os.waitpid(pid, 0)


def test_a_tests_timeout_does_not_count_its_wait_for_the_lanes(pytestconfig):
    """pyproject's ``timeout`` (pytest-timeout) bounds a test, not its wait for the lanes (a
    background test can wait minutes for a run of alone tests): its wrapper runs inside
    conftest's. pluggy calls wrappers from the end of this list: later is outer."""
    pytest.importorskip("pytest_timeout")
    names = [i.plugin_name for i in pytestconfig.pluginmanager.hook.pytest_runtest_protocol.get_hookimpls()]  # fmt: skip
    lanes_wrapper = names.index(str(REPO / "tests" / "conftest.py"))
    assert lanes_wrapper > names.index("timeout"), names


def test_a_quiet_test_that_is_not_alone_holds_no_lock(in_a_worker):
    with lanes.running(QUIET, alone=False):
        assert _can_lock(in_a_worker, fcntl.LOCK_EX)


def test_outside_xdist_nothing_is_locked(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.setenv(lanes.LOCK_DIR_ENV, str(tmp_path))
    with lanes.running("integration/test_x", alone=False):
        assert list(tmp_path.iterdir()) == []


def test_the_controller_makes_the_lock_folder_once_and_removes_it(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv(lanes.LOCK_DIR_ENV, raising=False)
    lanes.make_lock_dir()
    folder = os.environ[lanes.LOCK_DIR_ENV]
    lanes.make_lock_dir()
    assert os.environ[lanes.LOCK_DIR_ENV] == folder and os.path.isdir(folder)
    lanes.remove_lock_dir()
    assert lanes.LOCK_DIR_ENV not in os.environ and not os.path.exists(folder)


def test_a_folder_it_did_not_make_is_never_removed(tmp_path, monkeypatch):
    """A pytest run inside a test inherits the outer run's folder: it must leave it."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.setenv(lanes.LOCK_DIR_ENV, str(tmp_path))
    lanes.make_lock_dir()
    lanes.remove_lock_dir()
    assert os.environ[lanes.LOCK_DIR_ENV] == str(tmp_path) and tmp_path.is_dir()
