"""A sweep's life in the database, for sweeps that run for hours: start or resume it, commit
each run (spooled first), record a hang's diagnosis, and end it with its true status.

The database is a :class:`orchestrator.store.live.LiveStore` (open only while used). Resuming
reads the stored sweep, refuses a sweep file that differs (``resume.spec_differences``) and
plans what is left (``resume.remaining_slots``, pure).

May import: planner, orchestrator.provenance, resume, rows, spec, stopping, orchestrator.store.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import sys
import time

from orchestrator import provenance
from orchestrator.store import Q, SweepStore, TableStore, liveness, spool
from orchestrator.store.db import StoreLocked
from orchestrator.sweep import rows, stopping
from orchestrator.sweep.planner import plan_runs
from orchestrator.sweep.resume import ResumeError, RunSlot, remaining_slots, spec_differences
from orchestrator.sweep.spec import SweepSpec, stored_as_current

KILL_IN_COMMIT_ENV = "LINKSWEEP_KILL_IN_COMMIT"
"""A test hook (bench/bench_faults.py): ``SEQ`` -> the driver SIGKILLs itself after run SEQ is
spooled and before it is committed."""


def now() -> dt.datetime:
    """The time a sweep's and a run's rows record: UTC."""
    return dt.datetime.now(dt.timezone.utc)


def driver_identity() -> dict:
    return {"driver_host": liveness.this_host(), "driver_pid": os.getpid(), "heartbeat_at": now()}


def start_sweep(
    store: TableStore, spec: SweepSpec, sweep_id: str, address: str, n_runs: int, excluded=()
) -> None:
    """The sweep's row, with the nodes placement keeps off (``exclusions.resolve_exclusions``)."""
    sweep = rows.sweep_row(spec, sweep_id, address, n_runs, provenance.context())
    sweep.update(driver_identity())
    sweep["excluded_nodes"] = list(excluded)
    with store.transaction():
        store.insert("sweeps", [sweep])


def restart_sweep(store: TableStore, sweep_id: str, address: str, excluded=()) -> None:
    """A resumed sweep is ``running`` again, owned by this driver, with its exclusions as
    re-resolved against the nodes alive now (replacing those it started with)."""
    values = {"status": "running", "finished_at": None, "ray_address": address}
    values["excluded_nodes"] = list(excluded)
    store.update("sweeps", {"sweep_id": sweep_id}, {**values, **driver_identity()})


def finish_sweep(store: SweepStore, sweep_id: str, status: str) -> str:
    """The sweep's final status: ``interrupted`` as given; else ``failed`` if any current run
    (not superseded) failed, including runs of earlier sessions of a resumed sweep."""
    try:
        if status != "interrupted":
            failed = store.rows(Q.FAILED_RUN_COUNT, sweep_id=sweep_id)[0]["n"]
            status = "failed" if failed else "ok"
        store.update("sweeps", {"sweep_id": sweep_id}, {"status": status, "finished_at": now()})
        return status
    except StoreLocked:
        # The database stayed busy: the final status waits in the spool like a run (an
        # interrupted sweep's driver is gone by then, which the readers see anyway).
        values = {"status": status, "finished_at": now()}
        update = {"table": "sweeps", "key": {"sweep_id": sweep_id}, "values": values}
        if status != "interrupted":
            update["recompute_status"] = True  # ok or failed: decided when it is committed
        store.say(f"sweep {sweep_id}: final status {status!r} kept in the spool (database busy)")
        spool.write(store.path, spool.Payload(f"{sweep_id}-zz-end", {}, [update]))
    return status


def refresh_stats_if_free(refresh, *args) -> None:
    """``sweep.refresh_stats`` unless the database stays busy: then say so and go on (the next
    run of the group, or ``--resume``, refreshes it)."""
    try:
        refresh(*args)
    except StoreLocked:
        print(
            "linksweep: statistics refresh skipped (database busy); the next run of this "
            "variant group or --resume refreshes them",
            file=sys.stderr,
        )


def diagnostic_rows(run_id: str, result) -> list[dict]:
    where = {p.rank: p for p in result.placements}
    out = []
    for d in result.diagnostics:
        p = where.get(d.rank)
        out.append(
            {
                "run_id": run_id,
                "rank": d.rank,
                "node_id": p.node_id if p else None,
                "hostname": p.hostname if p else None,
                "pid": d.pid,
                "kind": "timeout",
                "captured_at": now(),
                "python_stack": d.python_stack,
                "nccl_trace": base64.b64encode(d.nccl_trace).decode() if d.nccl_trace else None,
                "error": d.error,
            }
        )
    return out


