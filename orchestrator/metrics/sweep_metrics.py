"""``--metrics`` on ``run`` and ``fleet``: the option, its check before anything runs, and the
observer that publishes the progress as Ray metrics (``ray.util.metrics`` gauges, reached
through ``raycluster.session``) for Prometheus. The values come from ``progress`` (pure); this
module only sets them, and keeps them fresh: a heartbeat thread every :data:`HEARTBEAT_S`.

Where they appear: Ray's metrics agent on the node the driver runs on exports them, every 10 s,
at that node's metrics export port (``ray start --metrics-export-port=PORT``), named ``ray_`` +
the names of ``progress.METRICS``; the driver prints the address when it starts. The embedded
cluster (no ``--address``, no ``RAY_ADDRESS``) is refused: it ends with the sweep, and no
Prometheus is told the port Ray picks for it. docs/metrics.md has the rest.

May import: progress, orchestrator.raycluster.session.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from orchestrator.metrics import progress as p

HEARTBEAT_S = 5.0
"""How often the heartbeat and the time left are set while a sweep or fleet check runs: twice
per Ray report (10 s), so a scrape never sees a heartbeat more than ~15 s old from a live
driver."""

OPTION = "--metrics"
EMBEDDED_REFUSED = (
    f"{OPTION}: the embedded cluster (no --address, no RAY_ADDRESS) cannot export metrics to "
    "Prometheus: it ends with the command and no Prometheus is told the port Ray picks for it. "
    "Start a cluster that does (ray start --head --metrics-export-port=8080), then pass "
    "--address 127.0.0.1:6379 (docs/metrics.md)"
)


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    what = "sweep" if command == "run" else "fleet check"
    parser.add_argument(
        OPTION,
        action="store_true",
        help=f"publish the {what}'s progress as Ray metrics for Prometheus (ray_linksweep_*), "
        "exported by this node's Ray at its metrics export port (printed at the start); needs "
        "a cluster joined with --address or RAY_ADDRESS (docs/metrics.md); default: off",
    )


def problems(args: argparse.Namespace) -> list[str]:
    """``--metrics`` asked of the embedded cluster: refused, before anything runs."""
    if not getattr(args, "metrics", False):
        return []
    if getattr(args, "address", None) or os.environ.get("RAY_ADDRESS"):
        return []
    return [EMBEDDED_REFUSED]


def observers(args: argparse.Namespace, **context) -> list:
    """The metrics observer when ``--metrics`` (the cluster is joined by now); none, after a
    warning, when this node's Ray exports no metrics."""
    if not getattr(args, "metrics", False):
        return []
    from orchestrator.raycluster import session

    endpoint = session.metrics_endpoint()
    if endpoint is None:
        print(
            f"linksweep: warning: {OPTION}: this node's Ray has no metrics export port (a "
            "ray[minimal] install has no metrics agent): no metrics are published",
            file=sys.stderr,
        )
        return []
    host, port = endpoint
    print(
        f"linksweep: metrics: ray_linksweep_* at http://{host}:{port}/metrics (Ray reports "
        "every 10 s; docs/metrics.md)",
        file=sys.stderr,
    )
    return [RayMetrics(session.gauge)]


_GAUGES: dict[str, object] = {}
"""One Ray gauge per metric name in this process (a process may run several sweeps)."""


class RayMetrics:
    """The observer: each callback's samples (``progress``) set on Ray gauges. A failure to set
    one is said once and never stops the sweep (a display, not a measurement)."""

    def __init__(
        self,
        make_gauge: Callable[[str, str, tuple[str, ...]], object],
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self.make_gauge = make_gauge
        self.clock = clock
        self.wall = wall
        self.heartbeat_s = heartbeat_s
        self.state: p.SweepProgress | p.FleetProgress | None = None
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.beating: threading.Thread | None = None
        self.warned = False

    # --- setting values --------------------------------------------------------------------
    def _gauge(self, name: str):
        if name not in _GAUGES:
            metric = p.METRICS[name]
            _GAUGES[name] = self.make_gauge(metric.name, metric.help, metric.labels)
        return _GAUGES[name]

    def _set(self, samples: Iterable[p.Sample]) -> None:
        try:
            for s in samples:
                self._gauge(s.name).set(s.value, tags=s.tags)
        except Exception as exc:  # noqa: BLE001 - metrics must never fail a sweep
            if not self.warned:
                self.warned = True
                print(f"linksweep: warning: {OPTION}: {type(exc).__name__}: {exc}", file=sys.stderr)

    def _update(self, step: Callable[[], list[p.Sample]]) -> None:
        with self.lock:
            if self.state is not None:
                self._set(step())

    def _beat(self) -> None:
        self._update(lambda: self.state.heartbeat(self.wall(), self.clock()))

    def _start(self, state) -> None:
        with self.lock:
            self.state = state
            self._set(state.started())
        self._beat()
        self.stop.clear()
        self.beating = threading.Thread(target=self._beat_loop, name="metrics-beat", daemon=True)
        self.beating.start()

    def _beat_loop(self) -> None:
        while not self.stop.wait(self.heartbeat_s):
            self._beat()

    def _finish(self) -> None:
        self.stop.set()
        if self.beating is not None:
            self.beating.join(timeout=5)
        self._beat()
        self._update(lambda: self.state.finished())

    # --- a sweep: SweepUI's callbacks ------------------------------------------------------
    def sweep_started(self, spec, sweep_id: str, n_runs: int) -> None:
        self._start(p.SweepProgress(sweep_id, n_runs, spec.baseline, spec.seed))

    def run_started(self, planned, run_id: str) -> None:
        self._update(
            lambda: self.state.run_started(
                planned.seq, planned.repeat, planned.variant, self.clock()
            )
        )

    def tick(self, state: dict) -> None:
        """Rank 0 reported (or was asked): a sign of life."""
        self._beat()

    def run_finished(self, planned, run: Mapping) -> None:
        self._update(lambda: self.state.run_finished(planned.variant, run, self.clock()))

    def sweep_finished(self, sweep_id: str, status: str) -> None:
        self._finish()

    # --- a fleet check: the fleet loop's callbacks (orchestrator/fleet/loop.py) ------------
    def fleet_started(self, fleet_id: str, n_rounds: int) -> None:
        self._start(p.FleetProgress(fleet_id, n_rounds, self.clock()))

    def fleet_round_finished(self, fleet_id: str, row: Mapping) -> None:
        planned = row.get("kind") != "recheck"
        self._update(lambda: self.state.round_finished(row["wall_s"], self.clock(), planned))

    def fleet_finished(self, fleet_id: str, status: str) -> None:
        self._finish()
