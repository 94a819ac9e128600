"""The fork-server rank launcher (workloads/launcher.py) against fresh Ray actors per run:
same rows; a killed rank is a failed run and the next run is fine; a forked rank's env is
exactly the launcher's plus the run's."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from orchestrator.store import read_query

# quiet lane (tests/lanes.py): a hung forked rank must reach its hang before the run timeout; progress within a deadline
pytestmark = pytest.mark.quiet

TABLES = ("runs", "steps", "ranks", "comms", "transports", "telemetry", "run_phases")


def _spec(launcher: str, **over) -> dict:
    return {
        "name": f"launcher-{launcher}",
        "model": "gpt2-tiny",
        "dataset": "builtin",
        "seq_len": 32,
        "micro_batch_size": 2,
        "steps": 3,
        "warmup_steps": 1,
        "repeats": 1,
        "world_size": 2,
        "launcher": launcher,
        "links": {"default": {}, "other": {"LS_TEST_LINK": "other"}},
        "grid": {"strategy": ["ddp"], "grad_accum": [1], "placement": ["pack"]},
        **over,
    }


def q(db, sql: str) -> list[tuple]:
    return read_query(str(db), sql)[1]


def test_fork_and_actors_store_identical_row_counts(run_sweep, tmp_path):
    counts = {}
    for launcher in ("fork", "actors"):
        folder = tmp_path / launcher
        folder.mkdir()
        code, db = run_sweep(folder, _spec(launcher))
        assert code == 0, q(db, "SELECT error FROM runs")
        assert q(db, "SELECT DISTINCT launcher, status FROM runs") == [(launcher, "ok")]
        counts[launcher] = {t: q(db, f"SELECT count(*) FROM {t}")[0][0] for t in TABLES}
        # the forked ranks paid no imports: those happened once, in the fork server
        imports = q(db, "SELECT max(seconds) FROM run_phases WHERE phase = 'imports'")[0][0]
        counts[launcher + "_imports_s"] = imports
    assert counts["fork"] == counts["actors"]
    assert counts["fork"]["steps"] == 2 * 2 * 4  # 2 runs x 2 ranks x (1 warmup + 3 timed)
    # a module already imported costs a dict lookup (microseconds); an actor imports torch,
    # transformers and the rest from disk (0.4-1.5 s here, page cache warm or not): an order of
    # magnitude apart, whatever the machine's speed (a fixed 0.5 s line failed on CI at 0.48 s)
    assert counts["fork_imports_s"] * 20 < counts["actors_imports_s"], counts


def test_a_killed_forked_rank_is_a_failed_run_and_the_next_run_is_fine(run_sweep, tmp_path):
    spec = _spec(
        "fork",
        links={"killed": {"LINKSWEEP_INJECT_FAULT": "1:1:kill"}, "fine": {}},
        run_timeout_s=240,
    )
    code, db = run_sweep(tmp_path, spec)
    assert code == 1  # a run failed
    runs = q(db, "SELECT link, status, error, launcher FROM runs ORDER BY seq")
    assert [(r[0], r[1], r[3]) for r in runs] == [
        ("killed", "failed", "fork"),
        ("fine", "ok", "fork"),
    ]
    assert "timed out" not in runs[0][2]  # found dead at once, not at the run timeout
    ok_steps = q(db, "SELECT count(*) FROM steps JOIN runs USING (run_id) WHERE link = 'fine'")
    assert ok_steps == [(2 * 4,)]


PRINT_ENV = (subprocess.check_output, (["env", "-0"],))


def _env(printed: bytes) -> dict[str, str]:
    return dict(item.split("=", 1) for item in printed.decode().split("\0") if item)


def test_forked_rank_env_is_exactly_the_launchers_plus_the_runs(ray_cluster):
    import ray

    from orchestrator.raycluster.launchers import start_launchers, stop_launchers

    launchers = start_launchers()
    try:
        launcher = launchers.get(ray.get_runtime_context().get_node_id())
        # `env -0` run by the forked rank prints the environment the rank has
        first = _env(ray.get(launcher.call.remote({"LS_LINK_A": "a", "NCCL_P2P_DISABLE": "1"},
                                                  *PRINT_ENV)))  # fmt: skip
        second = _env(ray.get(launcher.call.remote({"LS_LINK_B": "b"}, *PRINT_ENV)))
        base = _env(ray.get(launcher.call.remote({}, *PRINT_ENV)))
        # the launcher waits under SCHED_IDLE; what it forks runs under the normal policy
        launcher_pid = ray.get(launcher.node_info.remote()).pid
        launcher_policy = os.sched_getscheduler(launcher_pid)
        rank_policy = ray.get(launcher.call.remote({}, os.sched_getscheduler, (0,)))
    finally:
        stop_launchers(launchers)
    assert (launcher_policy, rank_policy) == (os.SCHED_IDLE, os.SCHED_OTHER)
    assert first == {**base, "LS_LINK_A": "a", "NCCL_P2P_DISABLE": "1"}
    assert second == {**base, "LS_LINK_B": "b"}
    assert "LS_LINK_A" not in second and "NCCL_P2P_DISABLE" not in second


def test_a_hung_forked_rank_times_out_and_is_killed(hung_sweep):
    """The session's hung sweep (tests/conftest.py): forked ranks, rank 0 hangs in the first
    run; the run times out, its ranks are killed, and the next run on the same launcher is fine."""
    code, db = hung_sweep
    runs = q(db, "SELECT link, status, error, launcher FROM runs ORDER BY seq")
    assert code == 1
    assert runs[0][:2] == ("hung", "failed") and "timed out" in runs[0][2]
    assert runs[1][:2] == ("fine", "ok")
    assert {r[3] for r in runs} == {"fork"}


def test_forked_rank_0_progress_reaches_the_driver_through_its_launcher(ray_cluster, tmp_path):
    """A forked rank has no Ray connection: its progress goes over its result pipe to the
    launcher, which serves the latest report until the rank's call ends."""
    import time

    import ray

    from orchestrator.raycluster.launchers import start_launchers, stop_launchers

    release = tmp_path / "release"
    code = (
        "import os, time\n"
        "from workloads import launcher\n"
        "launcher._progress.update('run-p', 3, 5, False)\n"
        f"while not os.path.exists({str(release)!r}): time.sleep(0.01)\n"
    )
    launchers = start_launchers()
    try:
        launcher = launchers.get(ray.get_runtime_context().get_node_id())
        ref = launcher.call.remote({}, exec, (code,), "run-p")
        deadline = time.monotonic() + 60
        while not (seen := ray.get(launcher.progress.remote("run-p"))):
            assert time.monotonic() < deadline, "no progress report within 60 s"
            time.sleep(0.02)
        release.touch()
        assert ray.get(ref, timeout=60) is None
        after = ray.get(launcher.progress.remote("run-p"))
    finally:
        release.touch()
        stop_launchers(launchers)
    assert seen == {"run_id": "run-p", "step": 3, "total": 5, "warmup": False}
    assert after == {}  # the run's call is over: nothing stale for the next poll


