"""What MLflow should hold for one sweep, and what it lacks: pure, no mlflow, no database.

A sweep is one MLflow run (the parent); each of its linksweep runs is one MLflow run nested
under it (MLflow's ``mlflow.parentRunId`` tag). Each MLflow run is found again by a tag that
holds the linksweep id it stands for (``linksweep.sweep_id`` on the parent, ``linksweep.run_id``
on a child), so logging the same sweep twice (an export after ``run --mlflow``, a second
export, a ``--resume``) updates the runs it made rather than making new ones.

- :func:`wanted` reads one sweep's rows (:class:`SweepRows`, as the database has them) into a
  :class:`Record` per MLflow run: its parameters (a child's: the variant's axes, read off the
  catalog, never a typed list), metrics (the run's figures; its variant's slowdown and link
  model exposure once the sweep has them), tags (ids, status, versions) and status;
- :func:`changes` compares a record with what MLflow holds for it (:class:`Held`) and keeps
  only what is new or changed (:class:`Update`): nothing, for a sweep logged before.

MLflow keeps a parameter once and refuses another value for it; a metric may take a new value
(its history keeps the old), so a slowdown that changes as runs arrive is logged again only
when it changed.

May import: workloads.catalog, orchestrator.report.labels.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.report.labels import variant_label, varying
from workloads import catalog

PREFIX = "linksweep."
KIND = PREFIX + "kind"
"""``sweep`` (the parent) or ``run`` (a child)."""
SWEEP_ID = PREFIX + "sweep_id"
RUN_ID = PREFIX + "run_id"
STATUS = PREFIX + "status"
REPORT_OF = PREFIX + "report_of"
"""On the parent: the sweep's state when its report was logged (:func:`report_state`); the
report is logged again only when the state differs."""
PARENT = "mlflow.parentRunId"
RUN_NAME = "mlflow.runName"
GIT_COMMIT = "mlflow.source.git.commit"

MAX_PARAM_CHARS = 6000
"""MLflow 3's longest parameter value (``MAX_PARAM_VAL_LENGTH``); longer ones are cut."""

RUN_METRICS = (
    "median_step_time_s",
    "p10_step_time_s",
    "p90_step_time_s",
    "tokens_per_s",
    "samples_per_s",
    "mfu",
    "achieved_tflops_per_gpu",
    "comm_bytes_per_step",
    "expected_comm_bytes_per_step",
    "predicted_comm_s_per_step",
    "peak_mem_bytes",
    "startup_s",
    "traced_step_time_s",
)
"""Columns of ``runs`` logged as a child's metrics under the same names (docs/schema.md says
what each means); NULL ones are left out."""

SLOWDOWN = {"slowdown": "slowdown", "slowdown_ci_low": "ci_low", "slowdown_ci_high": "ci_high"}
"""Metric -> column of ``link_sensitivity``: the run's variant on its link against the baseline
link (none on the baseline link itself)."""
EXPOSURE = {
    "exposure": "exposure",
    "exposure_ci_low": "exposure_ci_low",
    "exposure_ci_high": "exposure_ci_high",
    "compute_s": "compute_s",
}
"""Metric -> column of ``link_model``: the run's variant group fitted over two links or more."""

STEP_HISTORY = "step_time_s"
"""A child's step-by-step metric: each timed step's time (view ``step_times``), by step."""

RUN_STATUS = {"ok": "FINISHED", "failed": "FAILED"}
SWEEP_STATUS = {"running": "RUNNING", "ok": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
"""linksweep's status -> MLflow's ``RunStatus`` name (an unknown one: FAILED)."""


@dataclass(frozen=True)
class SweepRows:
    """One sweep as the database has it (dicts keyed by column)."""

    sweep: Mapping[str, Any]
    """Its ``sweeps`` row (``spec`` and ``versions`` as read: JSON text or decoded)."""
    runs: Sequence[Mapping[str, Any]] = ()
    """Its ``runs`` rows."""
    sensitivity: Sequence[Mapping[str, Any]] = ()
    """Its ``link_sensitivity`` rows."""
    link_model: Sequence[Mapping[str, Any]] = ()
    """Its ``link_model`` rows."""
    step_times: Sequence[Mapping[str, Any]] = ()
    """Its included runs' ``step_times`` rows (``run_id``, ``step``, ``step_time_s``)."""


@dataclass(frozen=True)
class Record:
    """What one MLflow run should hold."""

    key: str
    """The linksweep id that finds it: the sweep id (parent) or the run id (child)."""
    name: str
    params: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str]
    status: str
    """MLflow's RunStatus name."""
    start_ms: int | None = None
    end_ms: int | None = None
    """None while the sweep runs."""
    history: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    """Metric -> (step, value) pairs, logged once (when MLflow has no value for the metric)."""


