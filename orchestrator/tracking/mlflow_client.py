"""The MLflow calls, and nothing else: the thin side-effect layer under ``records``.

mlflow is an optional dependency (``pip install 'linksweep[mlflow]'``), imported here only,
inside the functions that need it: without it, :func:`require_mlflow` raises
:class:`MissingExtra` naming the extra, and nothing else of linksweep notices.

- :func:`unreachable`: why a tracking URI cannot be used, before anything runs (an HTTP server
  that does not answer, a SQLite file in a folder that does not exist, a store that will not
  open); None when it can.
- :class:`Tracker`: one tracking URI and experiment; :meth:`Tracker.held` finds a sweep's MLflow
  runs by their ``linksweep.sweep_id`` tag (MLflow's search API), :meth:`Tracker.apply` logs an
  ``Update`` (creating the run when it has none), :meth:`Tracker.log_report` a folder of
  artifacts.

May import: records, mlflow.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.parse
import urllib.request

from orchestrator.tracking import records

EXTRA_HINT = "pip install 'linksweep[mlflow]'"
DEFAULT_EXPERIMENT = "linksweep"
"""The experiment sweeps are logged to, unless ``MLFLOW_EXPERIMENT_NAME`` (MLflow's own
variable) names another."""
PROBE_TIMEOUT_S = 5.0
"""How long an HTTP tracking server gets to answer the check before anything runs."""
BATCH = 100
"""MLflow's most parameters, and most tags, in one ``log_batch`` (its metrics: 1000)."""


class MissingExtra(RuntimeError):
    """mlflow is not installed: the message names the extra that installs it."""


def require_mlflow():
    """The ``mlflow`` module, or :class:`MissingExtra`."""
    try:
        import mlflow
    except ImportError as exc:
        raise MissingExtra(
            f"MLflow is not installed ({exc}); it is an optional extra: {EXTRA_HINT}"
        ) from None
    return mlflow


def experiment_name() -> str:
    return os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT


def unreachable(uri: str) -> str | None:
    """Why ``uri`` cannot be used as a tracking URI, in words (the caller names the URI); None
    when it can. mlflow missing
    is a reason too. HTTP(S): the server must answer MLflow's experiment search within
    :data:`PROBE_TIMEOUT_S`; ``sqlite:///PATH``: PATH's folder must exist; any other store is
    opened (a SQLite file is created and migrated there, as MLflow would on first use)."""
    try:
        require_mlflow()
    except MissingExtra as exc:
        return str(exc)
    scheme = urllib.parse.urlparse(uri).scheme
    if scheme in ("http", "https"):
        return _http_problem(uri)
    if scheme == "sqlite":
        path = uri[len("sqlite:///") :] if uri.startswith("sqlite:///") else ""
        folder = os.path.dirname(os.path.abspath(path)) if path else ""
        if path and not os.path.isdir(folder):
            return f"folder {folder} does not exist (MLflow creates the file, not folders)"
    try:
        Tracker(uri).client.search_experiments(max_results=1)
    except Exception as exc:  # noqa: BLE001 - any failure to open the store is the answer
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"cannot open the tracking store ({type(exc).__name__}: {first})"
    return None


def _http_problem(uri: str) -> str | None:
    url = uri.rstrip("/") + "/api/2.0/mlflow/experiments/search?max_results=1"
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S):
            return None
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return f"the server answers, but not as an MLflow tracking server (HTTP 404 on {url})"
        return None  # an answer (401, 403: credentials MLflow's client sends itself)
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", exc)
        return f"cannot reach the MLflow tracking server ({why})"


class Tracker:
    """One tracking URI, one experiment (made on first use)."""

    def __init__(self, uri: str, experiment: str | None = None):
        mlflow = require_mlflow()
        self.uri = uri
        self.experiment = experiment or experiment_name()
        self.client = mlflow.MlflowClient(tracking_uri=uri)
        self._experiment_id: str | None = None

    @property
    def experiment_id(self) -> str:
        if self._experiment_id is None:
            found = self.client.get_experiment_by_name(self.experiment)
            if found is None:
                try:
                    self._experiment_id = self.client.create_experiment(self.experiment)
                except Exception:  # another process made it first
                    found = self.client.get_experiment_by_name(self.experiment)
                    if found is None:
                        raise
            if found is not None:
                self._experiment_id = found.experiment_id
        return self._experiment_id

    def held(self, sweep_id: str) -> list[records.Held]:
        """Every MLflow run (active) tagged with the sweep's id: its parent and children."""
        quoted = sweep_id.replace("'", "\\'")
        query = f"tags.`{records.SWEEP_ID}` = '{quoted}'"
        out, token = [], None
        while True:
            page = self.client.search_runs(
                [self.experiment_id], query, max_results=1000, page_token=token
            )
            out += [
                records.Held(
                    run_id=r.info.run_id,
                    params=dict(r.data.params),
                    metrics=dict(r.data.metrics),
                    tags=dict(r.data.tags),
                    status=r.info.status,
                    end_ms=r.info.end_time,
                )
                for r in page
            ]
            token = page.token
            if not token:
                return out

    def apply(self, update: records.Update, parent_id: str | None = None) -> str:
        """Log ``update`` (creating its run, nested under ``parent_id`` when given); returns the
        MLflow run id."""
        from mlflow.entities import Metric, Param, RunTag

        rec = update.record
        tags = dict(update.tags)
        run_id = update.run_id
        if run_id is None:
            if parent_id is not None:
                tags[records.PARENT] = parent_id
            run = self.client.create_run(
                self.experiment_id, start_time=rec.start_ms, tags=tags, run_name=rec.name
            )
            run_id, tags = run.info.run_id, {}
        now = int(time.time() * 1000)
        params = [Param(k, v) for k, v in update.params.items()]
        tag_list = [RunTag(k, v) for k, v in tags.items()]
        metrics = [Metric(k, v, now, 0) for k, v in update.metrics.items()]
        for key, points in update.history.items():
            stamp = rec.end_ms or now
            metrics += [Metric(key, value, stamp, step) for step, value in points]
        while params or tag_list or metrics:
            self.client.log_batch(
                run_id, metrics=metrics[:1000], params=params[:BATCH], tags=tag_list[:BATCH]
            )
            params, tag_list, metrics = params[BATCH:], tag_list[BATCH:], metrics[1000:]
        if update.terminate:
            if rec.status == "RUNNING":
                self.client.update_run(run_id, status="RUNNING")
            else:
                self.client.set_terminated(run_id, rec.status, end_time=rec.end_ms)
        return run_id

    def log_report(self, run_id: str, folder: str, state: str) -> None:
        """Every file of ``folder`` as artifacts under ``report/``, then the state they show
        (``records.REPORT_OF``), so the same state is not logged again."""
        self.client.log_artifacts(run_id, folder, artifact_path="report")
        self.client.set_tag(run_id, records.REPORT_OF, state)
