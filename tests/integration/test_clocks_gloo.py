"""Clock offsets over a real gloo process group, without Ray: two ranks forked on one host (one
kernel, one clock: the true offset is 0), measured as a traced run measures them
(``workloads.train.clock_offset``: the default group, ``time.time_ns``), then with rank 1's
clock reading shifted by a planted amount through the same exchange
(``workloads.clocks.measure_offset``); each must be recovered within its uncertainty.

One child process (this file run as a module) imports torch once and forks the ranks; each
writes its results as JSON (``tests/integration/forked_ranks.py``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from tests.integration.forked_ranks import measured_by
from tests.integration.rayports import free_port

WORLD = 2
PLANT_NS = 2_500_000_000
"""Rank 1's clock reads 2.5 s ahead: what two hosts' NTP could leave after a bad step."""


def _rank(rank: int, port: int, out_dir: str) -> None:
    import torch
    import torch.distributed as dist

    from workloads import clocks
    from workloads.train import clock_offset

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    cpu = torch.device("cpu")
    same = clock_offset(cpu)
    shift = PLANT_NS if rank == 1 else 0
    planted = clocks.measure_offset(
        rank, WORLD, clocks.group_broadcast(cpu), clock=lambda: time.time_ns() + shift
    )
    out = {
        "same": {"offset_ns": same.offset_ns, "uncertainty_ns": same.uncertainty_ns},
        "planted": {"offset_ns": planted.offset_ns, "uncertainty_ns": planted.uncertainty_ns},
    }
    dist.destroy_process_group()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(out))


def main(out_dir: str) -> None:
    import torch.multiprocessing as mp

    mp.start_processes(_rank, args=(free_port(), out_dir), nprocs=WORLD, start_method="fork")


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict[str, list[dict]]:
    """case -> one result per rank (rank order)."""
    out = tmp_path_factory.mktemp("clocks_gloo")
    return measured_by("tests.integration.test_clocks_gloo", out, "rank*.json")


def test_rank_0_is_the_reference(measured):
    assert measured["same"][0] == {"offset_ns": 0, "uncertainty_ns": 0}
    assert measured["planted"][0] == {"offset_ns": 0, "uncertainty_ns": 0}


def test_one_hosts_ranks_measure_an_offset_of_0_within_the_uncertainty(measured):
    o = measured["same"][1]
    assert abs(o["offset_ns"]) <= o["uncertainty_ns"]
    # bounded by a few loopback round trips: well under a tenth of a second even when loaded
    assert 0 < o["uncertainty_ns"] < 100_000_000


def test_a_planted_offset_is_recovered_within_its_uncertainty_over_gloo(measured):
    o = measured["planted"][1]
    assert abs(o["offset_ns"] - PLANT_NS) <= o["uncertainty_ns"]
    assert o["uncertainty_ns"] < 100_000_000


if __name__ == "__main__":
    main(sys.argv[1])
