"""How a sweep writes: the store's typed interface, and the one list of what it writes where.

:class:`TableStore` is what reads and writes the tables, whoever holds the file: ``db.Store``
(one open connection) and ``live.LiveStore`` (the file opened for each call) both satisfy it.
:class:`SweepStore` is a sweep driver's store (``LiveStore``): a ``TableStore`` that also
commits a finished run through the spool, beats the sweep's heartbeat and says when the
database is busy. ``orchestrator/sweep/`` types every ``store`` with one of the two.

A sweep writes by three routes:

- ``direct``: ``TableStore.insert`` / ``update`` / ``delete``, each in a transaction of its own
  (or one statement), while the database is open for it;
- ``spool``: a payload of rows and updates written durably beside the database
  (``spool.write``; ``SweepStore.commit_run`` for a run), then applied in one transaction by
  :func:`apply_payload` through ``TableStore`` (``Store.commit_spooled``: at once, or by the
  next command that opens the database when it stays busy);
- ``heartbeat``: ``SweepStore.heartbeat``'s thread, every ``liveness.HEARTBEAT_S``.

Every write of a sweep (``execute.execute_sweep``), in the order it happens (``SWEEP_WRITES``;
tests/unit/test_sweep_path.py runs a sweep and finds exactly these):

| tables | ops | route | when | by |
| --- | --- | --- | --- | --- |
| sweeps | insert | direct | a new sweep starts | ledger.start_sweep |
| sweeps | update | direct | a resumed sweep starts: running again, this driver, its exclusions | ledger.restart_sweep |
| sweeps | update | heartbeat | every liveness.HEARTBEAT_S while the sweep runs | execute.sweep_life |
| nodes, gpus, gpu_links | delete, insert | direct | the sweep (or its resumed session) starts: the cluster as it is now | execute.discover_topology |
| sweeps | update | direct | then: topology_status | execute.discover_topology |
| link_descriptions | delete, insert | direct | then: each link described | execute.record_links |
| link_bench | insert | direct | each link x placement not measured yet (grid.linkbench) | execute.run_linkbenches |
| variant_stats, sensitivity_stats | delete, insert | direct | a resumed sweep starts: every variant group; after each committed run: its group | execute.refresh_stats |
| link_model, link_model_check | delete, insert | direct | as variant_stats | execute.refresh_link_model |
| runs, steps, ranks, comms, transports, telemetry, nccl_logs, run_phases, diagnostics, traces, trace_overlap, trace_collectives, trace_wait, trace_wait_instances, trace_lateness | insert | spool | each run ends | ledger.commit_run |
| runs | update | spool | a retried run ends: superseded_by of the failed run it replaces, in its transaction | ledger.commit_run |
| run_phases | insert | direct | after a run is committed: its commit phase | ledger.commit_run |
| sweeps | update | direct | the sweep ends: status, finished_at | ledger.finish_sweep |
| sweeps | update | spool | the sweep ends while the database stays busy | ledger.finish_sweep |

Before a sweep starts, ``LiveStore.recover`` commits what an earlier driver left spooled (the
spool route) and marks sweeps whose driver is gone ``interrupted`` (``Store.mark_interrupted``,
which a reading command's ``bring_up_to_date`` does too): writes on behalf of earlier drivers,
not of this sweep.

May import: queries, spool.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from orchestrator.store import queries as Q
from orchestrator.store import spool
from orchestrator.store.queries import Query


@runtime_checkable
class TableStore(Protocol):
    """Reads and writes a linksweep database's tables (``db.Store``, ``live.LiveStore``)."""

    path: str

    def transaction(self) -> AbstractContextManager[Any]:
        """A block whose writes commit together, or not at all."""
        ...

    def insert(self, table: str, rows: Sequence[dict[str, Any]]) -> None:
        """Rows as dicts keyed by ``table``'s columns (missing ones stay NULL)."""
        ...

    def update(self, table: str, key: dict[str, Any], values: dict[str, Any]) -> None:
        """``values`` set on the rows whose columns equal ``key``'s values."""
        ...

    def delete(self, table: str, where: dict[str, Any]) -> None:
        """Delete the rows whose columns equal ``where``'s values."""
        ...

    def rows(self, query: Query, **params: Any) -> list[dict[str, Any]]:
        """A named query's rows as dicts."""
        ...

    def table(self, query: Query, **params: Any) -> tuple[list[str], list[tuple]]:
        """A named query's column names and row tuples."""
        ...


class Beat(Protocol):
    """A running heartbeat (``live.Heartbeat``)."""

    def stop(self) -> None: ...


@runtime_checkable
class SweepStore(TableStore, Protocol):
    """A sweep driver's store (``live.LiveStore``): the tables, and the spool route."""

    on_commit: Callable[[], None] | None
    """A test hook: called after a run is spooled, before it is committed."""

    def commit_run(self, payload: spool.Payload) -> bool:
        """Spool the run durably, then commit it; False: the database stayed busy and the run
        waits in the spool for the next command that opens it."""
        ...

    def heartbeat(self, row_id: str, every_s: float = ..., table: str = "sweeps") -> Beat:
        """Beat ``row_id``'s ``heartbeat_at`` until stopped."""
        ...

    def say(self, msg: str) -> None:
        """Tell the person running the sweep (stderr)."""
        ...


