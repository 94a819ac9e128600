"""The sweep's path, without Ray: ``execute_sweep`` with Ray's side stood in (``raycluster.runs``,
``raycluster.launchers``, node discovery) and a real database file. What is checked: the planner
is asked once per sweep, fresh or resumed, and each run starts from what its plan holds; what
a sweep writes, where, is ``store.writes.SWEEP_WRITES``; no function of the sweep's path takes
more than six arguments, or is longer than 80 lines."""

from __future__ import annotations

import ast
import collections
import contextlib
import gzip
import inspect
import json
import sys
import types
from pathlib import Path

import pytest

from orchestrator.raycluster.result import RunResult
from orchestrator.store import Q, Store, SweepStore, TableStore, spool
from orchestrator.store.db import StoreLocked
from orchestrator.store.live import LiveStore
from orchestrator.store.writes import SWEEP_WRITES, write_kinds, writes_table
from orchestrator.sweep import execute, ledger, planner
from orchestrator.sweep.planner import RankPlacement, run_config, run_env
from orchestrator.sweep.spec import parse_spec
from orchestrator.topology.discovery import as_report
from tests.unit.stand_in import stand_in
from workloads.contract import (
    CommRecord,
    LinkbenchConfig,
    LinkbenchRecord,
    PhaseTiming,
    RankDiagnostic,
    RankRecord,
    StepRecord,
    TelemetryRecord,
    TelemetrySample,
    TraceRecord,
    TrainingRecord,
)

SPEC = parse_spec(
    {
        "name": "path",
        "world_size": 2,
        "repeats": 1,
        "steps": 3,
        "warmup_steps": 1,
        "links": {"fast": {}, "slow": {"NCCL_P2P_DISABLE": "1"}},
        "grid": {"strategy": ["ddp"], "grad_accum": [1, 2], "linkbench": True},
        "trace": {"steps": 1},
    }
)
TRACE = {  # one traced step: a main-thread op, a gloo collective on its worker thread
    "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1,
         "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 50},
        {"ph": "X", "cat": "cpu_op", "name": "gloo:all_reduce", "pid": 1, "tid": 2, "ts": 40,
         "dur": 40},
    ]
}  # fmt: skip
BUNDLE = {"CPU": 2.0}
NCCL_LOG = "h1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct\n"


# --- Ray's side, stood in -------------------------------------------------------------------


def _training() -> TrainingRecord:
    steps = tuple(StepRecord(i, i == 0, 0.1 + 0.01 * i, 2, 64, 5.0) for i in range(3))
    sample = TelemetrySample(t_s=0.1, temp_c=60.0, power_w=100.0, sm_clock_mhz=1500.0, reasons=0)
    return TrainingRecord(
        steps=steps,
        n_params=1000,
        data_source="builtin",
        tokenizer="gpt2",
        first_step_wall_s=1.0,
        peak_mem_bytes=10,
        comms=(CommRecord("all_reduce", 4096, 2, 0.002, "fp32"),),
        profile_steps=1,
        telemetry=TelemetryRecord("ok", (sample,)),
        nvme_swap_files=0,
        phases=(PhaseTiming("warmup", 0.1),),
        trace=TraceRecord((0.12,), gzip.compress(json.dumps(TRACE).encode())),
    )


def _placements() -> list[RankPlacement]:
    return [RankPlacement(r, "n1", "h1", "10.0.0.1", (), 100 + r, r, None) for r in range(2)]


def _result(launch, failed: bool) -> RunResult:
    if isinstance(launch.config, LinkbenchConfig):
        bench = LinkbenchRecord("all_reduce", "gloo", 4096, (0.001, 0.002, 0.001))
        ranks = [RankRecord(r, r, "gloo", "cpu", 0.5, linkbench=(bench,)) for r in range(2)]
        return RunResult(rank_records=ranks, placements=_placements())
    if failed:  # a hang: no record, each rank's stack
        return RunResult(
            placements=_placements(),
            error="run timed out after 1800 s (run_timeout_s)",
            diagnostics=[RankDiagnostic(r, 100 + r, python_stack="File x") for r in range(2)],
            nccl_logs={"h1:/tmp/x.log": NCCL_LOG},
        )
    ranks = [
        RankRecord(r, r, "nccl", "cpu", 0.5, nccl_log=NCCL_LOG, training=_training())
        for r in range(2)
    ]
    return RunResult(
        rank_records=ranks,
        placements=_placements(),
        actors_created_wall_s=0.4,
        driver_phases={"placement": 0.01, "teardown": 0.02},
    )


