"""A sweep's and a fleet check's progress as metric values, pure: every metric declared once
(:data:`METRICS`: name, unit, meaning, labels), and the state machines that turn the progress
callbacks (``orchestrator.ui.SweepUI``'s; the fleet loop's) into samples to publish.

Names follow Prometheus's conventions: the unit last in the name (``_seconds``, ``_ratio``;
counts have none), ``_info`` for a series whose labels carry the value (set to 1, the others of
its metric to 0), ``_timestamp_seconds`` for a Unix time. Every metric is a gauge: a resumed
sweep or a new driver must be able to say where its sweep stands, not count from zero, and a
gauge set to 0 is scraped from the first report where a counter never incremented is absent.
Ray prefixes each name with ``ray_`` when it exports it (:func:`exported_name`).

The time left (``*_time_left_seconds``) is ``mean x left - min(elapsed, mean)``: ``mean`` the
mean wall time of the units this driver finished (a run from ``run_started`` to
``run_finished``; a fleet round), ``left`` the units not finished (the current one among them),
``elapsed`` how long the current one has run. Unknown (not published) until one unit finished.
Repeats are interleaved (every variant once per repeat), so after the first repeat the runs
finished mix the variants as the runs left do.

The slowdown is the project's, computed by ``analysis.stats.variant_and_sensitivity_rows``
from the runs this driver saw finish: a variant's median step time over the median of the same
variant on the sweep's baseline link (``SweepSpec.baseline``), link measurements only; it
appears once both links have a run that counts.

May import: orchestrator.analysis.stats.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.analysis import stats

RAY_PREFIX = "ray_"
"""What Ray puts before every application metric's name when it exports it (Ray 2.60)."""


@dataclass(frozen=True)
class Metric:
    """One metric as published: its name before Ray's prefix, what it means, its labels."""

    name: str
    help: str
    labels: tuple[str, ...]
    unit: str = ""
    """The unit its name ends with (``seconds``, ``ratio``); empty for a count or an info."""


def _m(name: str, help: str, *labels: str, unit: str = "") -> Metric:
    return Metric(name, help, labels, unit)


SWEEP = ("sweep_id",)
FLEET = ("fleet_id",)
METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        _m("linksweep_sweep_running", "1 while the sweep runs, 0 once it ended", *SWEEP),
        _m(
            "linksweep_sweep_runs_done",
            "runs of this driver finished (ok or failed; stored or spooled)",
            *SWEEP,
        ),
        _m("linksweep_sweep_runs_failed", "runs of this driver finished failed", *SWEEP),
        _m(
            "linksweep_sweep_runs_left",
            "runs planned and not finished (the current one too)",
            *SWEEP,
        ),
        _m(
            "linksweep_sweep_current_run_info",
            "1 for the run now running (its order, repeat and variant), 0 for those before",
            *SWEEP,
            "seq",
            "repeat",
            "variant",
            "strategy",
            "link",
        ),
        _m(
            "linksweep_sweep_step_time_seconds",
            "the variant's last finished ok run: its median step time (max over ranks)",
            *SWEEP,
            "variant",
            "strategy",
            "link",
            unit="seconds",
        ),
        _m(
            "linksweep_sweep_slowdown_ratio",
            "the variant's median step time over the same variant's on the baseline link",
            *SWEEP,
            "variant",
            "strategy",
            "link",
            "baseline_link",
            unit="ratio",
        ),
        _m(
            "linksweep_sweep_time_left_seconds",
            "estimated time until the last run ends: mean run wall time x runs left - elapsed",
            *SWEEP,
            unit="seconds",
        ),
        _m(
            "linksweep_sweep_heartbeat_timestamp_seconds",
            "Unix time of the driver's last sign of life (every few seconds while it runs)",
            *SWEEP,
            unit="seconds",
        ),
        _m("linksweep_fleet_running", "1 while the fleet check runs, 0 once it ended", *FLEET),
        _m("linksweep_fleet_rounds_done", "measurement rounds finished (rechecks too)", *FLEET),
        _m("linksweep_fleet_rounds_left", "measurement rounds planned and not finished", *FLEET),
        _m(
            "linksweep_fleet_time_left_seconds",
            "estimated time until the last round ends: mean round wall time x rounds left - "
            "elapsed",
            *FLEET,
            unit="seconds",
        ),
        _m(
            "linksweep_fleet_heartbeat_timestamp_seconds",
            "Unix time of the fleet driver's last sign of life",
            *FLEET,
            unit="seconds",
        ),
    )
}
"""Every metric linksweep publishes, by name (before Ray's ``ray_`` prefix)."""


