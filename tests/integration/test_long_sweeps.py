"""Long sweeps with real processes, real signals and real DuckDB files: live queries during a
sweep, a database held by someone else, kill -9 of the driver and --resume, SIGTERM, a hung
rank's stacks, the v2 -> v3 upgrade.

Drivers that must be killed run as subprocesses (``python -m orchestrator run``, embedded Ray);
the others run in-process on the session cluster. Every wait polls a real event (rows in the
database, a spool file, a process gone) against a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.store import SCHEMA_VERSION, Q, Store, bring_up_to_date, read_query, spool
from orchestrator.watchdog import descendants
from tests.integration.schema_v2 import as_v2

REPO = Path(__file__).resolve().parents[2]
SWEEP_BODY = """
name: long
model: gpt2-tiny
dataset: builtin
precision: fp32
seq_len: 32
micro_batch_size: 2
steps: 2
warmup_steps: 1
repeats: 2
world_size: 2
links: {default: {}, other: {}}
grid: {strategy: [ddp], grad_accum: [1], placement: [pack]}
"""  # 2 links x 2 repeats = 4 runs


def q(db, sql):
    """What `linksweep query` does: bring the database up to date (by name), then read."""
    bring_up_to_date(str(db))
    return read_query(str(db), sql)[1]


def wait_for(what: str, predicate, timeout_s: float, every_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def n_runs(db) -> int:
    if not Path(db).exists():
        return 0
    try:
        return q(db, "SELECT count(*) FROM runs")[0][0]
    except Exception:  # noqa: BLE001 - not created yet, or busy past the reader's wait
        return 0


def query_elsewhere(db, sql: str) -> subprocess.CompletedProcess:
    """`linksweep query` in another process (DuckDB refuses a read-only and a read-write
    connection to one file in the same process: an in-process driver must not see ours)."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "query", sql, "--db", str(db), "--format", "json"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def n_runs_elsewhere(db) -> int:
    out = query_elsewhere(db, "SELECT count(*) AS n FROM runs")
    return json.loads(out.stdout)[0]["n"] if out.returncode == 0 else 0


def driver(args: list[str], **kw) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(REPO)
    env.update(kw.pop("env", {}))
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *args],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        **kw,
    )


def survivors(procs: dict[int, int]) -> list[str]:
    """pid and command line of each process of ``procs`` still there (same start time)."""
    from orchestrator.watchdog import _stat

    out = []
    for p, start in procs.items():
        st = _stat(p)
        if st is not None and st[1] == start:
            try:
                cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")[:150]
            except OSError:
                cmd = b"?"
            out.append(f"{p} {cmd.decode(errors='replace')}")
    return out


def all_gone(procs: dict[int, int]) -> bool:
    return not survivors(procs)


def wait_all_gone(procs: dict[int, int], timeout_s: float) -> None:
    try:
        wait_for("no embedded-Ray process left", lambda: all_gone(procs), timeout_s, 0.1)
    except AssertionError:
        raise AssertionError(f"left after {timeout_s:.0f} s: {survivors(procs)}") from None


def pairs(db) -> list[tuple]:
    return q(
        db,
        """SELECT link, "repeat", count(*) FROM runs WHERE status = 'ok'
           AND superseded_by IS NULL GROUP BY ALL ORDER BY ALL""",
    )


# --- without Ray ----------------------------------------------------------------------------