def apply_payload(tables: TableStore, p: spool.Payload) -> bool:
    """The spool route's write: one spooled payload into the tables, in the caller's
    transaction. Idempotent: a run already stored is not inserted again (the process may have
    died between COMMIT and the spool file's removal); a payload of updates only (a sweep's
    final status) is applied again harmlessly. True when it inserted a run."""
    if not p.tables:
        for u in p.updates:
            values = dict(u["values"])
            if u.get("recompute_status"):  # ok or failed: decided from the stored runs now
                n = tables.rows(Q.FAILED_RUN_COUNT, **u["key"])[0]["n"]
                values["status"] = "failed" if n else "ok"
            tables.update(u["table"], u["key"], values)
        return False
    if tables.rows(Q.RUN_EXISTS, run_id=p.run_id)[0]["n"]:
        return False
    for table, table_rows in p.tables.items():
        tables.insert(table, table_rows)
    for u in p.updates:
        tables.update(u["table"], u["key"], u["values"])
    return True


@dataclass(frozen=True)
class Write:
    """One kind of write a sweep makes (a row of the module docstring's table)."""

    tables: tuple[str, ...]
    ops: tuple[str, ...]
    """insert | update | delete"""
    route: str
    """direct | spool | heartbeat (the module docstring)"""
    when: str
    by: str
    """The function that writes (``module.function``, modules of ``orchestrator/sweep/``)."""

    def row(self) -> str:
        cells = (", ".join(self.tables), ", ".join(self.ops), self.route, self.when, self.by)
        return "| " + " | ".join(cells) + " |"


RUN_TABLES = ("runs", "steps", "ranks", "comms", "transports", "telemetry", "nccl_logs",
              "run_phases", "diagnostics", "traces", "trace_overlap",
              "trace_collectives", "trace_wait", "trace_wait_instances",
              "trace_lateness")  # fmt: skip
"""The tables of one run's payload (``ledger.commit_run``)."""
_REPLACE = ("delete", "insert")

SWEEP_WRITES = (
    Write(("sweeps",), ("insert",), "direct", "a new sweep starts", "ledger.start_sweep"),
    Write(("sweeps",), ("update",), "direct",
          "a resumed sweep starts: running again, this driver, its exclusions",
          "ledger.restart_sweep"),
    Write(("sweeps",), ("update",), "heartbeat", "every liveness.HEARTBEAT_S while the sweep runs",
          "execute.sweep_life"),
    Write(("nodes", "gpus", "gpu_links"), _REPLACE, "direct",
          "the sweep (or its resumed session) starts: the cluster as it is now",
          "execute.discover_topology"),
    Write(("sweeps",), ("update",), "direct", "then: topology_status",
          "execute.discover_topology"),
    Write(("link_descriptions",), _REPLACE, "direct", "then: each link described",
          "execute.record_links"),
    Write(("link_bench",), ("insert",), "direct",
          "each link x placement not measured yet (grid.linkbench)", "execute.run_linkbenches"),
    Write(("variant_stats", "sensitivity_stats"), _REPLACE, "direct",
          "a resumed sweep starts: every variant group; after each committed run: its group",
          "execute.refresh_stats"),
    Write(("link_model", "link_model_check"), _REPLACE, "direct", "as variant_stats",
          "execute.refresh_link_model"),
    Write(RUN_TABLES, ("insert",), "spool", "each run ends", "ledger.commit_run"),
    Write(("runs",), ("update",), "spool",
          "a retried run ends: superseded_by of the failed run it replaces, in its transaction",
          "ledger.commit_run"),
    Write(("run_phases",), ("insert",), "direct", "after a run is committed: its commit phase",
          "ledger.commit_run"),
    Write(("sweeps",), ("update",), "direct", "the sweep ends: status, finished_at",
          "ledger.finish_sweep"),
    Write(("sweeps",), ("update",), "spool", "the sweep ends while the database stays busy",
          "ledger.finish_sweep"),
)  # fmt: skip
"""Every write of a sweep, in the order it happens; the module docstring's table."""


def writes_table(writes: Sequence[Write] = SWEEP_WRITES) -> str:
    """The writes as a Markdown table (the module docstring's, docs/results.md's)."""
    head = "| tables | ops | route | when | by |\n| --- | --- | --- | --- | --- |\n"
    return head + "\n".join(w.row() for w in writes) + "\n"


def write_kinds(writes: Sequence[Write] = SWEEP_WRITES) -> set[tuple[str, str, str, str]]:
    """Each (table, op, route, by) the writes name."""
    return {(t, op, w.route, w.by) for w in writes for t in w.tables for op in w.ops}
