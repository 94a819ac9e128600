"""Who watches a sweep or a fleet check besides the terminal: live metrics for Prometheus
(``orchestrator.metrics``) and MLflow runs (``orchestrator.tracking``). ``run`` and ``fleet``
call the three functions below; each feature's arguments, checks and observer live in its own
package, so the commands name them once, here.

An observer is any object with some of ``SweepUI``'s callbacks (``sweep_started``,
``run_started``, ``run_finished``, ``sweep_finished``, ...): ``orchestrator.ui.SweepUI`` passes
each callback on to it after showing it.

May import: orchestrator.metrics, orchestrator.tracking.
"""

from __future__ import annotations

import argparse


def add_observer_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The options of the observers ``command`` (``run`` or ``fleet``) offers."""
    from orchestrator.metrics import sweep_metrics as metrics
    from orchestrator.tracking import mlflow_log as tracking

    metrics.add_arguments(parser, command)
    tracking.add_arguments(parser, command)


def observer_problems(args: argparse.Namespace) -> list[str]:
    """What is wrong with the observers' options, before anything runs (each a line naming the
    option); empty when nothing is."""
    from orchestrator.metrics import sweep_metrics as metrics
    from orchestrator.tracking import mlflow_log as tracking

    return [*metrics.problems(args), *tracking.problems(args)]


def observers(args: argparse.Namespace, **context) -> list:
    """The observers asked for, made once the cluster is joined (``context``: ``address``,
    ``db``, ``command``)."""
    from orchestrator.metrics import sweep_metrics as metrics
    from orchestrator.tracking import mlflow_log as tracking

    return [*metrics.observers(args, **context), *tracking.observers(args, **context)]
