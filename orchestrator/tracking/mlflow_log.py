"""A sweep logged to MLflow: ``run --mlflow URI`` as its runs finish, ``export --mlflow URI``
afterwards, both through :func:`sync_sweep`, so the two cannot disagree.

:func:`sync_sweep` reads the sweep as the database has it (named queries), asks MLflow what it
holds for it (``mlflow_client.Tracker.held``), and logs only what is new or changed
(``records.plan``); a finished sweep's report (report.html, its figures and the stored sweep
file) goes to the sweep's MLflow run as artifacts once per state of the sweep.

During ``run`` (:class:`MlflowObserver`) the sweep is synced when it starts, after each run
(slowdowns and exposures are logged as the sweep has them) and when it ends; a failure to log
is a warning, never a failed sweep (``export --mlflow`` logs what was missed). The tracking URI
is a command-line option only: it is never part of the sweep file the database stores.

May import: mlflow_client, records, orchestrator.store, orchestrator.report.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import dataclass

from orchestrator.tracking import mlflow_client, records

ARGUMENT_HELP = (
    "also log the sweep to MLflow at this tracking URI as its runs finish (e.g. "
    "sqlite:///mlflow.db or http://host:5000): one MLflow run per sweep, one nested run per "
    "linksweep run; experiment: $MLFLOW_EXPERIMENT_NAME or 'linksweep'; needs "
    f"{mlflow_client.EXTRA_HINT}; default: off"
)


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """``--mlflow URI`` for ``run`` (a fleet check has no runs to log)."""
    if command == "run":
        parser.add_argument("--mlflow", default=None, metavar="URI", help=ARGUMENT_HELP)


def problems(args: argparse.Namespace) -> list[str]:
    """``--mlflow URI`` that cannot be used (mlflow missing, an unreachable server), before
    anything runs."""
    uri = getattr(args, "mlflow", None)
    if not uri:
        return []
    why = mlflow_client.unreachable(uri)
    return [f"--mlflow {uri}: {why}"] if why else []


def observers(args: argparse.Namespace, **context) -> list:
    uri = getattr(args, "mlflow", None)
    if not uri or context.get("command") != "run":
        return []
    return [MlflowObserver(uri, context["db"])]


def _warn(msg: str) -> None:
    print(f"linksweep: warning: mlflow: {msg}", file=sys.stderr, flush=True)


@dataclass
class Synced:
    """What one sync did."""

    created: int = 0
    updated: int = 0
    unchanged: int = 0
    report: bool = False
    parent_id: str | None = None
    """The sweep's MLflow run."""

    def __str__(self) -> str:
        report = "; report logged" if self.report else ""
        return (
            f"{self.created} MLflow run(s) created, {self.updated} updated, "
            f"{self.unchanged} unchanged{report}"
        )


def read_sweep(source, sweep_id: str) -> records.SweepRows:
    """One sweep's rows from ``source`` (a ``Reader`` or ``LiveStore``: anything with
    ``rows(query, **params)``)."""
    from orchestrator.store import Q

    (sweep,) = source.rows(Q.SWEEP, sweep_id=sweep_id)
    return records.SweepRows(
        sweep=sweep,
        runs=source.rows(Q.REPORT_RUNS, sweep_id=sweep_id),
        sensitivity=source.rows(Q.REPORT_SENSITIVITY, sweep_id=sweep_id),
        link_model=source.rows(Q.REPORT_LINK_MODEL, sweep_id=sweep_id),
        step_times=source.rows(Q.REPORT_STEP_TIMES, sweep_id=sweep_id),
    )


def write_report(db: str, rows: records.SweepRows, folder: str) -> list[str]:
    """The sweep's report.html, its drawn figures and the stored sweep file (``sweep.json``)
    in ``folder`` (as ``linksweep report`` writes them); the file names."""
    from orchestrator.report.figures import build_figures
    from orchestrator.report.html import render_html
    from orchestrator.report.reading import load_report_data

    data = load_report_data(db, str(rows.sweep["sweep_id"]))
    figures = build_figures(data)
    names = []
    for f in figures:
        if f.png is not None:
            with open(os.path.join(folder, f.name), "wb") as fh:
                fh.write(f.png)
            names.append(f.name)
    with open(os.path.join(folder, "report.html"), "w", encoding="utf-8") as fh:
        fh.write(render_html(data, figures, []))
    spec = rows.sweep.get("spec")
    with open(os.path.join(folder, "sweep.json"), "w", encoding="utf-8") as fh:
        json.dump(json.loads(spec) if isinstance(spec, str) else spec, fh, indent=2, default=str)
    return ["report.html", *names, "sweep.json"]