class RaySide:
    """``raycluster.runs`` stood in: every launch is kept with the context it ran in, and a run
    whose id ends with one of ``hang`` hangs (no record, its stacks captured)."""

    def __init__(self):
        self.hang: tuple[str, ...] = ()
        self.launched: list = []
        self.contexts: list = []

    def execute_run(self, launch, context=None):
        self.launched.append(launch)
        return _result(launch, launch.run_id.endswith(self.hang) if self.hang else False)

    @contextlib.contextmanager
    def sweep_context(self, launcher, on_progress):
        context = types.SimpleNamespace(launcher=launcher, on_progress=on_progress, open=True)
        self.contexts.append(context)
        yield context
        context.open = False

    def install(self, monkeypatch) -> None:
        runs = types.ModuleType("orchestrator.raycluster.runs")
        runs.execute_run, runs.sweep_context = self.execute_run, self.sweep_context
        stand_in(monkeypatch, runs)
        node = {"node_id": "n1", "hostname": "h1", "ip": "10.0.0.1", "cpus": 4.0, "gpus": 0.0}
        monkeypatch.setattr(execute, "discover_nodes", lambda skip=(): [as_report(node)])


class UI:
    """The progress callbacks ``execute_sweep`` makes, kept."""

    def __init__(self):
        self.calls: list[tuple] = []

    def __getattr__(self, name):
        return lambda *args: self.calls.append((name, *args))


def _caller(depth: int = 2) -> str:
    """``module.function`` of the code ``depth`` frames up (whoever called the store)."""
    frame = sys._getframe(depth)
    return f"{frame.f_globals['__name__'].rsplit('.', 1)[-1]}.{frame.f_code.co_name}"


class OpenStore:
    """A ``SweepStore`` over one open ``Store``: ``LiveStore``'s interface, without its opening
    of the file for each call (0.16 s each). A run is spooled, then committed by
    ``Store.commit_spooled``, as ``LiveStore.commit_run`` does; no heartbeat thread. Every write
    is kept as (table, op, route, by): ``by`` the function that asked for it."""

    def __init__(self, path: str):
        self.path = path
        self.db = Store(path)
        self.on_commit = None
        self.said: list[str] = []
        self.writes: set[tuple[str, str, str, str]] = set()
        self.busy_at_end = False  # the final status finds the database busy

    def transaction(self):
        return self.db.transaction()

    def insert(self, table, rows):
        self.writes.add((table, "insert", "direct", _caller()))
        self.db.insert(table, rows)

    def update(self, table, key, values):
        if self.busy_at_end and table == "sweeps" and values.get("finished_at") is not None:
            raise StoreLocked("busy")
        self.writes.add((table, "update", "direct", _caller()))
        self.db.update(table, key, values)

    def delete(self, table, where):
        self.writes.add((table, "delete", "direct", _caller()))
        self.db.delete(table, where)

    def rows(self, query, **params):
        return self.db.rows(query, **params)

    def table(self, query, **params):
        return self.db.table(query, **params)

    def spooled(self, payload, by: str) -> None:
        self.writes.update((t, "insert", "spool", by) for t in payload.tables)
        self.writes.update((u["table"], "update", "spool", by) for u in payload.updates)

    def commit_run(self, payload) -> bool:
        self.spooled(payload, _caller())
        spool.write(self.path, payload)
        self.db.commit_spooled(just_spooled=payload)
        return True

    def heartbeat(self, row_id, every_s=15.0, table="sweeps"):
        self.writes.add((table, "update", "heartbeat", _caller()))
        return types.SimpleNamespace(stop=lambda: None)

    def say(self, msg: str) -> None:
        self.said.append(msg)


# --- counting the planner's entries ---------------------------------------------------------


def planner_entries(call):
    """``call()``'s result, and how often it entered ``orchestrator.sweep.planner``: calls of
    the planner's module-level functions from code outside the planner (the dataclasses'
    methods, e.g. ``Variant.label``, are what a plan holds, not planning)."""
    functions = {
        f.__code__: name
        for name, f in vars(planner).items()
        if inspect.isfunction(f) and f.__module__ == planner.__name__
    }
    entries: collections.Counter = collections.Counter()

    def profile(frame, event, _arg):
        if event == "call" and frame.f_code in functions:
            caller = frame.f_back
            if caller is None or caller.f_code.co_filename != planner.__file__:
                entries[functions[frame.f_code]] += 1

    sys.setprofile(profile)
    try:
        out = call()
    finally:
        sys.setprofile(None)
    return out, dict(entries)