@dataclass(frozen=True)
class Held:
    """What MLflow holds for one run (its latest metric values)."""

    run_id: str
    params: Mapping[str, str] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)
    status: str = "RUNNING"
    end_ms: int | None = None


@dataclass(frozen=True)
class Update:
    """What to log to one MLflow run: everything for a new one (``run_id`` None), only what is
    new or changed for one MLflow has."""

    record: Record
    run_id: str | None
    params: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str]
    history: dict[str, list[tuple[int, float]]]
    terminate: bool
    """Set the status (and end time) to the record's."""

    @property
    def empty(self) -> bool:
        return self.run_id is not None and not (
            self.params or self.metrics or self.tags or self.history or self.terminate
        )


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _ms(value: Any) -> int | None:
    """A timestamp (datetime or ISO text) in epoch milliseconds; None for none."""
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return int(value.timestamp() * 1000)
    return None


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value)


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _figures(row: Mapping[str, Any] | None, names: Mapping[str, str]) -> dict[str, float]:
    if row is None:
        return {}
    out = {m: _number(row.get(c)) for m, c in names.items()}
    return {m: v for m, v in out.items() if v is not None}


def _matching(
    rows: Iterable[Mapping[str, Any]], run: Mapping[str, Any], key: Sequence[str]
) -> Mapping[str, Any] | None:
    """The row of ``rows`` whose ``key`` columns equal the run's."""
    return next((r for r in rows if all(r.get(k) == run.get(k) for k in key)), None)


def axis_params(run: Mapping[str, Any]) -> dict[str, str]:
    """A run's parameters: every axis of the variant key (the catalog's order), as text, with an
    older row's missing axes read as ``catalog.filled`` reads them."""
    row = catalog.filled(run)
    return {k: _text(row.get(k)) for k in catalog.variant_key()}


def version_tags(sweep: Mapping[str, Any]) -> dict[str, str]:
    """``linksweep.version.PKG`` per package the sweep recorded, the git commit (MLflow's own tag
    too) and whether the checkout had changes."""
    versions = _json(sweep.get("versions")) or {}
    tags = {f"{PREFIX}version.{k}": str(v) for k, v in sorted(versions.items()) if v is not None}
    if sweep.get("git_sha"):
        tags[PREFIX + "git_sha"] = tags[GIT_COMMIT] = str(sweep["git_sha"])
    if sweep.get("git_dirty") is not None:
        tags[PREFIX + "git_dirty"] = _text(bool(sweep["git_dirty"]))
    return tags


def sweep_record(rows: SweepRows) -> Record:
    """The parent: the spec's settings that are one value (``model``, ``steps``, ...) as
    parameters, the runs counted as metrics, the ids, status and versions as tags."""
    s = rows.sweep
    spec = _json(s.get("spec")) or {}
    params = {
        k: _text(v)[:MAX_PARAM_CHARS]
        for k, v in spec.items()
        if v is not None and not isinstance(v, (dict, list))
    }
    live = [r for r in rows.runs if not r.get("superseded_by")]
    metrics = {
        "runs_planned": float(s.get("n_runs_planned") or 0),
        "runs_stored": float(len(live)),
        "runs_failed": float(sum(r.get("status") != "ok" for r in live)),
    }
    status = str(s.get("status"))
    tags = {
        KIND: "sweep",
        SWEEP_ID: str(s["sweep_id"]),
        STATUS: status,
        PREFIX + "name": str(s.get("name")),
        **version_tags(s),
    }
    running = status == "running"
    return Record(
        key=str(s["sweep_id"]),
        name=f"{s.get('name')} {s['sweep_id']}",
        params=params,
        metrics=metrics,
        tags=tags,
        status=SWEEP_STATUS.get(status, "FAILED"),
        start_ms=_ms(s.get("started_at")),
        end_ms=None if running else _ms(s.get("finished_at")),
    )