def sync_sweep(tracker, rows: records.SweepRows, db: str, report: bool = True) -> Synced:
    """Bring MLflow to the sweep as ``rows`` (:func:`read_sweep`) hold it; with ``report``,
    also log the report of a sweep that has ended (once per state: ``records.report_due``),
    read from ``db``. The database is not held open while MLflow is called."""
    held = tracker.held(str(rows.sweep["sweep_id"]))
    parent, children = records.plan(rows, held)
    done = Synced()
    parent_id = None
    for update in [parent, *children]:
        if update.empty:
            done.unchanged += 1
            run_id = update.run_id
        else:
            run_id = tracker.apply(update, parent_id)
            if update.run_id is None:
                done.created += 1
            else:
                done.updated += 1
        parent_id = parent_id or run_id
    done.parent_id = parent_id
    state = records.report_due(rows, held) if report else None
    if state is not None:
        with tempfile.TemporaryDirectory(prefix="linksweep-mlflow-") as folder:
            write_report(db, rows, folder)
            tracker.log_report(parent_id, folder, state)
        done.report = True
    return done


class MlflowObserver:
    """``run --mlflow URI``: the sweep synced when it starts, after each run and at its end
    (``SweepUI`` calls these). Reads through its own ``LiveStore`` (opened per use, as the
    driver's own handle), so it never holds the database between calls."""

    LOCK_WAIT_S = 10.0
    """How long a sync waits for the database someone else holds; then it warns and the next
    sync (or ``export --mlflow``) catches up."""

    def __init__(self, uri: str, db: str):
        self.uri, self.db = uri, db
        self.sweep_id: str | None = None
        self._tracker = None

    def _sync(self, report: bool) -> Synced | None:
        if self.sweep_id is None:
            return None
        try:
            from orchestrator.store.live import LiveStore

            if self._tracker is None:
                self._tracker = mlflow_client.Tracker(self.uri)
            rows = read_sweep(LiveStore(self.db, lock_wait_s=self.LOCK_WAIT_S), self.sweep_id)
            return sync_sweep(self._tracker, rows, self.db, report=report)
        except Exception as exc:  # noqa: BLE001 - logging to MLflow never fails a sweep
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            _warn(
                f"sweep {self.sweep_id} not fully logged to {self.uri} ({type(exc).__name__}: "
                f"{first}); the sweep goes on; later: linksweep export --mlflow {self.uri} "
                f"--db {self.db} --sweep {self.sweep_id}"
            )
            return None

    def sweep_started(self, spec, sweep_id: str, n_runs: int) -> None:
        self.sweep_id = sweep_id
        self._sync(report=False)

    def run_finished(self, planned, run: dict) -> None:
        self._sync(report=False)

    def sweep_finished(self, sweep_id: str, status: str) -> None:
        self.sweep_id = sweep_id
        done = self._sync(report=status != "interrupted")  # after Ctrl-C, no figures to draw
        if done is not None:
            print(
                f"linksweep: mlflow: sweep {sweep_id} logged to {self.uri} (experiment "
                f"{self._tracker.experiment}, MLflow run {done.parent_id})",
                file=sys.stderr,
                flush=True,
            )


def export(uri: str, db: str, sweep_ids: list[str] | None) -> list[tuple[str, Synced]]:
    """``export --mlflow``: each sweep of ``db`` (``sweep_ids``, ``latest`` the most recent;
    None: every sweep that planned runs, oldest first) synced to ``uri``. The database must be up to date (``ready_to_read``). Raises
    ``StoreError`` (database), ``KeyError`` naming an unknown sweep id, and what MLflow raises."""
    from orchestrator.store import Q, Reader

    with Reader(db) as reader:
        known = reader.rows(Q.LATEST_SWEEPS, limit=2**31 - 1)
    if sweep_ids is None:
        sweep_ids = [s["sweep_id"] for s in reversed(known) if s.get("n_runs_planned")]
    latest = known[0]["sweep_id"] if known else "latest"
    sweep_ids = list(dict.fromkeys(latest if s == "latest" else s for s in sweep_ids))
    missing = [s for s in sweep_ids if s not in {k["sweep_id"] for k in known}]
    if missing:
        raise KeyError(", ".join(missing))
    tracker = mlflow_client.Tracker(uri)
    out = []
    for sweep_id in sweep_ids:
        with Reader(db) as reader:  # closed again before MLflow is called: a sweep may be running
            rows = read_sweep(reader, sweep_id)
        out.append((sweep_id, sync_sweep(tracker, rows, db)))
    return out