@pytest.fixture
def sweep(monkeypatch, tmp_path):
    """(ray side, store, run(resume=None)): a sweep of ``SPEC`` through ``execute_sweep``."""
    ray_side = RaySide()
    ray_side.install(monkeypatch)
    monkeypatch.setattr(ledger.provenance, "context", lambda: {})  # no torch import for versions
    store = OpenStore(str(tmp_path / "path.duckdb"))

    def run(resume=None):
        return planner_entries(
            lambda: execute.execute_sweep(
                SPEC, store, "embedded", BUNDLE, UI(), execute.SweepStart(resume)
            )
        )

    yield ray_side, store, run
    store.db.close()


def test_the_planner_is_asked_once_per_sweep_and_each_run_starts_from_its_plan(sweep):
    ray_side, store, run = sweep
    n_runs = 2 * 2  # links x grad_accum
    n_benches = 2  # links x placements
    sweep_id, entries = run()
    assert entries == {"plan_sweep": 1}  # not once more per run: the plan holds everything
    assert len(ray_side.launched) == n_benches + n_runs
    runs = ray_side.launched[n_benches:]
    stored = store.rows(Q.SWEEP_RUN_SLOTS, sweep_id=sweep_id)
    assert [r.run_id for r in runs] == sorted(r["run_id"] for r in stored)
    for launch, row in zip(runs, sorted(stored, key=lambda r: r["seq"]), strict=True):
        v = planner.plan_runs(SPEC)[row["seq"] - 1].variant
        assert launch.config == run_config(SPEC, v, launch.run_id)
        assert launch.env == run_env(SPEC, v.link, launch.run_id, 2)
        assert (launch.world_size, launch.placement, launch.bundle) == (2, v.placement, BUNDLE)
        assert launch.timeout_s == SPEC.run_timeout_s
    (context,) = ray_side.contexts  # one per sweep, closed at its end
    assert (context.launcher, context.open) == ("fork", False)  # CPU-only: forked ranks


def fresh_then_resumed(ray_side, store, run, busy_at_end=False):
    """A sweep whose third run hangs, then its resume with ``--retry-failed`` (the third run
    again, now fine; ``busy_at_end``: its final status finds the database busy). Returns (sweep
    id, the third run's first id, the resume's planner entries)."""
    ray_side.hang = ("-r0003",)
    sweep_id, _ = run()
    ray_side.hang, ray_side.launched[:] = (), []
    resume = ledger.resume_plan(store, SPEC, sweep_id, retry_failed=True)
    store.busy_at_end = busy_at_end
    resumed_id, entries = run(resume)
    assert resumed_id == sweep_id
    return sweep_id, f"{sweep_id}-r0003", entries


def test_a_resumed_sweep_keeps_its_run_ids_and_asks_the_planner_once(sweep):
    ray_side, store, run = sweep
    sweep_id, hung, entries = fresh_then_resumed(ray_side, store, run)
    assert entries == {"plan_sweep": 1}
    assert [launch.run_id for launch in ray_side.launched] == [f"{hung}-a2"]
    slots = {r["run_id"]: r for r in store.rows(Q.SWEEP_RUN_SLOTS, sweep_id=sweep_id)}
    assert (slots[hung]["status"], slots[hung]["superseded_by"]) == ("failed", f"{hung}-a2")
    assert (slots[f"{hung}-a2"]["status"], slots[f"{hung}-a2"]["attempt"]) == ("ok", 2)
    assert sorted(slots) == sorted([*(f"{sweep_id}-r{i:04d}" for i in range(1, 5)), f"{hung}-a2"])


# --- the store's interface and what a sweep writes where ------------------------------------


def test_what_a_sweep_writes_is_what_the_list_says(sweep, monkeypatch):
    """Every write of a sweep, fresh (a run hangs: its stacks stored) and resumed (the run
    retried: the failed one superseded; the final status kept in the spool while the database
    is busy), as (table, op, route, by), equals ``writes.SWEEP_WRITES``."""
    ray_side, store, run = sweep

    class Spool:  # ledger's spool: what a driver spools itself (the final status) is kept
        Payload = spool.Payload

        @staticmethod
        def write(path, payload):
            store.spooled(payload, _caller())
            return spool.write(path, payload)

    monkeypatch.setattr(ledger, "spool", Spool)
    sweep_id, _, _ = fresh_then_resumed(ray_side, store, run, busy_at_end=True)
    assert store.writes == write_kinds(SWEEP_WRITES)
    assert len(store.said) == 1 and "kept in the spool" in store.said[0]
    store.db.commit_spooled()  # the next opener commits the final status, decided from the runs
    assert store.rows(Q.SWEEP, sweep_id=sweep_id)[0]["status"] == "ok"