def exported_name(name: str) -> str:
    """The name Prometheus sees: Ray's prefix before ours (gauges get no suffix)."""
    return RAY_PREFIX + METRICS[name].name


@dataclass(frozen=True)
class Sample:
    """One value to set: a metric of :data:`METRICS`, its value, every one of its labels."""

    name: str
    value: float
    labels: tuple[tuple[str, str], ...]

    @property
    def tags(self) -> dict[str, str]:
        return dict(self.labels)


def sample(name: str, value: float, **labels: Any) -> Sample:
    """A sample of ``name``; every label the metric declares must be given, and no other."""
    metric = METRICS[name]
    if set(labels) != set(metric.labels):
        raise ValueError(f"{name}: labels {sorted(labels)}, declared {sorted(metric.labels)}")
    return Sample(name, float(value), tuple((k, str(labels[k])) for k in metric.labels))


def time_left_s(mean_s: float | None, left: int, elapsed_s: float | None) -> float | None:
    """``mean x left - min(elapsed, mean)`` (module doc), never below 0; None while ``mean`` is
    unknown. ``left`` counts the unit running now; ``elapsed_s`` is its age (None: none runs)."""
    if mean_s is None:
        return None
    running = min(elapsed_s, mean_s) if elapsed_s is not None and left > 0 else 0.0
    return max(0.0, mean_s * left - running)


class _Clocked:
    """Units (runs, rounds) finished and their wall times: the time-left estimate's inputs."""

    def __init__(self) -> None:
        self.walls_s: list[float] = []
        self.current_since: float | None = None

    def mean_s(self) -> float | None:
        return sum(self.walls_s) / len(self.walls_s) if self.walls_s else None

    def elapsed_s(self, now: float) -> float | None:
        return None if self.current_since is None else max(0.0, now - self.current_since)


RUN_COLUMNS = (
    *stats.VARIANT_KEY,
    "status",
    "throttled",
    "median_step_time_s",
    *stats.MEDIAN_COLUMNS,
    "peak_mem_bytes",
    "link_class",
    "ranks_per_gpu",
)
"""What ``stats.variant_and_sensitivity_rows`` reads of a run (``Q.VARIANT_GROUP_RUNS``)."""


def as_stats_run(run: Mapping) -> dict:
    """A ``runs`` row as ``Q.VARIANT_GROUP_RUNS`` selects it (throttled false, ranks_per_gpu 1
    when absent), so the slowdown is the stored one's computation on the same columns."""
    out = {c: run.get(c) for c in RUN_COLUMNS}
    out["throttled"] = bool(out["throttled"])
    out["ranks_per_gpu"] = out["ranks_per_gpu"] or 1
    return out


