"""A sweep started before an axis was renamed or added resumes after it.

``ddp_grad_dtype`` became ``grad_compression`` (and ``powersgd_rank`` came with it) in schema
v13. A sweep stopped under v12 has its spec stored with the old grid key and its runs with the
old column; ``--resume`` of the same file (written either way) must find its runs, plan only
the rest, and name no difference: the database migrates (the catalog's derived step), and the
stored spec is read as this linksweep writes it (``spec.stored_as_current``).
"""

from __future__ import annotations

import json

import duckdb
import pytest

from orchestrator.store.db import Store
from orchestrator.sweep import ledger
from orchestrator.sweep.planner import plan_runs, run_id_for
from orchestrator.sweep.resume import ResumeError, spec_differences
from orchestrator.sweep.spec import parse_spec, stored_as_current
from tests.unit.schema_downgrade import as_version

OLD_GRID = {"strategy": ["ddp", "zero1"], "ddp_grad_dtype": ["fp32", "bf16"]}


def _old_json(spec) -> dict:
    """The spec as v12 stored it: the old grid key, no axis v13 added."""
    stored = spec.to_json_dict()
    grid = {
        k: v for k, v in stored["grid"].items() if k not in ("grad_compression", "powersgd_rank")
    }
    stored["grid"] = {**grid, "ddp_grad_dtype": ["fp32", "bf16"]}
    return stored


def test_a_stored_spec_with_the_old_key_reads_as_todays():
    spec = parse_spec({"name": "f", "grid": {**OLD_GRID}})
    assert spec.grid.grad_compression == ["none", "bf16"] and spec.notes
    assert spec_differences(stored_as_current(_old_json(spec)), spec.to_json_dict()) == []
    # a real difference still shows
    changed = _old_json(spec)
    changed["grid"]["ddp_grad_dtype"] = ["fp32"]
    assert spec_differences(stored_as_current(changed), spec.to_json_dict()) == [
        "grid.grad_compression"
    ]


@pytest.mark.parametrize(
    "grid",
    [OLD_GRID, {"strategy": ["ddp", "zero1"], "grad_compression": ["none", "bf16"]}],
    ids=["file still says ddp_grad_dtype", "file says grad_compression"],
)
def test_a_sweep_stopped_under_v12_resumes_with_its_runs_found(tmp_path, grid):
    spec = parse_spec({"name": "f", "repeats": 2, "grid": dict(grid)})
    planned = plan_runs(spec)
    done = planned[:3]
    db = str(tmp_path / "old.duckdb")
    with Store(db) as store:
        store.insert(
            "sweeps",
            [
                {
                    "sweep_id": "s",
                    "name": "f",
                    "status": "interrupted",
                    "spec": json.dumps(_old_json(spec)),
                }
            ],
        )
        store.insert(
            "runs",
            [
                {"run_id": run_id_for("s", p.seq), "sweep_id": "s", "seq": p.seq,
                 "repeat": p.repeat, "status": "ok", "attempt": 1, **p.variant.axes}
                for p in done
            ],
        )  # fmt: skip
    as_version(db, 12)
    with duckdb.connect(db) as con:  # as v12 left it: the old column, not the new one
        cols = {r[0] for r in con.execute("DESCRIBE runs").fetchall()}
        assert "ddp_grad_dtype" in cols and "grad_compression" not in cols
        old = con.execute("SELECT ddp_grad_dtype FROM runs ORDER BY seq").fetchall()
    assert [o for (o,) in old] == ["fp32", "bf16", "n/a"]

    with Store(db) as store:  # migrates to this version, then resumes
        sweep_id, slots = ledger.resume_plan(store, spec, "s", retry_failed=False)
    assert sweep_id == "s"
    assert [s.planned.seq for s in slots] == [p.seq for p in planned[3:]]


def test_a_changed_grid_is_still_refused(tmp_path):
    spec = parse_spec({"name": "f", "grid": dict(OLD_GRID)})
    db = str(tmp_path / "old.duckdb")
    stored = _old_json(spec)
    stored["grid"]["ddp_grad_dtype"] = ["fp32"]
    with Store(db) as store:
        store.insert(
            "sweeps", [{"sweep_id": "s", "name": "f", "status": "ok", "spec": json.dumps(stored)}]
        )
        with pytest.raises(ResumeError, match="grid.grad_compression"):
            ledger.resume_plan(store, spec, "s", retry_failed=False)
