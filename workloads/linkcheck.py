"""One rank of the emulated cluster's link check: a timed gloo all_reduce through one link.

The driver (`linksweep cluster check --emulated`) starts one `GlooRank` actor per emulated
node, with `GLOO_SOCKET_IFNAME=ls-<link>` in its env (a fresh process per link: gloo reads
the env when the process group is created), and calls `run` on each. Rendezvous goes over
`init_method` (on ctl); gloo's data then flows through the link. Each timed iteration is a
barrier then one all_reduce; the rank also reports how many bytes it sent through the link
(the interface's tx counter), so the path is verified, not assumed.

Runs in Ray worker processes.

May import: torch.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import torch
import torch.distributed as dist

PG_TIMEOUT_S = 120


def tx_bytes(ifname: str) -> int:
    """Bytes this network namespace has sent through `ifname` so far."""
    with open(f"/sys/class/net/{ifname}/statistics/tx_bytes") as f:
        return int(f.read())


class GlooRank:
    """A Ray actor class (the driver wraps it with `ray.remote`); one per emulated node."""

    def run(
        self,
        rank: int,
        world_size: int,
        init_method: str,
        ifname: str,
        numel: int,
        warmup: int,
        iters: int,
    ) -> dict[str, Any]:
        """`warmup` untimed then `iters` timed all_reduces of `numel` float32 values.

        Returns {"times_s": [seconds per timed iteration], "link_tx_bytes": bytes sent
        through `ifname` during the timed iterations}.
        """
        dist.init_process_group(
            "gloo",
            init_method=init_method,
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=PG_TIMEOUT_S),
        )
        try:
            x = torch.ones(numel, dtype=torch.float32)
            for _ in range(warmup):
                dist.all_reduce(x)
            tx0 = tx_bytes(ifname)
            times = []
            for _ in range(iters):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(x)
                times.append(time.perf_counter() - t0)
            tx1 = tx_bytes(ifname)
        finally:
            dist.destroy_process_group()
        return {"times_s": times, "link_tx_bytes": tx1 - tx0}
