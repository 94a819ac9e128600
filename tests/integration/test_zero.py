"""ZeRO-DP through real DeepSpeed on CPU (gloo), real Ray, real DuckDB; measured communication.

Offloaded ZeRO (``offload: cpu`` and ``nvme``) needs DeepSpeed's C++ ops cpu_adam and async_io,
which the quickstart's setup leaves unbuilt (about 4 min on 2 cores): its runs are the
``offload`` check (``bash scripts/checks.sh offload``, tests/checks/test_offload.py), which runs
this module's stage tests again with :data:`OFFLOADED` through its own ``zero_sweep``.
"""

from __future__ import annotations

import math
import statistics

import pytest

from orchestrator.cli import main
from orchestrator.store import read_query


def q(db, sql):
    return read_query(str(db), sql)[1]


NOT_OFFLOADED = ("none",)
"""The offloads the suite runs: no op beyond the quickstart's."""
OFFLOADED = ("cpu",)
"""The offloads the ``offload`` check runs the same tests with (cpu_adam)."""


def zero_spec(offloads: tuple[str, ...]) -> dict:
    """zero1/2/3 x ``offloads``, enough steps for the loss to fall; grad_accum 2 of one
    sequence each (the samples of one micro-batch of 2), so each run's accumulation check has a
    non-final micro-batch to judge (measured: 6-9 s more for six runs on 2 busy cores)."""
    return {
        "name": "zero-it",
        "seq_len": 32,
        "micro_batch_size": 1,
        "steps": 8,
        "warmup_steps": 1,
        "repeats": 1,
        "world_size": 2,
        "grid": {
            "strategy": ["zero1", "zero2", "zero3"],
            "offload": list(offloads),
            "grad_accum": [2],
        },
    }


@pytest.fixture(scope="module")
def zero_sweep(run_sweep, tmp_path_factory):
    """(exit code, database, offloads) of :func:`zero_spec` without offload."""
    rc, db = run_sweep(tmp_path_factory.mktemp("zero"), zero_spec(NOT_OFFLOADED))
    return rc, db, NOT_OFFLOADED


def test_every_stage_trains(zero_sweep):
    rc, db, offloads = zero_sweep
    rows = q(db, "SELECT strategy, offload, status, error, n_params FROM runs ORDER BY seq")
    assert rc == 0, rows
    assert {(r[0], r[1]) for r in rows} == {
        (s, o) for s in ("zero1", "zero2", "zero3") for o in offloads
    }
    assert all(r[2] == "ok" for r in rows)
    assert all(r[4] == 3382080 for r in rows)  # n_params actually trained, counted once


def test_loss_finite_and_decreasing_on_average(zero_sweep):
    _, db, _ = zero_sweep
    for run_id, strategy, offload in q(db, "SELECT run_id, strategy, offload FROM runs"):
        losses = [
            r[0]
            for r in q(
                db,
                f"SELECT loss FROM step_times WHERE run_id = '{run_id}' ORDER BY step",
            )
        ]
        assert len(losses) == 8 and all(math.isfinite(x) for x in losses)
        first, last = statistics.mean(losses[:4]), statistics.mean(losses[4:])
        assert last < first, (strategy, offload, losses)


def test_peak_memory_per_rank_recorded(zero_sweep):
    _, db, offloads = zero_sweep
    rows = q(db, "SELECT count(*), min(peak_mem_bytes) FROM ranks GROUP BY run_id")
    assert len(rows) == 3 * len(offloads)
    assert all(n == 2 and m > 50e6 for n, m in rows)  # RSS of a torch rank


def test_accumulation_check_ok_for_every_stage(zero_sweep):
    """What each run's non-final micro-batch sent (the collective recorder) equals what
    ``zero_promise`` says DeepSpeed sends, op by op, and fails every other stage's promise."""
    import json

    from orchestrator.analysis.comm_model import accumulation_verdict
    from orchestrator.analysis.zero_promise import gpt2_param_numels, non_final_promise

    _, db, offloads = zero_sweep
    rows = q(
        db,
        "SELECT strategy, offload, accum_check, non_final_bytes, promised_non_final_bytes, "
        "ds_config FROM runs ORDER BY seq",
    )
    assert len(rows) == 3 * len(offloads)
    sent, configs = {}, {}
    for strategy, offload, verdict, measured, promised, ds_config in rows:
        measured, promised = json.loads(measured), json.loads(promised)
        assert verdict == "ok" and measured == promised, (strategy, offload, verdict, measured)
        sent[(strategy, offload)], configs[strategy] = measured, json.loads(ds_config)
    psi = 3382080 * 4
    wte = 50257 * 64 * 4  # the only parameter over the default persistence threshold
    for offload in offloads:  # an offloaded optimizer changes nothing a micro-batch sends
        assert sent[("zero1", offload)] == {}
        assert sent[("zero2", offload)] == {"all_reduce": psi}
    if "none" in offloads:
        assert sent[("zero3", "none")] == {"all_gather": wte, "reduce_scatter": psi}
    for (strategy, offload), measured in sent.items():
        for other, config in configs.items():
            wrong, _ = non_final_promise(
                other, 2, 2, "fp32", config, gpt2_param_numels("gpt2-tiny"), 3382080
            )
            verdict = accumulation_verdict(measured, wrong, 2)
            assert (verdict == "ok") == (other == strategy), (strategy, offload, other, verdict)


