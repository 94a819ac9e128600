"""Offloaded ZeRO through real DeepSpeed on CPU: the optimizer on the CPU (DeepSpeedCPUAdam, the
cpu_adam op) and ZeRO-3's parameters and optimizer state swapped to NVMe (the async_io op). A
check outside the suite (``bash scripts/checks.sh offload``; ``.ci/run`` runs it after the
suite): scripts/checks/offload.sh builds the two ops, which the quickstart's setup leaves unbuilt
(about 4 min on 2 cores) and no suite test needs.

The stage tests are tests/integration/test_zero.py's, collected here again and given this
module's ``zero_sweep``: the same sweep with ``offload: cpu`` (:data:`OFFLOADED`), so one set of
assertions covers both (every stage trains, the loss falls, each rank's peak memory is stored,
each run's non-final micro-batch sent what ``zero_promise`` says). About 1.5 min on 2 cores.
"""

from __future__ import annotations

import os

import pytest

from orchestrator.cli import main
from tests.integration.test_zero import (  # noqa: F401 - collected here with this zero_sweep
    OFFLOADED,
    q,
    test_accumulation_check_ok_for_every_stage,
    test_every_stage_trains,
    test_loss_finite_and_decreasing_on_average,
    test_peak_memory_per_rank_recorded,
    zero_spec,
)


@pytest.fixture(scope="module")
def zero_sweep(run_sweep, tmp_path_factory):
    """(exit code, database, offloads) of :func:`zero_spec` with the optimizer offloaded."""
    rc, db = run_sweep(tmp_path_factory.mktemp("zero-offload"), zero_spec(OFFLOADED))
    return rc, db, OFFLOADED


def test_zero3_nvme_offload_swaps_and_cleans_up(ray_cluster, write_sweep, tmp_path):
    from workloads.aio_check import aio_facts, async_io_missing

    if why := async_io_missing(aio_facts()):  # what preflight and a rank would say
        pytest.skip(f"NVMe offload needs DeepSpeed's async_io op: {why}")
    nvme = tmp_path / "nvme"
    path = write_sweep(
        nvme_path=str(nvme),
        run_timeout_s=600,  # the op is built (offload.sh); a missing one builds in the rank
        grid={"strategy": ["zero3"], "offload": ["nvme"]},
    )
    db = tmp_path / "r.duckdb"
    assert main(["run", path, "--db", str(db)]) == 0, q(db, "SELECT error FROM runs")
    ((status, swap_files, offload),) = q(db, "SELECT status, nvme_swap_files, offload FROM runs")
    assert status == "ok" and offload == "nvme"
    assert swap_files > 0  # DeepSpeed wrote swap files under nvme_path during the run
    assert os.listdir(nvme) == []  # and nothing is left behind
