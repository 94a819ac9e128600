"""Every process group times out at the run's timeout, on the real thing: two gloo ranks (torch.multiprocessing, no Ray) build a
real DeepSpeed ZeRO-1 engine through ``ZeroStrategy`` and train one step; every process group
that exists afterwards, DeepSpeed's data-parallel group included, must carry the run's
``pg_timeout_s``, read back from the group's gloo backend (``options._timeout``).

Before the fix DeepSpeed's groups held gloo's 30-minute default (NCCL's would be 10 minutes)."""

from __future__ import annotations

import datetime
import json
import os
from types import SimpleNamespace

import pytest

from tests.integration.rayports import free_port

# quiet lane (tests/lanes.py): a group creation must time out at its deadline
pytestmark = pytest.mark.quiet

PG_TIMEOUT_S = 437.0  # an odd value no backend default equals


def _rank(rank: int, port: int, out_dir: str) -> None:
    import torch
    import torch.distributed as dist
    from deepspeed.utils import groups
    from torch.distributed import distributed_c10d as c10d

    from orchestrator.sweep.ds_config import ZeroVariant, deepspeed_config
    from workloads.model import build_model
    from workloads.strategies import ZeroStrategy, group_timeout_s

    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=2,
        timeout=datetime.timedelta(seconds=PG_TIMEOUT_S),
    )
    cfg = SimpleNamespace(
        nvme_dir=None,
        lr=1e-3,
        pg_timeout_s=PG_TIMEOUT_S,
        ds_config=deepspeed_config(
            ZeroVariant(
                strategy="zero1", grad_accum=1, micro_batch_size=1, world_size=2, precision="fp32"
            )
        ),
    )
    strategy = ZeroStrategy(build_model("gpt2-tiny", 0), torch.device("cpu"), cfg, None)
    batch = torch.randint(0, 50257, (1, 16), generator=torch.Generator().manual_seed(rank))
    strategy.micro_step(batch, boundary=True)
    dp = groups._get_data_parallel_group()
    result = {
        "dp_group_timeout_s": group_timeout_s(dp),
        "dp_group_is_world": dp is dist.group.WORLD,
        "all_groups_timeout_s": sorted(
            {group_timeout_s(pg) for pg in c10d._world.pg_map if pg is not None}
        ),
        "n_groups": len(c10d._world.pg_map),
        "new_group_restored": dist.new_group is c10d.new_group,
    }
    strategy.teardown()
    dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


def test_deepspeed_groups_carry_the_runs_timeout(tmp_path):
    mp = pytest.importorskip("torch.multiprocessing")
    pytest.importorskip("deepspeed")
    mp.start_processes(_rank, args=(free_port(), str(tmp_path)), nprocs=2, start_method="spawn")
    for rank in (0, 1):
        got = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert got["dp_group_is_world"] is False  # DeepSpeed cloned the world: a new group
        assert got["n_groups"] >= 2
        assert got["dp_group_timeout_s"] == PG_TIMEOUT_S, got
        assert got["all_groups_timeout_s"] == [PG_TIMEOUT_S], got
        assert got["new_group_restored"] is True