@pytest.fixture(scope="module")
def comm_sweep(run_sweep, tmp_path_factory):
    spec = {
        "name": "comm-it",
        "seq_len": 32,
        "micro_batch_size": 1,
        "steps": 2,
        "warmup_steps": 2,  # the default: collectives are counted in the last warmup step
        "repeats": 1,
        "world_size": 2,
        "grid": {"strategy": ["ddp", "zero3"], "grad_accum": [1, 4]},
        # the textbook schedule whose bytes comm_model.py states (every parameter gathered)
        "deepspeed_preset": "serialized",
    }
    rc, db = run_sweep(tmp_path_factory.mktemp("comm"), spec)
    assert rc == 0
    return db


def _bytes(db, strategy, ga):
    return q(
        db,
        "SELECT comm_bytes_per_step, expected_comm_bytes_per_step FROM runs "
        f"WHERE strategy = '{strategy}' AND grad_accum = {ga}",
    )[0]


def test_ddp_bytes_flat_in_grad_accum(comm_sweep):
    (m1, e1), (m4, e4) = _bytes(comm_sweep, "ddp", 1), _bytes(comm_sweep, "ddp", 4)
    assert abs(m4 / m1 - 1) <= 0.10
    assert abs(m1 / e1 - 1) <= 0.10 and abs(m4 / e4 - 1) <= 0.10


def test_zero3_bytes_grow_with_grad_accum(comm_sweep):
    (m1, e1), (m4, e4) = _bytes(comm_sweep, "zero3", 1), _bytes(comm_sweep, "zero3", 4)
    assert abs(m4 / m1 / 4 - 1) <= 0.25
    assert abs(m1 / e1 - 1) <= 0.10 and abs(m4 / e4 - 1) <= 0.10


def test_accumulation_check_ok_at_grad_accum_4_with_the_serialized_preset(comm_sweep):
    """ZeRO-3 with nothing persistent and a prefetch bucket over the model: each of the three
    non-final micro-batches gathers and reduce-scatters every parameter once (``zero_promise``);
    DDP's no_sync sends nothing."""
    import json

    rows = q(
        comm_sweep,
        "SELECT strategy, accum_check, non_final_bytes FROM runs WHERE grad_accum = 4 "
        "ORDER BY strategy",
    )
    (_, ddp_check, _), (_, zero3_check, zero3_sent) = rows
    psi = 3382080 * 4
    assert (ddp_check, zero3_check) == ("ok", "ok")
    assert json.loads(zero3_sent) == {"all_gather": 3 * psi, "reduce_scatter": 3 * psi}


def test_comms_table_rows(comm_sweep):
    rows = q(
        comm_sweep,
        "SELECT r.strategy, c.op, c.count, c.msg_bytes, c.busbw_gbps FROM comms c "
        "JOIN runs r USING (run_id) WHERE r.grad_accum = 4 AND c.rank = 0 AND c.msg_bytes > 1000",
    )
    ops = {(s, op): (n, b, bw) for s, op, n, b, bw in rows}
    assert ops[("ddp", "all_reduce")][0] == 1  # no_sync: one all_reduce per optimizer step
    assert ops[("zero3", "all_gather")][0] == 4  # parameters gathered every micro-step
    assert ops[("zero3", "reduce_scatter")][0] == 4
    assert all(bw > 0 for _, _, bw in ops.values())


def test_profiled_step_is_the_last_warmup_step(comm_sweep):
    """With 2 warmup steps and 1 profiled step, the profiled step is warmup step 1: the run's
    phases say so (warmup holds step 0 only) and no extra pass ran after the timed steps."""
    rows = q(
        comm_sweep,
        "SELECT p.run_id, p.rank, p.phase, p.seconds FROM run_phases p "
        "WHERE p.phase IN ('warmup', 'profiled_pass', 'timed_steps')",
    )
    steps = {
        (r, k, s): t
        for r, k, s, t in q(comm_sweep, "SELECT run_id, rank, step, step_time_s FROM steps")
    }
    phases = {(r, k, p): s for r, k, p, s in rows}
    assert len(phases) == 4 * 2 * 3  # 4 runs x 2 ranks x 3 phases
    for run_id, rank, _ in phases:
        s0, s1 = steps[(run_id, rank, 0)], steps[(run_id, rank, 1)]
        warm, prof = phases[(run_id, rank, "warmup")], phases[(run_id, rank, "profiled_pass")]
        assert prof >= s1 and warm >= s0, (run_id, rank)
        assert warm < s0 + s1, (run_id, rank, warm, s0, s1)  # step 1 ran as the profiled one
    n_timed = q(comm_sweep, "SELECT min(n_steps), max(n_steps) FROM runs")
    assert n_timed == [(2, 2)]


def test_nvme_with_unwritable_path_rejected(ray_cluster, write_sweep, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    path = write_sweep(
        nvme_path=str(blocker / "sub"), grid={"strategy": ["zero3"], "offload": ["nvme"]}
    )
    db = tmp_path / "r.duckdb"
    assert main(["run", path, "--db", str(db)]) == 2
    assert "nvme_path" in capsys.readouterr().err
    assert not db.exists()