def commit_run(
    store: SweepStore, slot: RunSlot, run_rows: rows.RunRows, diagnostics: list[dict]
) -> bool:
    """Spool the run, then commit it (``LiveStore.commit_run``); signals wait until it is done.
    A retried run marks the failed one it replaces as superseded, in the same transaction."""
    run = {**run_rows.run, "attempt": slot.attempt}
    tables = {
        "runs": [run],
        "steps": run_rows.steps,
        "ranks": run_rows.ranks,
        "comms": run_rows.comms,
        "transports": run_rows.transports,
        "telemetry": run_rows.telemetry,
        "nccl_logs": run_rows.nccl_logs,
        "run_phases": run_rows.phases,
        "diagnostics": diagnostics,
        "traces": run_rows.traces,
        "trace_overlap": run_rows.trace_overlap,
        "trace_collectives": run_rows.trace_collectives,
        "trace_wait": run_rows.trace_wait,
        "trace_wait_instances": run_rows.trace_wait_instances,
        "trace_lateness": run_rows.trace_lateness,
    }
    updates = []
    if slot.supersedes:
        updates.append(
            {
                "table": "runs",
                "key": {"run_id": slot.supersedes},
                "values": {"superseded_by": slot.run_id},
            }
        )
    payload = spool.Payload(slot.run_id, {t: r for t, r in tables.items() if r}, updates)
    kill_at = os.environ.get(KILL_IN_COMMIT_ENV)
    with stopping.critical():
        if kill_at and int(kill_at) == slot.planned.seq:
            store.on_commit = lambda: os.kill(os.getpid(), 9)
        t0 = time.perf_counter()
        committed = store.commit_run(payload)
        commit_s = time.perf_counter() - t0
    if committed:  # the commit phase, timed once the run is safely stored (kept apart)
        try:
            with store.transaction():
                store.insert("run_phases", [rows.commit_phase_row(slot.run_id, commit_s)])
        except StoreLocked:
            pass  # the run is stored; only its commit timing is not
    return committed


def resume_plan(
    store: TableStore, spec: SweepSpec, sweep_id: str | None, retry_failed: bool
) -> tuple[str, list[RunSlot]]:
    """(sweep id, slots left) of the sweep to resume: the one named, or the latest with this
    spec's name. ResumeError (exit 2) when there is none, it is still running, or it was run
    from a different spec (the message names the differing fields)."""
    if not os.path.exists(store.path):
        raise ResumeError(f"--resume: {store.path} does not exist; nothing to resume")
    if sweep_id:
        found = store.rows(Q.SWEEP, sweep_id=sweep_id)
        if not found:
            raise ResumeError(f"--resume {sweep_id}: no such sweep in {store.path}")
    else:
        found = store.rows(Q.LATEST_SWEEP_NAMED, name=spec.name)
        if not found:
            raise ResumeError(
                f"--resume: no sweep named {spec.name!r} in {store.path} to resume; "
                "run it without --resume first"
            )
    sweep = found[0]
    if sweep["status"] == "running":
        raise ResumeError(
            f"sweep {sweep['sweep_id']} is still running (driver pid {sweep.get('driver_pid')} "
            f"on {sweep.get('driver_host')}); stop it first"
        )
    stored_spec = sweep["spec"]
    stored_spec = json.loads(stored_spec) if isinstance(stored_spec, str) else stored_spec
    stored_spec.setdefault("exclude_nodes", [])  # stored before the key existed: none excluded
    stored_spec = stored_as_current(stored_spec)  # an axis renamed or added since, as today
    differ = spec_differences(stored_spec, spec.to_json_dict())
    if differ:
        raise ResumeError(
            f"sweep {sweep['sweep_id']} was run from a different spec; fields that differ: "
            f"{', '.join(differ)} (resume with the same file, or start a new sweep)"
        )
    stored = store.rows(Q.SWEEP_RUN_SLOTS, sweep_id=sweep["sweep_id"])
    slots = remaining_slots(sweep["sweep_id"], plan_runs(spec), stored, retry_failed)
    return sweep["sweep_id"], slots
