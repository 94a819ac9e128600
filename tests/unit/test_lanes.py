"""The suite's two lanes (tests/lanes.py): which tests are quiet, their order, the background
lane's priority (a real child process, as an xdist worker is)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.lanes import BACKGROUND_NICE, QUIET, lane_of, quiet_first

REPO = Path(__file__).resolve().parents[2]
MODULE = "tests/integration/test_x.py"


def test_a_quiet_marker_or_fixture_puts_a_test_in_the_quiet_lane():
    assert lane_of(MODULE, ["tmp_path"], ["quiet", "slow"]) == QUIET
    assert lane_of(MODULE, ["emulated_cluster", "tmp_path"], []) == QUIET
    assert lane_of(MODULE, ["hung_sweep"], ["slow"]) == QUIET


def test_every_other_test_keeps_its_module_so_module_fixtures_are_set_up_once():
    assert lane_of(MODULE, ["tmp_path", "write_sweep"], ["slow", "root"]) == MODULE
    assert lane_of("tests/unit/test_y.py", [], []) == "tests/unit/test_y.py"


def test_the_quiet_tests_come_first_each_side_in_its_order():
    lanes = ["a.py", QUIET, "b.py", "a.py", QUIET]
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