def test_v2_database_upgrades_to_the_current_version_keeping_rows(tmp_path):
    db = str(tmp_path / "v2.duckdb")
    with Store(db) as s:  # make a v3 file, then take it back to what v2 wrote
        s.insert("sweeps", [{"sweep_id": "s1", "status": "running", "name": "x"}])
        s.insert("runs", [{"run_id": "r1", "sweep_id": "s1", "seq": 1, "status": "ok"}])
    as_v2(db)
    # a reading command upgrades it (one transaction, rows kept)
    cols = q(db, "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs'")
    assert {("attempt",), ("superseded_by",)} <= set(cols)
    assert q(db, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    assert q(db, "SELECT run_id, status, superseded_by FROM runs") == [("r1", "ok", None)]
    assert q(db, "SELECT count(*) FROM diagnostics") == [(0,)]


def test_a_sweep_whose_driver_is_gone_reads_interrupted_everywhere(tmp_path):
    import datetime as dt

    from orchestrator.cli import main
    from orchestrator.report.reading import load_report_data
    from orchestrator.store import Reader, liveness

    db = str(tmp_path / "r.duckdb")
    dead_pid = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no process can have it
    now = dt.datetime.now(dt.timezone.utc)
    row = {"driver_host": liveness.this_host(), "heartbeat_at": now, "started_at": now}
    with Store(db) as s:
        s.insert(
            "sweeps", [{"sweep_id": "dead", "status": "running", "driver_pid": dead_pid, **row}]
        )
        s.insert(
            "sweeps", [{"sweep_id": "alive", "status": "running", "driver_pid": os.getpid(), **row}]
        )
    with Reader(db) as r:  # opening read-only never writes
        assert {x["status"] for x in r.rows(Q.LATEST_SWEEPS, limit=5)} == {"running"}
    # every reading command brings it up to date first, by name: export, report, query
    assert main(["export", str(tmp_path / "out"), "--format", "csv", "--db", db]) == 0
    assert "interrupted" in (tmp_path / "out" / "sweeps.csv").read_text()
    with Reader(db) as r:
        assert {x["sweep_id"]: x["status"] for x in r.rows(Q.LATEST_SWEEPS, limit=5)} == {
            "dead": "interrupted",
            "alive": "running",
        }
    assert load_report_data(db, "dead").sweep["status"] == "interrupted"
    assert q(db, "SELECT sweep_id FROM sweeps WHERE status = 'running'") == [("alive",)]


def hold_database(db: str, release_file: Path) -> subprocess.Popen:
    """Another process holding the database read-write until ``release_file`` exists.

    The sweep's driver takes the database's lock for each commit, so the holder retries its
    connect until it gets the lock (a commit in progress is not a failure of this test)."""
    code = (
        "import duckdb, os, sys, time\n"
        "deadline = time.monotonic() + 60\n"
        "while True:\n"
        "    try:\n"
        f"        con = duckdb.connect({db!r})\n"
        "        break\n"
        "    except duckdb.IOException:\n"
        "        if time.monotonic() > deadline: raise\n"
        "        time.sleep(0.02)\n"
        "print('held', flush=True)\n"
        f"while not os.path.exists({str(release_file)!r}): time.sleep(0.05)\n"
        "con.close()\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_spooled_run_survives_a_held_database_and_the_next_opener_commits_it(tmp_path):
    from orchestrator.store import liveness
    from orchestrator.store.live import LiveStore
    from orchestrator.sweep import ledger

    db = str(tmp_path / "r.duckdb")
    with Store(db) as s:
        mine = {"driver_host": liveness.this_host(), "driver_pid": os.getpid()}
        s.insert("sweeps", [{"sweep_id": "sx", "status": "running", **mine}])
    release = tmp_path / "release"
    holder = hold_database(db, release)
    said = []
    live = LiveStore(db, lock_wait_s=1.0, say=said.append)
    run = {"run_id": "sx-r0001", "sweep_id": "sx", "status": "failed"}
    payload = spool.Payload("sx-r0001", {"runs": [run]})
    assert live.commit_run(payload) is False  # held: kept in the spool, the caller goes on
    assert any("held by another process; retrying" in m for m in said)
    assert any("kept in" in m for m in said)
    # the sweep ends while the database is still held: its final status is spooled too
    assert ledger.finish_sweep(live, "sx", "ok") == "ok"
    assert [Path(p).name for p in spool.pending(db)] == ["sx-r0001.json", "sx-zz-end.json"]
    release.touch()
    holder.wait(timeout=30)
    assert read_query(db, "SELECT count(*) FROM runs")[1] == [(0,)]  # reading never writes
    # the next command (here: a query, which brings the database up to date first) commits
    # both, exactly once; the status is decided then: a failed run -> failed
    assert q(db, "SELECT run_id FROM runs") == [("sx-r0001",)]
    assert q(db, "SELECT status FROM sweeps") == [("failed",)]
    assert spool.pending(db) == []
    spool.write(db, payload)  # e.g. died between COMMIT and unlink: committed again = no-op
    assert q(db, "SELECT count(*) FROM runs") == [(1,)]
    assert spool.pending(db) == []


def test_watchdog_reaps_grandchildren_of_a_kill_9_driver():
    """A stand-in driver forks a child that forks a grandchild, each re-parented when its
    parent dies (what Ray's workers do); after kill -9 of the driver the watchdog kills both.
    Like the real driver (``raycluster.session.connect``) it marks its environment, so a process
    younger than the watchdog's last refresh is found by its marker."""
    code = (
        "import os, subprocess, sys, time\n"
        "from orchestrator.watchdog import MARKER_ENV, Watchdog\n"
        "w = Watchdog()\n"
        "os.environ[MARKER_ENV] = str(os.getpid())\n"
        'inner = \'import subprocess, time; subprocess.Popen(["sleep", "300"]); time.sleep(300)\'\n'
        "subprocess.Popen([sys.executable, '-c', inner])\n"
        "print('ready', flush=True); time.sleep(300)\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert p.stdout.readline().strip() == "ready"
    tree = wait_for("child and grandchild", lambda: len(d := descendants(p.pid)) >= 3 and d, 10)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=10)
    wait_for("the whole tree gone", lambda: all_gone(tree), 5, 0.05)


def test_a_stop_signal_inside_a_commit_waits_for_its_end():
    from orchestrator.sweep import stopping

    restore = stopping.install()
    try:
        order = []
        with pytest.raises(stopping.SweepStopped) as info, stopping.critical():
            os.kill(os.getpid(), signal.SIGTERM)
            order.append("commit finished")
        assert order == ["commit finished"]
        assert info.value.exit_code == 143
        stopping.install()  # a new sweep: armed again
        with pytest.raises(stopping.SweepStopped) as info:
            os.kill(os.getpid(), signal.SIGHUP)  # delivered to this thread before kill returns
            order.append("not reached")
        assert info.value.exit_code == 129
        assert order == ["commit finished"]
    finally:
        restore()


# --- in-process sweeps on the session cluster --------------------------------------------------


def test_held_database_while_runs_finish_loses_no_run(
    ray_cluster, write_sweep, tmp_path, monkeypatch, capsys
):
    """A second process holds the database read-write while two runs finish: both are spooled,
    the driver says it is waiting, goes on, and the next commit stores everything."""
    monkeypatch.setenv("LINKSWEEP_LOCK_WAIT_S", "1")
    path = write_sweep(repeats=6, steps=2)
    db = tmp_path / "r.duckdb"
    release = tmp_path / "release"
    seen = {}

    def holder_thread():
        # wait until the sweep has stored one run, then hold the database until two finished
        # runs are waiting in the spool at the same time
        wait_for("a stored run", lambda: n_runs_elsewhere(db) >= 1, 300)
        holder = hold_database(str(db), release)
        seen["max_spooled"] = wait_for(
            "two spooled runs", lambda: len(spool.pending(str(db))) >= 2 and 2, 300, 0.05
        )
        release.touch()
        holder.wait(timeout=30)

    t = threading.Thread(target=holder_thread)
    t.start()
    try:
        assert main(["run", path, "--db", str(db)]) == 0
    finally:
        release.touch()
        t.join(timeout=60)
    assert seen.get("max_spooled") == 2
    err = capsys.readouterr().err
    assert "held by another process; retrying" in err and "kept in" in err
    assert spool.pending(str(db)) == []
    rows = q(db, "SELECT seq, status FROM runs ORDER BY seq")
    assert rows == [(i, "ok") for i in range(1, 7)]
    no_steps = q(
        db,
        "SELECT count(*) FROM runs r "
        "WHERE NOT EXISTS (SELECT 1 FROM steps s WHERE s.run_id = r.run_id)",
    )
    assert no_steps == [(0,)]
    assert q(db, "SELECT status FROM sweeps") == [("ok",)]


def test_sigterm_mid_run_removes_the_runs_placement_group(ray_cluster, write_sweep, tmp_path):
    """SIGTERM while a run's placement group is up (in this process, on the session cluster,
    which outlives the sweep): exit 143, the sweep interrupted, no placement group left."""
    import ray

    path = write_sweep(steps=50)
    db = tmp_path / "r.duckdb"
    before = set(ray.util.placement_group_table())

    def created():
        table = ray.util.placement_group_table()
        return any(k not in before and v["state"] == "CREATED" for k, v in table.items())

    def stopper():
        wait_for("the run's placement group", created, 300, 0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    t = threading.Thread(target=stopper)
    t.start()
    t0 = time.monotonic()
    assert main(["run", path, "--db", str(db)]) == 143
    t.join()
    assert time.monotonic() - t0 < 300
    table = ray.util.placement_group_table()
    assert {
        k: v["state"] for k, v in table.items() if k not in before and v["state"] != "REMOVED"
    } == {}
    assert q(db, "SELECT status FROM sweeps") == [("interrupted",)]
    assert q(db, "SELECT count(*) FROM runs") == [(0,)]  # the stopped run is not stored


def test_query_during_a_running_sweep_sees_runs_grow(ray_cluster, write_sweep, tmp_path):
    """`linksweep query` (another process) while the sweep runs: at least two different,
    growing, non-zero counts before the sweep ends."""
    path = write_sweep(repeats=4, steps=2)
    db = tmp_path / "r.duckdb"
    counts: list[int] = []
    done = threading.Event()

    def poll():
        while not done.is_set():
            out = query_elsewhere(db, "SELECT count(*) AS n FROM runs")
            if out.returncode == 0:
                counts.append(json.loads(out.stdout)[0]["n"])
            else:
                assert "does not exist" in out.stderr, out.stderr

    t = threading.Thread(target=poll)
    t.start()
    try:
        assert main(["run", path, "--db", str(db)]) == 0
    finally:
        done.set()
        t.join(timeout=120)
    during = sorted({c for c in counts if 0 < c < 4})
    assert len(during) >= 2, counts
    assert counts == sorted(counts)  # never goes back


def test_hung_rank_stores_every_ranks_stack(hung_sweep):
    """The session's hung sweep (tests/conftest.py): every rank's stack of the hung run."""
    code, db = hung_sweep
    assert code == 1
    ((run_id, status, error),) = q(db, "SELECT run_id, status, error FROM runs WHERE link = 'hung'")
    assert status == "failed" and "timed out after" in error
    diag = q(
        db,
        "SELECT rank, pid, python_stack, error FROM diagnostics "
        f"WHERE run_id = '{run_id}' ORDER BY rank",
    )
    assert [d[0] for d in diag] == [0, 1]
    for rank, pid, stack, why in diag:
        assert pid > 0 and stack, (rank, why)
        assert "Current thread" in stack or "Thread 0x" in stack
        assert "workloads/rank.py" in stack  # inside the rank's run()
    assert "_maybe_fault" in diag[0][2]  # rank 0 is where the fault hangs
    assert "_maybe_fault" not in diag[1][2]  # rank 1 waits for it in a collective


# --- subprocess drivers (embedded Ray): kill -9, --resume, SIGTERM ---------------------------


@pytest.fixture
def long_sweep(tmp_path):
    path = tmp_path / "long.yaml"
    path.write_text(SWEEP_BODY)
    return str(path), str(tmp_path / "r.duckdb")


def test_kill_9_then_resume_completes_exactly_the_missing_runs(long_sweep):
    path, db = long_sweep
    p = driver(["run", path, "--db", db])
    try:
        wait_for("two stored runs", lambda: n_runs(db) >= 2, 400, 0.1)
        ray_procs = descendants(p.pid)
        assert len(ray_procs) >= 3  # gcs, raylet, workers... (and the watchdog)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
        wait_all_gone(ray_procs, 15)
    finally:
        if p.poll() is None:
            p.kill()
    # the database opens; the sweep reads interrupted; no run lacks its steps
    (status,) = q(db, "SELECT status FROM sweeps")[0]
    assert status == "interrupted"
    stored = q(db, "SELECT seq FROM runs ORDER BY seq")
    assert len(stored) >= 2
    assert (
        q(
            db,
            "SELECT r.run_id FROM runs r LEFT JOIN steps s USING (run_id) GROUP BY ALL "
            "HAVING count(s.step) = 0",
        )
        == []
    )
    (sweep_id,) = q(db, "SELECT sweep_id FROM sweeps")[0]

    r = driver(["run", path, "--db", db, "--resume"])
    out, _ = r.communicate(timeout=600)
    assert r.returncode == 0, out[-3000:]
    assert f"resuming sweep {sweep_id}: {4 - len(stored)} run(s) left" in out
    assert q(db, "SELECT sweep_id, status FROM sweeps") == [(sweep_id, "ok")]
    assert pairs(db) == [("default", 1, 1), ("default", 2, 1), ("other", 1, 1), ("other", 2, 1)]
    assert q(db, "SELECT seq FROM runs ORDER BY seq") == [(i,) for i in range(1, 5)]
    assert q(db, "SELECT sum(n_runs) FROM variant_summary") == [(4,)]


def test_resume_refuses_a_different_spec(long_sweep, tmp_path, capsys):
    path, db = long_sweep
    with Store(db) as s:
        from orchestrator.sweep.spec import load_spec

        spec = load_spec(path).to_json_dict()
        s.insert(
            "sweeps",
            [
                {
                    "sweep_id": "s1",
                    "name": "long",
                    "spec": spec,
                    "status": "interrupted",
                    "n_runs_planned": 4,
                }
            ],
        )
    changed = tmp_path / "changed.yaml"
    changed.write_text(SWEEP_BODY.replace("steps: 2", "steps: 5").replace("[pack]", "[spread]"))
    assert main(["run", str(changed), "--db", db, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "fields that differ: grid.placement, steps" in err
    assert main(["run", str(changed), "--db", db, "--resume", "nope"]) == 2
    assert "no such sweep" in capsys.readouterr().err


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143)])
def test_stop_signal_mid_run_exits_interrupted_leaving_nothing(long_sweep, sig, code):
    path, db = long_sweep
    p = driver(["run", path, "--db", db])
    try:
        wait_for("one stored run", lambda: n_runs(db) >= 1, 400, 0.1)
        ray_procs = descendants(p.pid)
        os.kill(p.pid, sig)
        t0 = time.monotonic()
        out, _ = p.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == code, out[-3000:]
    assert took < 30
    assert f"stopped by {signal.Signals(sig).name}" in out
    assert "SIGTERM received" not in out  # Ray's own handler did not run
    assert q(db, "SELECT status FROM sweeps") == [("interrupted",)]
    wait_all_gone(ray_procs, 5)


# --- the emulated cluster (root) ---------------------------------------------------------------


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.quiet  # its own emulated cluster: one at a time holds 198.18.0.0/24
def test_cluster_down_returns_only_when_everything_is_gone():
    """Right after `down` returns, no process of the cluster is left (not even a zombie that
    pgrep would still list) and none of its namespaces exists."""
    from orchestrator.emulated import netns_available

    ok, why = netns_available()
    if not ok:
        pytest.skip(why)
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    if any(line.startswith("198.18.0.") for line in routes.splitlines()):
        pytest.skip("another emulated cluster holds 198.18.0.0/24 in the root namespace")
    state_dir = f"/tmp/lsd-{os.getpid()}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_DISABLE_USAGE_STATS": "1"}
    env.pop("RAY_ADDRESS", None)
    up = (
        "from orchestrator.emulated import parse_link_arg, up\n"
        f"up(2, [parse_link_arg('fast')], {state_dir!r}, prefix='lsd')\n"
    )
    down = f"from orchestrator.emulated import down\nassert down({state_dir!r}) == []\n"
    pids: list[int] = []
    namespaces: list[str] = []
    try:
        r = subprocess.run(
            [sys.executable, "-c", up], env=env, capture_output=True, text=True, timeout=300
        )
        assert r.returncode == 0, r.stderr[-3000:]
        state = json.loads(Path(state_dir, "state.json").read_text())
        pids = [int(p) for p in state["start_times"]]
        namespaces = [n["namespace"] for n in state["plan"]["nodes"]]
        assert any(Path(f"/proc/{p}").exists() for p in pids)
    finally:
        r = subprocess.run(
            [sys.executable, "-c", down], env=env, capture_output=True, text=True, timeout=300
        )
    assert r.returncode == 0, r.stderr[-3000:]
    # immediately after: nothing of it, by any look
    left = subprocess.run(["pgrep", "-f", f"{state_dir}/"], capture_output=True, text=True)
    assert left.stdout.strip() == "", left.stdout
    assert [p for p in pids if Path(f"/proc/{p}").exists()] == []
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed.split() for ns in namespaces), listed
