"""One sweep's comparable facts, read from a database file read-only (``linksweep compare``,
``baseline``, ``report --baseline``).

``load_sweep(path, sweep_id)`` opens ``path`` with a :class:`~orchestrator.store.db.Reader` (never
writes), picks the sweep (``None``: the newest that stored a run) and returns plain rows: the
sweep (``versions`` and ``spec`` decoded from JSON), its current runs, its microbenchmark busbw per
iteration, nodes, GPUs, topology links and link descriptions. Two files are read one after the
other, each closed before the next opens, so two databases (or one, twice) never hold two
connections at once. Named baselines: ``baselines`` and ``baseline``.

May import: db, queries.
"""

from __future__ import annotations

from typing import Any

from orchestrator.store import queries as Q
from orchestrator.store.db import Reader, StoreError, json_value


class NoSuchSweep(StoreError):
    """The database has no such sweep (or no sweep with runs)."""


def _pick(reader: Reader, sweep_id: str | None) -> dict[str, Any]:
    if sweep_id is None:
        rows = reader.rows(Q.COMPARE_NEWEST_SWEEP)
        if not rows:
            raise NoSuchSweep(f"{reader.path} holds no sweep with runs")
        return rows[0]
    rows = reader.rows(Q.SWEEP, sweep_id=sweep_id)
    if not rows:
        known = ", ".join(r["sweep_id"] for r in reader.rows(Q.LATEST_SWEEPS, limit=10))
        raise NoSuchSweep(
            f"no sweep {sweep_id!r} in {reader.path}; latest sweeps: {known or 'none'}"
        )
    return rows[0]


def load_sweep(path: str, sweep_id: str | None) -> dict[str, Any]:
    """``{"db", "sweep", "spec", "runs", "linkbench", "nodes", "gpus", "gpu_links",
    "link_descriptions"}`` of one sweep. StoreError: unreadable file; NoSuchSweep: no such
    sweep."""
    with Reader(path) as reader:
        sweep = dict(_pick(reader, sweep_id))
        sid = sweep["sweep_id"]
        sweep["versions"] = json_value(sweep.get("versions"))
        spec = json_value(sweep.get("spec"))
        return {
            "db": path,
            "sweep": sweep,
            "spec": spec if isinstance(spec, dict) else {},
            "runs": reader.rows(Q.COMPARE_RUNS, sweep_id=sid),
            "linkbench": reader.rows(Q.COMPARE_LINKBENCH, sweep_id=sid),
            "nodes": reader.rows(Q.REPORT_NODES, sweep_id=sid),
            "gpus": reader.rows(Q.REPORT_GPUS, sweep_id=sid),
            "gpu_links": reader.rows(Q.REPORT_GPU_LINKS, sweep_id=sid),
            "link_descriptions": reader.rows(Q.COMPARE_LINK_DESCRIPTIONS, sweep_id=sid),
        }


def has_sweep(path: str, sweep_id: str) -> bool:
    with Reader(path) as reader:
        return bool(reader.rows(Q.SWEEP, sweep_id=sweep_id))


def newest_sweep_id(path: str) -> str:
    """The newest sweep of ``path`` that stored a run. NoSuchSweep when there is none."""
    with Reader(path) as reader:
        return str(_pick(reader, None)["sweep_id"])


def baselines(path: str) -> list[dict[str, Any]]:
    """Every named baseline of ``path`` with its sweep's name, start and run count."""
    with Reader(path) as reader:
        return reader.rows(Q.BASELINES)


def baseline(path: str, name: str) -> dict[str, Any] | None:
    """The baseline named ``name`` in ``path``, or None."""
    with Reader(path) as reader:
        rows = reader.rows(Q.BASELINE, name=name)
    return rows[0] if rows else None


class NoSuchFleet(StoreError):
    """The database has no such fleet check (or none at all)."""


FLEET_JSON_COLUMNS = ("versions", "links", "rule", "skipped_nodes", "notes")


def load_fleet(path: str, fleet_id: str) -> dict[str, Any]:
    """One fleet check's rows (``linksweep fleet``, ``report --fleet``, ``selftest``): ``check``,
    ``nodes``, ``pairs``, ``rounds``, ``suspects``, JSON cells decoded; ``fleet_id`` "latest":
    the newest check. Raises NoSuchFleet naming the recent checks."""
    with Reader(path) as reader:
        recent = reader.rows(Q.RECENT_FLEETS, limit=10)
        if fleet_id == "latest":
            if not recent:
                raise NoSuchFleet(f"{path} holds no fleet check yet")
            fleet_id = str(recent[0]["fleet_id"])
        found = reader.rows(Q.FLEET_CHECK, fleet_id=fleet_id)
        if not found:
            known = ", ".join(str(r["fleet_id"]) for r in recent) or "none"
            raise NoSuchFleet(f"no such fleet check in {path}; recent fleet checks: {known}")
        rows = {
            name: reader.rows(query, fleet_id=fleet_id)
            for name, query in (
                ("nodes", Q.FLEET_NODES),
                ("pairs", Q.FLEET_PAIRS),
                ("rounds", Q.FLEET_ROUNDS),
                ("suspects", Q.FLEET_SUSPECTS),
            )
        }
    check = dict(found[0])
    for col in FLEET_JSON_COLUMNS:
        check[col] = json_value(check.get(col))
    rows["nodes"] = [dict(n, health=json_value(n.get("health"))) for n in rows["nodes"]]
    return {"check": check, **rows}