class SweepProgress:
    """A sweep's metric values from ``SweepUI``'s callbacks. Each method takes the moment
    (``now``: a monotonic clock, seconds) where it needs one and returns the samples to set."""

    def __init__(self, sweep_id: str, n_runs: int, baseline_link: str, seed: int = 0) -> None:
        self.sweep_id = sweep_id
        self.n_runs = n_runs
        self.baseline_link = baseline_link
        self.seed = seed
        self.done = 0
        self.failed = 0
        self.clock = _Clocked()
        self.current: Sample | None = None
        self.groups: dict[tuple, list[dict]] = {}
        self.variant_of: dict[tuple, tuple[str, str, str]] = {}
        """A variant key -> its (label, strategy, link), for the slowdown's labels."""

    def _s(self, name: str, value: float, **labels: Any) -> Sample:
        return sample(name, value, sweep_id=self.sweep_id, **labels)

    def started(self) -> list[Sample]:
        return [self._s("linksweep_sweep_running", 1), *self.counts()]

    def counts(self) -> list[Sample]:
        return [
            self._s("linksweep_sweep_runs_done", self.done),
            self._s("linksweep_sweep_runs_failed", self.failed),
            self._s("linksweep_sweep_runs_left", self.n_runs - self.done),
        ]

    def run_started(self, seq: int, repeat: int, variant, now: float) -> list[Sample]:
        """``variant``: the planner's ``Variant`` (its ``label``, ``strategy``, ``link``)."""
        out = [] if self.current is None else [_zero(self.current)]
        self.current = self._s(
            "linksweep_sweep_current_run_info",
            1,
            seq=seq,
            repeat=repeat,
            variant=variant.label,
            strategy=variant.strategy,
            link=variant.link,
        )
        self.clock.current_since = now
        return [*out, self.current, *self.time_left(now)]

    def run_finished(self, variant, run: Mapping, now: float) -> list[Sample]:
        """``run``: the run's ``runs`` row (status, median_step_time_s, the variant key...)."""
        if self.clock.current_since is not None:
            self.clock.walls_s.append(max(0.0, now - self.clock.current_since))
        self.clock.current_since = None
        self.done += 1
        self.failed += run.get("status") != "ok"
        out = self.counts()
        labels = {"variant": variant.label, "strategy": variant.strategy, "link": variant.link}
        step_s = run.get("median_step_time_s")
        if run.get("status") == "ok" and step_s is not None:
            out.append(self._s("linksweep_sweep_step_time_seconds", step_s, **labels))
        key = tuple(run.get(k) for k in stats.VARIANT_KEY)
        self.variant_of[key] = (variant.label, variant.strategy, variant.link)
        group = tuple(run.get(k) for k in stats.GROUP_KEY)
        self.groups.setdefault(group, []).append(as_stats_run(run))
        return [*out, *self.slowdowns(group), *self.time_left(now)]

    def slowdowns(self, group: tuple) -> list[Sample]:
        """Every slowdown of the variant group ``group`` from its runs seen so far."""
        _, sens = stats.variant_and_sensitivity_rows(
            self.sweep_id, self.groups[group], self.baseline_link, self.seed
        )
        out = []
        for row in sens:
            key = tuple(row[k] for k in stats.VARIANT_KEY)
            label, strategy, link = self.variant_of[key]
            out.append(
                self._s(
                    "linksweep_sweep_slowdown_ratio",
                    row["slowdown"],
                    variant=label,
                    strategy=strategy,
                    link=link,
                    baseline_link=self.baseline_link,
                )
            )
        return out

    def time_left(self, now: float) -> list[Sample]:
        left = time_left_s(self.clock.mean_s(), self.n_runs - self.done, self.clock.elapsed_s(now))
        return [] if left is None else [self._s("linksweep_sweep_time_left_seconds", left)]

    def heartbeat(self, unix_s: float, now: float) -> list[Sample]:
        """The driver lives (``unix_s``: the wall clock); the time left counts down with it."""
        beat = self._s("linksweep_sweep_heartbeat_timestamp_seconds", unix_s)
        return [beat, *self.time_left(now)]

    def finished(self) -> list[Sample]:
        out = [self._s("linksweep_sweep_running", 0), *self.counts()]
        if self.current is not None:
            out.append(_zero(self.current))
        if self.clock.mean_s() is not None:
            out.append(self._s("linksweep_sweep_time_left_seconds", 0))
        return out


class FleetProgress:
    """A fleet check's metric values from the fleet loop's callbacks (``fleet_started``,
    ``fleet_round_finished``, ``fleet_finished``)."""

    def __init__(self, fleet_id: str, n_rounds: int, now: float) -> None:
        self.fleet_id = fleet_id
        self.n_rounds = n_rounds
        self.done = 0
        self.clock = _Clocked()
        self.clock.current_since = now

    def _s(self, name: str, value: float) -> Sample:
        return sample(name, value, fleet_id=self.fleet_id)

    def started(self) -> list[Sample]:
        return [self._s("linksweep_fleet_running", 1), *self.counts()]

    def counts(self) -> list[Sample]:
        return [
            self._s("linksweep_fleet_rounds_done", self.done),
            self._s("linksweep_fleet_rounds_left", max(0, self.n_rounds - self.done)),
        ]

    def round_finished(self, wall_s: float, now: float, planned: bool = True) -> list[Sample]:
        """A round ended (``wall_s``: its own measured wall time); the next starts now. A round
        not ``planned`` (a recheck of slow pairs) makes the check one round longer."""
        self.clock.walls_s.append(max(0.0, wall_s))
        self.clock.current_since = now
        self.done += 1
        self.n_rounds += 0 if planned else 1
        return [*self.counts(), *self.time_left(now)]

    def time_left(self, now: float) -> list[Sample]:
        left = time_left_s(
            self.clock.mean_s(), self.n_rounds - self.done, self.clock.elapsed_s(now)
        )
        return [] if left is None else [self._s("linksweep_fleet_time_left_seconds", left)]

    def heartbeat(self, unix_s: float, now: float) -> list[Sample]:
        beat = self._s("linksweep_fleet_heartbeat_timestamp_seconds", unix_s)
        return [beat, *self.time_left(now)]

    def finished(self) -> list[Sample]:
        out = [self._s("linksweep_fleet_running", 0), *self.counts()]
        if self.clock.mean_s() is not None:
            out.append(self._s("linksweep_fleet_time_left_seconds", 0))
        return out


def _zero(info: Sample) -> Sample:
    """An ``_info`` series that no longer holds: the same labels, value 0."""
    return Sample(info.name, 0.0, info.labels)
