"""Two lanes for the test suite: a quiet one for the tests that read a clock, a background one
at a lower CPU priority for the rest (pytest-xdist, 2 workers: pyproject's ``addopts``).

Why: run one test at a time on 2 cores, a third of the suite's wall time was an idle core's worth
(waits on the emulated cluster's shaped links, hang timeouts, Ray starting and stopping). A second
worker fills it; but a test that measures a link's rate, calls a run slower than another, or
waits for a deadline would read a busy neighbour as a slow link, a suspect node or a missed
deadline. So:

- every test whose assertion reads a clock runs in one xdist group, ``quiet``: the tests that
  use an emulated cluster (shaped-link rates, fleet suspects, compare verdicts; and 198.18.0.0/24
  holds one cluster at a time, so they must run one after another anyway), the hung sweep's
  readers (a rank must reach its hang before the run's timeout), and the modules marked
  ``quiet`` (deadlines: a join bound, a group timeout, a launcher's progress);
- its tests come first in the collection, so the first worker takes the group and runs it at
  the normal priority;
- every other test keeps its module's group (module-scoped fixtures are set up once) and the
  worker that runs it lowers its own CPU priority first (``nice`` +:data:`BACKGROUND_NICE`,
  inherited by the Ray processes and ranks it starts), so it takes what the quiet lane leaves
  idle and yields the CPU when both want it;
- a priority is not isolation: a test marked ``alone`` (quiet too) compares timings across
  sweeps, links or nodes, where a neighbour's burst reads as a regression or a suspect (seen:
  compare's unshaped link 2.2x slower between its two sweeps while the background lane ran), so
  the background lane pauses while it runs: each background test holds a shared lock for its
  whole run (setup to teardown), an ``alone`` test the exclusive one, taken through a turnstile
  so a stream of background tests cannot starve it. It waits for the background test in hand to
  end (once for a run of consecutive alone tests, which keep the lock between them); nothing in
  the quiet lane waits on the background otherwise.

Without xdist (``-n 0``, ``-p no:xdist``) the groups are inert marks and nothing is niced.

pytest is held below 9.2 (pyproject): with pytest 9.2, xdist 3.8's ``loadgroup`` silently stops
grouping (it tags a test's group onto ``item._nodeid``, which pytest 9.2's structured node ids no
longer read: pytest-dev/pytest-xdist#1386, open); every test would then be scheduled alone and
two emulated clusters would come up at once. ``tests/unit/test_lanes.py`` runs xdist on a small
suite to catch that.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator

QUIET = "quiet"
"""The group (and marker) of the tests that read a clock."""
ALONE = "alone"
"""The marker of a quiet test that the background lane pauses for (module docstring)."""
LOCK_DIR_ENV = "LINKSWEEP_LANES_DIR"
"""The folder holding the lanes' lock files: made by the controller before it starts the
workers (they inherit it), removed when the run ends."""
QUIET_FIXTURES = frozenset({"emulated_cluster", "hung_sweep"})
"""Fixtures whose users are quiet: the shared emulated cluster, the hung sweep (run timeout)."""
BACKGROUND_NICE = 10
"""The background lane's niceness: CFS then gives a nice-0 process about 9 times its CPU share
when both want a core (weights 1024 and 110), so the quiet lane gets most of the CPU (not all
of it: hence ``alone``), and the background lane's Ray processes still answer health checks
(nice 19 would leave them ~1.5%)."""


def lane_of(module: str, fixtures: Iterable[str], markers: Iterable[str]) -> str:
    """The xdist group of a test: ``quiet`` when it reads a clock (a quiet fixture or marker),
    else its module (``integration/test_x`` for ``tests/integration/test_x.py``), so the module's
    fixtures are set up in one worker only. Pure."""
    if {QUIET, ALONE} & set(markers) or QUIET_FIXTURES & set(fixtures):
        return QUIET
    return module.removeprefix("tests/").removesuffix(".py")


def quiet_first(lanes: list[str]) -> list[int]:
    """The order (indices into ``lanes``) that puts the quiet tests first, each side keeping its
    order: xdist hands out groups in the order of their first test, so the first worker takes
    the quiet group before any module. Pure."""
    quiet = [i for i, lane in enumerate(lanes) if lane == QUIET]
    rest = [i for i, lane in enumerate(lanes) if lane != QUIET]
    return quiet + rest


def xdist_worker() -> str | None:
    """This process's xdist worker id (``gw0``), or None when the suite runs in one process."""
    return os.environ.get("PYTEST_XDIST_WORKER")


