"""The emulated cluster that the emulated tests share, up once per test session (root only).

Bringing an emulated cluster up and down costs 12-20 s on 2 quiet cores (several Ray processes
per node start at once), more under load, so the tests that only *use* a cluster share one:
``emulated_cluster`` (4 nodes, prefix ``lsx``, the links ``fast``, ``s500=500mbit``,
``s200=200mbit``, ``r1g=1gbit`` and ``r2g=2gbit``, no dashboard). Its users: the compare
acceptance, the link model's and the strategies sweep's 2-variant copy (on nodes 0 and 1, the
others excluded: a sweep starts a fork launcher on every node it places a rank on, 5-10 s
each), and both fleet checks (every node, over ctl; the slow node is planted on the running
cluster with ``plant_faults``, the same tc as ``up --slow-node`` would create, and cleared
afterwards whatever happens). The tests whose subject is ``up``, ``down`` or ``status``
(tests/integration/test_emulated.py, test_emulated_faults.py, test_long_sweeps.py) keep their
own clusters; both benches still bring up their own when run without ``--address``.

Every emulated cluster holds 198.18.0.0/24 in the root namespace, so two can never be up at
once: the tests using ``emulated_cluster`` are run one after another (moved, in their order,
to where the first of them was collected) and the shared cluster goes down right after the
last of them, before any test that brings up its own. Ray runs in subprocesses, as in every
emulated test: this process keeps the session's one Ray connection (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = "emulated_cluster"
"""The fixture's name, as the collection hook finds its users."""
SHARED_NODES = 4
SHARED_LINKS = ("fast", "s500=500mbit", "s200=200mbit", "r1g=1gbit", "r2g=2gbit")
SHARED_PREFIX = "lsx"  # not "ls" (a user's cluster) nor another test's or bench's prefix


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_DISABLE_USAGE_STATS="1")
    env.pop("RAY_ADDRESS", None)
    return env


def _py(code: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=_env(), capture_output=True, text=True,
        timeout=timeout_s,
    )  # fmt: skip


class SharedCluster:
    """The session's emulated cluster: up on first use, down after its last user."""

    def __init__(self, state_dir: Path):
        self.state_dir = state_dir
        self._address: str | None = None
        self.up_s: float | None = None

    @property
    def address(self) -> str:
        """The Ray address (``198.18.0.254:6390``); brings the cluster up the first time."""
        if self._address is None:
            t0 = time.monotonic()
            code = (
                "from orchestrator.emulated import parse_link_arg, up\n"
                f"links = [parse_link_arg(s) for s in {list(SHARED_LINKS)!r}]\n"
                f"print(up({SHARED_NODES}, links, {str(self.state_dir)!r}, "
                f"prefix={SHARED_PREFIX!r}, include_dashboard=False))"
            )
            proc = _py(code, 300)
            if proc.returncode != 0:
                self.down()  # `up` removes what it made; this only clears a stale record
                pytest.fail(f"emulated up (shared cluster) failed: {proc.stderr[-3000:]}")
            self._address = proc.stdout.strip().splitlines()[-1]
            self.up_s = time.monotonic() - t0
        return self._address

    def node_ips(self) -> list[str]:
        """The emulated nodes' Ray IPs (their ctl addresses), node 0 first."""
        from orchestrator.emulated import recorded_node_ips

        self.address  # noqa: B018 - up, so the state file exists
        return recorded_node_ips(self.state_dir)

    def plant(self, specs: Sequence[str]) -> None:
        """Replace the planted faults by ``--slow-node`` arguments ``specs`` (none: clear)."""
        code = (
            "from orchestrator.emulated import parse_slow_node_arg, plant_faults\n"
            f"plant_faults([parse_slow_node_arg(s) for s in {list(specs)!r}], "
            f"{str(self.state_dir)!r})"
        )
        proc = _py(code, 120)
        assert proc.returncode == 0, proc.stderr[-3000:]

    @contextlib.contextmanager
    def slow_nodes(self, specs: Sequence[str]) -> Iterator[str]:
        """The cluster with ``--slow-node`` faults ``specs`` planted; cleared on the way out,
        also after a failure, so the next user finds every link as ``up`` made it."""
        address = self.address
        self.plant(specs)
        try:
            yield address
        finally:
            self.plant([])

    def down(self) -> None:
        """Take the cluster down (nothing when it is not up)."""
        if not (self.state_dir / "state.json").exists():
            self._address = None
            return
        proc = _py(f"from orchestrator.emulated import down; down({str(self.state_dir)!r})", 180)
        self._address = None
        assert proc.returncode == 0, proc.stderr[-3000:]


_shared = SharedCluster(Path(f"/tmp/{SHARED_PREFIX}-{os.getpid()}"))  # short: Ray's sockets


@pytest.fixture(scope="session")
def emulated_cluster() -> Iterator[SharedCluster]:
    """The shared emulated cluster (skips where none can be brought up: not root, no
    ``ip netns``, or another emulated cluster holds the subnet)."""
    from orchestrator.emulated import cluster_unavailable

    if _shared._address is None and (why := cluster_unavailable()):
        pytest.skip(why)
    _shared.address  # noqa: B018 - up now, so its cost lands in this setup, not in a test
    yield _shared
    _shared.down()


def pytest_collection_modifyitems(config, items):
    """The users of the shared cluster run one after another, where the first was collected."""
    users = [item for item in items if SHARED in getattr(item, "fixturenames", ())]
    if not users:
        return
    first = items.index(users[0])
    rest = [item for item in items if SHARED not in getattr(item, "fixturenames", ())]
    items[:] = rest[:first] + users + rest[first:]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the last user of the shared cluster, take it down (the next test may bring up
    its own: two emulated clusters cannot be up at once)."""
    yield
    uses = SHARED in getattr(item, "fixturenames", ())
    if uses and (nextitem is None or SHARED not in getattr(nextitem, "fixturenames", ())):
        _shared.down()