def run_records(rows: SweepRows) -> list[Record]:
    """One record per stored run, in execution order."""
    vary = varying(rows.runs)
    history: dict[str, list[tuple[int, float]]] = {}
    for st in sorted(rows.step_times, key=lambda r: (str(r["run_id"]), r["step"])):
        value = _number(st.get("step_time_s"))
        if value is not None:
            history.setdefault(str(st["run_id"]), []).append((int(st["step"]), value))
    sweep_tags = version_tags(rows.sweep)
    key = catalog.variant_key()
    group = tuple(k for k in key if k != "link")
    out = []
    for r in sorted(rows.runs, key=lambda r: (r.get("seq") or 0, r.get("attempt") or 1)):
        run_id = str(r["run_id"])
        metrics = _figures(r, {c: c for c in RUN_METRICS})
        metrics |= _figures(_matching(rows.sensitivity, r, key), SLOWDOWN)
        model = _matching(rows.link_model, r, group)
        if model is not None and (model.get("n_links") or 0) >= 2:
            metrics |= _figures(model, EXPOSURE)
        tags = {
            KIND: "run",
            SWEEP_ID: str(rows.sweep["sweep_id"]),
            RUN_ID: run_id,
            STATUS: str(r.get("status")),
            PREFIX + "repeat": _text(r.get("repeat")),
            PREFIX + "seq": _text(r.get("seq")),
            **{PREFIX + c: _text(r[c]) for c in ("model", "world_size") if r.get(c) is not None},
            **sweep_tags,
        }
        if r.get("superseded_by"):
            tags[PREFIX + "superseded_by"] = str(r["superseded_by"])
        if r.get("error"):
            tags[PREFIX + "error"] = str(r["error"])[:4000]
        name = f"#{r.get('seq')} {variant_label(dict(catalog.filled(r)), vary)} r{r.get('repeat')}"
        tags[RUN_NAME] = name
        out.append(
            Record(
                key=run_id,
                name=name,
                params=axis_params(r),
                metrics=metrics,
                tags=tags,
                status=RUN_STATUS.get(str(r.get("status")), "FAILED"),
                start_ms=_ms(r.get("started_at")),
                end_ms=_ms(r.get("finished_at")),
                history={STEP_HISTORY: history[run_id]} if run_id in history else {},
            )
        )
    return out


def wanted(rows: SweepRows) -> tuple[Record, list[Record]]:
    """The sweep's record and its runs' records."""
    return sweep_record(rows), run_records(rows)


def _same(a: float, b: Any) -> bool:
    b = _number(b)
    return b is not None and math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)


def changes(record: Record, held: Held | None) -> Update:
    """What ``record`` adds to what MLflow holds (``held``; None: no such MLflow run yet)."""
    if held is None:
        return Update(
            record, None, dict(record.params), dict(record.metrics), dict(record.tags),
            dict(record.history), terminate=record.status != "RUNNING",
        )  # fmt: skip
    params = {k: v for k, v in record.params.items() if k not in held.params}
    metrics = {k: v for k, v in record.metrics.items() if not _same(v, held.metrics.get(k))}
    tags = {k: v for k, v in record.tags.items() if held.tags.get(k) != v}
    history = {k: v for k, v in record.history.items() if k not in held.metrics}
    terminate = held.status != record.status or (
        record.end_ms is not None and held.end_ms != record.end_ms
    )
    return Update(record, held.run_id, params, metrics, tags, history, terminate)


def plan(rows: SweepRows, held: Iterable[Held]) -> tuple[Update, list[Update]]:
    """The updates that bring MLflow to the sweep as stored: the parent's, then each run's.
    ``held``: the MLflow runs tagged with the sweep's id (parent and children), as found."""
    by_key: dict[tuple[str, str], Held] = {}
    for h in held:
        kind = h.tags.get(KIND)
        key = h.tags.get(RUN_ID) if kind == "run" else h.tags.get(SWEEP_ID)
        if kind and key:
            by_key.setdefault((kind, key), h)  # a duplicate made elsewhere: the first found
    parent, children = wanted(rows)
    return (
        changes(parent, by_key.get(("sweep", parent.key))),
        [changes(c, by_key.get(("run", c.key))) for c in children],
    )


def report_state(rows: SweepRows) -> str | None:
    """The sweep's state a report shows (status, end, runs stored); None while it runs (no
    report is logged for a sweep still running)."""
    s = rows.sweep
    if s.get("status") == "running":
        return None
    return f"{s.get('status')} {_ms(s.get('finished_at'))} {len(rows.runs)}"


def report_due(rows: SweepRows, held: Iterable[Held]) -> str | None:
    """The state to log the sweep's report for (:func:`report_state`), or None: the sweep still
    runs, or its parent already holds the report of this state."""
    state = report_state(rows)
    if state is None:
        return None
    sweep_id = str(rows.sweep["sweep_id"])
    for h in held:
        if h.tags.get(KIND) == "sweep" and h.tags.get(SWEEP_ID) == sweep_id:
            return None if h.tags.get(REPORT_OF) == state else state
    return state