_niced = False


def enter_lane(lane: str) -> None:
    """Before a test in an xdist worker: a background test lowers the worker's CPU priority,
    once (niceness only rises without privileges, and every later test of the worker is
    background too: the quiet group was its first and only quiet work)."""
    global _niced
    if lane == QUIET or _niced or xdist_worker() is None:
        return
    os.nice(BACKGROUND_NICE)
    _niced = True


_made: str | None = None


def make_lock_dir() -> None:
    """In the controller of an xdist run (not in a worker, not where a folder is already
    named, e.g. a pytest run inside a test): the lock folder."""
    global _made
    if xdist_worker() is None and LOCK_DIR_ENV not in os.environ:
        _made = os.environ[LOCK_DIR_ENV] = tempfile.mkdtemp(prefix="linksweep-lanes-")


def remove_lock_dir() -> None:
    """When the run ends, the folder this process made goes (never one it inherited)."""
    global _made
    if _made is not None:
        if os.environ.get(LOCK_DIR_ENV) == _made:
            del os.environ[LOCK_DIR_ENV]
        shutil.rmtree(_made, ignore_errors=True)
        _made = None


_alone_fd: int | None = None
"""The exclusive lock's file while this worker holds it across consecutive ``alone`` tests."""
_held: set[int] = set()
"""The lock files this process holds open (a test's, or one kept between alone tests)."""


def _forget_locks_in_child() -> None:
    """In a process forked while a lock was held (a test's ``multiprocessing`` fork ranks): its
    copies of the lock files close, so the lock ends with the test, not with a child that
    outlives it (a flock belongs to the open file, which a fork shares: an orphan would hold
    the background lane's lock forever, and the next ``alone`` test, with the turnstile, every
    test after it, would wait on it)."""
    global _alone_fd
    for fd in _held:
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()
    _alone_fd = None


os.register_at_fork(after_in_child=_forget_locks_in_child)


@contextlib.contextmanager
def running(lane: str, alone: bool, next_alone: bool = False) -> Iterator[None]:
    """Around one test's whole run in an xdist worker: a background test holds the shared lock,
    an ``alone`` test the exclusive one (module docstring); a quiet test that is not alone, or
    any test outside xdist, holds nothing. An alone test followed by another (``next_alone``)
    keeps the exclusive lock for it, so a module of alone tests waits for the background lane
    once, not before each test."""
    global _alone_fd
    folder = os.environ.get(LOCK_DIR_ENV)
    if xdist_worker() is None or folder is None or (lane == QUIET and not alone):
        yield
        return
    if alone and _alone_fd is not None:
        fd = _alone_fd  # kept from the alone test before
    else:
        fd = _lock(folder, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        _held.add(fd)
    _alone_fd = None
    try:
        yield
    finally:
        if alone and next_alone:
            _alone_fd = fd
        else:
            _held.discard(fd)
            os.close(fd)  # closing releases the lock


def _lock(folder: str, how: int) -> int:
    """The lanes' lock taken ``how``, through the turnstile (module docstring): its file."""
    turnstile = os.open(os.path.join(folder, "turnstile"), os.O_RDWR | os.O_CREAT)
    fd = os.open(os.path.join(folder, "lanes"), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(fd, how)
    except BaseException:
        os.close(fd)
        raise
    finally:
        os.close(turnstile)  # closing releases the turnstile
    return fd