def test_a_later_sweep_reuses_the_launcher_and_finds_no_process_of_the_last(ray_cluster, tmp_path):
    """A sweep's end ends every run's processes and keeps the launcher; the driver's next sweep
    gets that launcher (same pid: no second import of torch and DeepSpeed). A kept launcher
    that died is replaced by a new one."""
    import ray

    from orchestrator.raycluster.launchers import start_launchers, stop_launchers

    node = ray.get_runtime_context().get_node_id()
    forever = (exec, ("import time\nwhile True: time.sleep(1)\n",))
    first = start_launchers()
    try:
        launcher = first.get(node)
        pid = ray.get(launcher.node_info.remote()).pid
        left = launcher.call.remote({}, *forever, "run-left")  # a rank the sweep left running
        deadline = time.monotonic() + 60
        while not (rank_pids := ray.get(launcher.pids.remote("run-left"))):
            assert time.monotonic() < deadline, "the forked process never started"
            time.sleep(0.02)
    finally:
        stop_launchers(first)
    with pytest.raises(ray.exceptions.RayTaskError, match="killed by signal SIGKILL"):
        ray.get(left, timeout=60)  # ended at the sweep's end, and waited for
    assert not os.path.exists(f"/proc/{rank_pids[0]}")

    second = start_launchers()
    try:
        kept = second.get(node)
        assert ray.get(kept.node_info.remote()).pid == pid
        assert ray.get(kept.pids.remote("run-left")) == []
    finally:
        stop_launchers(second)
    ray.kill(kept, no_restart=True)  # dies while kept: the next sweep starts another
    third = start_launchers()
    try:
        fresh = third.get(node)
        assert ray.get(fresh.node_info.remote()).pid != pid
        assert ray.get(fresh.call.remote({}, os.getpid, ())) > 0
    finally:
        stop_launchers(third)
