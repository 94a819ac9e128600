"""A stop signal that reaches the driver while DuckDB runs a query: DuckDB turns the handler's
``SweepStopped`` into ``RuntimeError: Query interrupted`` (seen in ``ray job stop`` during a
link-model refresh, the sweep then stored ``ok``). ``sweep_life`` must still read it as the stop
it is: the sweep ``interrupted``, ``SweepStopped`` with the signal raised."""

from __future__ import annotations

import signal

import pytest

from orchestrator.sweep import execute, stopping


class _Store:
    def heartbeat(self, sweep_id):
        return self

    def stop(self):
        pass


class _Ui:
    def sweep_finished(self, sweep_id, status):
        pass


@pytest.fixture
def finished(monkeypatch):
    """The status each sweep_life block ends with, and the stop handlers installed."""
    statuses: list[str] = []
    monkeypatch.setattr(
        execute.ledger, "finish_sweep", lambda s, i, status: statuses.append(status)
    )
    restore = stopping.install()
    yield statuses
    restore()


def _query_interrupted_by(signum: int) -> None:
    """What DuckDB does when the handler raises inside a query."""
    try:
        stopping._handler(signum, None)
    except stopping.SweepStopped as exc:
        raise RuntimeError("Query interrupted") from exc


def test_a_stop_inside_a_query_ends_the_sweep_interrupted(finished):
    stopped = pytest.raises(stopping.SweepStopped)
    with stopped as got, execute.sweep_life(_Store(), "s1", _Ui()):
        _query_interrupted_by(signal.SIGTERM)
    assert got.value.signum == signal.SIGTERM and got.value.exit_code == 143
    assert finished == ["interrupted"]


def test_any_other_error_is_raised_as_it_is(finished):
    raised = pytest.raises(RuntimeError, match="Query interrupted")
    with raised, execute.sweep_life(_Store(), "s2", _Ui()):
        raise RuntimeError("Query interrupted")  # no signal: DuckDB's own
    assert finished == ["ok"]  # as before: the runs decide
