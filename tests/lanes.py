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
  idle and yields the CPU when both want it.

Without xdist (``-n 0``, ``-p no:xdist``) the groups are inert marks and nothing is niced.

pytest is held below 9.2 (pyproject): with pytest 9.2, xdist 3.8's ``loadgroup`` silently stops
grouping (it tags a test's group onto ``item._nodeid``, which pytest 9.2's structured node ids no
longer read: pytest-dev/pytest-xdist#1386, open); every test would then be scheduled alone and
two emulated clusters would come up at once. ``tests/unit/test_lanes.py`` runs xdist on a small
suite to catch that.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

QUIET = "quiet"
"""The group (and marker) of the tests that read a clock."""
QUIET_FIXTURES = frozenset({"emulated_cluster", "hung_sweep"})
"""Fixtures whose users are quiet: the shared emulated cluster, the hung sweep (run timeout)."""
BACKGROUND_NICE = 10
"""The background lane's niceness: CFS then gives a nice-0 process about 9 times its CPU share
when both want a core (weights 1024 and 110), so the quiet lane runs nearly as alone, and the
background lane's Ray processes still answer health checks (nice 19 would leave them ~1.5%)."""


def lane_of(module: str, fixtures: Iterable[str], markers: Iterable[str]) -> str:
    """The xdist group of a test: ``quiet`` when it reads a clock (a quiet fixture or marker),
    else its module (``integration/test_x`` for ``tests/integration/test_x.py``), so the module's
    fixtures are set up in one worker only. Pure."""
    if QUIET in set(markers) or QUIET_FIXTURES & set(fixtures):
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
