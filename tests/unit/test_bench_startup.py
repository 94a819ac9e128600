"""bench_overhead's start-up figures per strategy: the fork server's start is left out, the
median run is taken, and every strategy's overhead is divided by DDP's of the same sweep."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "bench" / "bench_overhead.py"
_spec = importlib.util.spec_from_file_location("bench_overhead_startup", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _rows(runs: list[tuple]) -> list[dict]:
    """RUN_PHASES rows: (strategy, repeat, wall_s, {phase: s}) per run, in run order."""
    return [
        {"seq": seq, "strategy": st, "repeat": rep, "status": "ok", "wall_s": wall,
         "phase": phase, "s": s}
        for seq, (st, rep, wall, phases) in enumerate(runs, 1)
        for phase, s in phases.items()
    ]  # fmt: skip


STEPS = {"warmup": 1.0, "timed_steps": 4.0, "profiled_pass": 0.5}


def test_overhead_is_wall_minus_the_step_phases_and_keeps_every_phase():
    (run,) = bench.per_run(_rows([("zero3", 1, 8.0, {**STEPS, "strategy_init": 1.5})]))
    assert run["steps_s"] == 5.5
    assert run["overhead_s"] == 2.5
    assert run["phases"]["strategy_init"] == 1.5


def test_the_first_repeat_is_left_out_and_ratios_are_to_ddp_of_the_same_sweep():
    runs = bench.per_run(
        _rows([
            ("ddp", 1, 12.0, STEPS),  # paid the fork server's start: not a figure
            ("zero3", 1, 9.0, STEPS),
            ("ddp", 2, 6.0, STEPS),  # overhead 0.5
            ("zero3", 2, 7.0, STEPS),  # overhead 1.5: 3x
        ])
    )  # fmt: skip
    s = bench.startup_summary(runs)
    assert s["ddp"]["overhead_s"] == 0.5 and s["ddp"]["seq"] == 3
    assert s["zero3"]["ratio_to_ddp"] == 3.0
    assert s["zero3"]["within_2x_ddp"] is False
    assert s["ddp"]["within_2x_ddp"] is True


def test_with_more_repeats_the_median_run_gives_the_figures():
    runs = bench.per_run(
        _rows([
            ("ddp", 1, 20.0, STEPS),
            ("ddp", 2, 6.0, STEPS),  # 0.5
            ("ddp", 3, 7.0, STEPS),  # 1.5: a pg_init stall
            ("ddp", 4, 6.1, STEPS),  # 0.6: the median of three
        ])
    )  # fmt: skip
    s = bench.startup_summary(runs)["ddp"]
    assert (s["seq"], s["n_runs"]) == (4, 3)
    assert abs(s["overhead_s"] - 0.6) < 1e-9


def test_one_repeat_uses_the_only_runs_there_are():
    runs = bench.per_run(_rows([("ddp", 1, 6.0, STEPS), ("fsdp", 1, 6.5, STEPS)]))
    s = bench.startup_summary(runs)
    assert s["fsdp"]["ratio_to_ddp"] == 2.0 and s["fsdp"]["within_2x_ddp"] is True


def test_the_smoke_arm_takes_the_start_up_sweeps_last_ddp_run():
    doc = bench.startup_doc(steps=1, warmup=1, repeats=2, seq_len=32)
    assert doc["grid"]["strategy"] == list(bench.STRATEGIES)
    assert bench.last_ddp_index(doc) == len(bench.STRATEGIES)  # repeat 2's first run


def _launcher_rows(runs: list[tuple]) -> list[dict]:
    """RUN_PHASES rows of a launcher sweep: (repeat, wall_s, {phase: s}) per run."""
    return _rows([("ddp", rep, wall, phases) for rep, wall, phases in runs])


def test_a_launchers_start_up_is_its_phases_before_the_first_step_median_after_run_one():
    first = {"placement": 0.1, "imports": 9.0, "pg_init": 0.2}  # paid the launcher's start
    runs = bench.per_run(
        _launcher_rows([
            (1, 20.0, {**first, **STEPS}),
            (2, 9.0, {"placement": 0.1, "cuda_init": 1.0, "pg_init": 0.3, "strategy_init": 0.4,
                      "compile": 30.0, **STEPS}),  # 1.8: compile and steps left out
            (3, 9.0, {"placement": 0.1, "cuda_init": 1.2, "pg_init": 2.5, **STEPS}),  # 3.8
            (4, 9.0, {"placement": 0.1, "cuda_init": 0.9, "pg_init": 1.5, **STEPS}),  # 2.5
        ])
    )  # fmt: skip
    s = bench.launcher_summary(runs)
    assert s["n_runs"] == 3 and abs(s["start_up_s"] - 2.5) < 1e-9
    assert s["phases"] == {"placement": 0.1, "cuda_init": 0.9, "pg_init": 1.5}
    assert s["within_goal"] is True  # 2.5 <= 3 s
    assert bench.launcher_summary(runs, goal_s=2.0)["within_goal"] is False
    assert bench.launcher_summary(runs, goal_s=2.0, fork=False)["within_goal"] is True


def test_the_gpu_launcher_sweeps_share_one_gpu_between_two_ranks_and_pin_the_launcher():
    from orchestrator.sweep.spec import parse_spec

    for gpu in (False, True):
        for launcher in bench.LAUNCHERS:
            one = bench.launcher_doc("one_rank", launcher, 3, 1, 3, gpu)
            two = bench.launcher_doc("two_ranks", launcher, 3, 1, 3, gpu)
            for doc in (one, two):
                assert parse_spec(doc).launcher == launcher and doc["repeats"] == 3
            assert one["world_size"] == 1 and two["world_size"] == 2
            assert two.get("ranks_per_gpu") == (2 if gpu else None)
            assert one["model"] == ("gpt2" if gpu else "gpt2-tiny")