def test_the_write_list_is_the_one_in_the_docs():
    from orchestrator.store import writes

    table = writes_table(SWEEP_WRITES)
    assert table in writes.__doc__
    assert table in (REPO / "docs" / "results.md").read_text()


def test_store_and_live_store_are_the_interface_the_sweep_uses(tmp_path):
    """Both stores have every method of ``TableStore`` with the same parameters, and
    ``LiveStore`` every method of ``SweepStore``: the sweep's path is typed with these."""

    def params(fn) -> list[str]:
        return [p for p in inspect.signature(fn).parameters if p != "self"]

    def methods(protocol) -> list[str]:
        return [n for n, v in vars(protocol).items() if inspect.isfunction(v) and n[0] != "_"]

    live = LiveStore(str(tmp_path / "x.duckdb"))
    for impl, protocol in [(Store, TableStore), (live, TableStore), (live, SweepStore)]:
        for name in methods(protocol):
            assert params(getattr(impl, name)) == params(getattr(protocol, name)), (impl, name)
    assert isinstance(live, SweepStore)
    with Store(str(tmp_path / "y.duckdb")) as db:
        assert isinstance(db, TableStore) and not isinstance(db, SweepStore)
    assert isinstance(OpenStore(str(tmp_path / "z.duckdb")), SweepStore)  # the stand-in too


# --- the sweep path's functions take few arguments ---------------------------------------------

REPO = Path(__file__).resolve().parents[2]
SWEEP_PATH = [
    *sorted((REPO / "orchestrator" / "sweep").glob("*.py")),
    REPO / "orchestrator" / "raycluster" / "runs.py",
    REPO / "orchestrator" / "raycluster" / "launchers.py",
]
MAX_ARGUMENTS = 6
"""More, and a call names its values by position across a screen: what they share goes in one
object (``planner.Launch``, ``raycluster.runs.RunContext``, ``rows.RunFacts``,
``ds_config.ZeroVariant``)."""


def arguments(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """A function's arguments, keyword-only and ``*args``/``**kwargs`` included, but ``self``
    and ``cls``."""
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    names += [f"*{x.arg}" for x in (a.vararg, a.kwarg) if x is not None]
    return [n for n in names if n not in ("self", "cls")]


def too_wide(source: str, where: str) -> dict[str, int]:
    return {
        f"{where}:{fn.name}": len(arguments(fn))
        for fn in ast.walk(ast.parse(source))
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        and len(arguments(fn)) > MAX_ARGUMENTS
    }


def test_no_function_of_the_sweep_path_takes_more_than_six_arguments():
    wide = {}
    for path in SWEEP_PATH:
        wide.update(too_wide(path.read_text(), str(path.relative_to(REPO))))
    assert wide == {}


def test_the_argument_count_sees_every_kind_of_argument():
    source = "def f(a, /, b, *c, d, e=1, **f): pass\nclass C:\n    def m(self, a, b): pass\n"
    assert arguments(ast.parse(source).body[0]) == ["a", "b", "d", "e", "*c", "*f"]
    assert too_wide(source, "x") == {}
    assert too_wide("def g(a, b, c, d, e, f, *, g): pass", "x") == {"x:g": 7}


MAX_FUNCTION_LINES = 80
"""A function longer does several things (placing, starting, collecting a run; the run's row,
its ranks' rows): each gets a function named for it."""


def test_no_function_of_the_sweep_path_is_longer_than_80_lines():
    files = [
        *SWEEP_PATH,
        *sorted((REPO / "orchestrator" / "store").glob("*.py")),
        REPO / "orchestrator" / "raycluster" / "result.py",
        REPO / "orchestrator" / "commands" / "run.py",
        REPO / "orchestrator" / "commands" / "sweeping.py",
        REPO / "orchestrator" / "analysis" / "comm_model.py",
    ]
    long = {}
    for path in files:
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
                if fn.end_lineno - first + 1 > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(REPO)}:{fn.name}"] = fn.end_lineno - first + 1
    assert long == {}
