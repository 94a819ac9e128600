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
