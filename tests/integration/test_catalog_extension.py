"""A strategy and an axis added in this file alone flow through every layer.

The catalog (``workloads/catalog.py``) is where a strategy or an axis is declared; everything
else derives from it. This test proves it the way a new engineer would add one: the entries
below are made here, registered by the catalog's plugin hook (``LINKSWEEP_CATALOG_PLUGINS``
names this module), and no other module is touched. A real sweep then runs in a child process
(its own embedded Ray: the ranks inherit the plugin's environment) over

- a strategy ``ddp_twin``: family ddp, its own workload class (DDP that also writes down which
  ``twin_knob`` it was given, so the test sees the axis reach the rank), DDP's theory;
- an axis ``twin_knob`` (plain | spiced) for ``ddp_twin`` alone, one schema version past the
  store's: a database made before it opens with the column added by the catalog's derived
  migration, its old rows reading the placeholder;

and the test reads the result back: spec, planner, rows, store, headline, report and compare.

When pytest imports this module (to collect the test) it registers nothing: the entries are
added only where the plugin variable names this module.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from workloads import catalog

HERE = __name__
STRATEGY, AXIS = "ddp_twin", "twin_knob"
SEEN_ENV = "LINKSWEEP_TWIN_SEEN_DIR"
REPO = Path(__file__).resolve().parents[2]


def _register() -> None:
    catalog.add_strategy(
        catalog.Strategy(
            STRATEGY, "ddp", "DDP-twin", "DDP twin (a strategy added by a test)",
            workload=f"{HERE}:TwinDDP", theory="orchestrator.analysis.theories:ddp",
            values={"offload": ("none",), "grad_sync": ("each", "last")},
            defaults={"grad_sync": "last"},
        )
    )  # fmt: skip
    catalog.add_axis(
        catalog.Axis(
            AXIS, "VARCHAR", ("plain", "spiced"), "plain", strategies=(STRATEGY,),
            label="knob", words="knob {value}", doc="A test's axis: which twin ran.",
            since=catalog.schema_version() + 1,
        )
    )  # fmt: skip


if HERE in os.environ.get(catalog.PLUGINS_ENV, "").split(","):
    _register()


def TwinDDP(model, device, cfg, autocast_dtype):  # noqa: N802 - a workload class's factory
    """DDP, writing down the ``twin_knob`` this rank was given (``RunConfig.axes``)."""
    import torch.distributed as dist

    from workloads.strategies import DDPStrategy

    seen = os.environ.get(SEEN_ENV)
    if seen:
        Path(seen, f"{cfg.run_id}-rank{dist.get_rank()}").write_text(str(cfg.axes[AXIS]))
    return DDPStrategy(model, device, cfg, autocast_dtype)


SWEEP = """
name: catalog-extension
model: gpt2-tiny
dataset: builtin
seq_len: 32
micro_batch_size: 1
steps: 2
warmup_steps: 1
repeats: 1
world_size: 2
run_timeout_s: 300
links:
  a: {{{seen}: "{dir}"}}
  b: {{{seen}: "{dir}"}}
grid:
  strategy: [ddp, {strategy}]
  {axis}: [plain, spiced]
"""


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def _plugin_env() -> dict[str, str]:
    env = dict(os.environ)
    env[catalog.PLUGINS_ENV] = HERE
    # this module as pytest named it (``integration.test_catalog_extension``: tests/ is the
    # package root), importable in the child and in its ranks
    paths = [str(REPO), str(REPO / "tests"), env.get("PYTHONPATH")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    env.pop("RAY_ADDRESS", None)  # its own embedded cluster: its workers inherit this env
    return env


def test_a_strategy_and_an_axis_added_here_flow_through_every_layer(tmp_path):
    from orchestrator.store.db import Store

    db = tmp_path / "results.duckdb"
    # A database made by this linksweep, before the axis existed, with one run in it.
    with Store(str(db)) as store:
        store.insert("sweeps", [{"sweep_id": "old", "name": "old", "status": "ok"}])
        store.insert(
            "runs", [{"run_id": "old-r1", "sweep_id": "old", "seq": 1, "strategy": "ddp",
                      "status": "ok", **_old_key()}],
        )  # fmt: skip
    seen = tmp_path / "seen"
    seen.mkdir()
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(SWEEP.format(seen=SEEN_ENV, dir=seen, strategy=STRATEGY, axis=AXIS))
    env = _plugin_env()

    run = _cli(["run", str(sweep), "--db", str(db)], env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    # planner and ranks: ddp once per link (the knob does not apply), the twin once per knob
    got = _query(db, f"SELECT strategy, {AXIS}, link, status FROM runs WHERE sweep_id <> 'old' "
                     "ORDER BY seq", env)  # fmt: skip
    assert sorted(got) == sorted(
        [("ddp", "n/a", link, "ok") for link in "ab"]
        + [(STRATEGY, knob, link, "ok") for knob in ("plain", "spiced") for link in "ab"]
    )
    run_ids = _query(db, f"SELECT run_id, {AXIS} FROM runs WHERE strategy = '{STRATEGY}'", env)
    for run_id, knob in run_ids:
        for rank in (0, 1):
            assert (seen / f"{run_id}-rank{rank}").read_text() == knob
    # the store: the old run reads the placeholder, the derived migration's version is stored
    assert _query(db, f"SELECT {AXIS} FROM runs WHERE run_id = 'old-r1'", env) == [("n/a",)]
    version = _query(db, "SELECT value FROM meta WHERE key = 'schema_version'", env)
    assert version == [(str(catalog.schema_version() + 1),)]
    # figures per variant: the knob is a key column of variant_stats and the slowdowns
    stats = _query(db, f"SELECT DISTINCT strategy, {AXIS} FROM link_sensitivity", env)
    assert (STRATEGY, "plain") in stats and (STRATEGY, "spiced") in stats
    # headline and end-of-run tables name the new strategy and its knob
    out = run.stdout
    assert "DDP-twin" in out and "knob plain" in out and "knob spiced" in out, out[-3000:]

    report = _cli(["report", "--db", str(db), "--out", str(tmp_path / "report")], env)
    assert report.returncode == 0, report.stderr[-3000:]
    html = (tmp_path / "report" / "report.html").read_text()
    assert "DDP-twin" in html and "spiced" in html

    (sweep_id,) = _query(db, "SELECT sweep_id FROM sweeps WHERE sweep_id <> 'old'", env)[0]
    other = tmp_path / "again.duckdb"
    shutil.copy(db, other)
    cmp = _cli(["compare", f"{db}:{sweep_id}", f"{other}:{sweep_id}", "--format", "json"], env)
    assert cmp.returncode == 0, cmp.stdout[-3000:] + cmp.stderr[-3000:]
    assert cmp.stdout.count(f'"{AXIS}": "spiced"') >= 1 and "unmatched" in cmp.stdout


def _old_key() -> dict:
    """A DDP run's key columns as this linksweep stores them (before the test's axis)."""
    from orchestrator.sweep.planner import Variant

    return Variant("ddp", 1, "a", "pack").axes


def _query(db: Path, sql: str, env: dict[str, str]) -> list[tuple]:
    """Rows of ``sql`` read in a child with the plugin (this process's linksweep is one schema
    version behind the database now, and would refuse to open it)."""
    code = (
        "import duckdb, sys, json; con = duckdb.connect(sys.argv[1], read_only=True); "
        "print(json.dumps(con.execute(sys.argv[2]).fetchall()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(db), sql], env=env, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    import json

    return [tuple(r) for r in json.loads(out.stdout)]
