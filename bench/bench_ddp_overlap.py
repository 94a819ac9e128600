"""How much of DDP's gradient traffic can hide behind the backward pass, per model?

    python bench/bench_ddp_overlap.py [--models gpt2-tiny,gpt2] [--bucket-mb 25] [--steps 6]
                                      [--seq-len 32] [--micro-batch 1] [--smoke] [--json OUT]

DDP all-reduces a bucket of gradients as soon as every gradient in it is ready, while the
backward pass goes on computing the earlier layers' gradients; only what is still in flight when
the backward pass ends waits on the link. A bucket that becomes ready at the very end of the
backward pass cannot overlap at all. In gpt2 the LM head is tied to the token embedding: its
gradient gets a contribution from the first op of the backward pass (the head) and one from the
last (the embedding lookup), so it is complete only at the end. In gpt2 that tensor is 31% of the
parameters; in gpt2-tiny (the CPU stand-in: gpt2's vocabulary with 2 layers of width 64) it is
95%, so on gpt2-tiny DDP has almost nothing to overlap, whatever the link.

Two gloo ranks on this machine (torch.multiprocessing; a diagnostic of DDP itself, nothing to
schedule), a communication hook that notes when each bucket is handed to the all-reduce, and the
backward pass timed around it. Figures from the last ``--steps - 2`` steps (DDP rebuilds its
buckets in the order gradients became ready after the first step), rank 0, medians:

- ``bytes_at_end_share``: share of the gradient bytes whose bucket was ready only at the end of
  the backward pass (the last bucket): they are all-reduced after the compute, fully exposed;
- ``window_s``: backward compute left after the first bucket was ready: the most communication
  that could hide behind it.

``--json`` writes one row per model: ``model``, ``n_buckets``, ``grad_bytes``,
``bytes_at_end_share``, ``window_s`` and ``backward_s`` (the backward pass's wall).
``--smoke``: gpt2-tiny only, 3 steps (one kept): a check that the script runs.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script from anywhere: import workloads, orchestrator

from orchestrator.analysis import stats  # noqa: E402

FIGURES = ("model", "n_buckets", "grad_bytes", "bytes_at_end_share", "window_s", "backward_s")
"""The ``--json`` keys of every row (the JSON is a list of rows), ``--smoke`` too."""


def summarize_step(buckets: list[tuple[float, int]], backward_s: float) -> dict:
    """One step: ``buckets`` as (seconds from the start of backward when the bucket was handed to
    the all-reduce, its bytes), in any order; ``backward_s`` the backward pass's wall time. Pure.
    """
    if not buckets:
        raise ValueError("no bucket was all-reduced: is the model wrapped in DDP?")
    ordered = sorted(buckets)
    total = sum(b for _, b in ordered)
    last_t = ordered[-1][0]
    at_end = sum(b for t, b in ordered if t >= last_t)
    return {
        "n_buckets": len(ordered),
        "grad_bytes": total,
        "bytes_at_end_share": at_end / total,
        "window_s": max(0.0, last_t - ordered[0][0]),
        "backward_s": backward_s,
    }


def _rank(rank: int, world: int, port: int, args: argparse.Namespace) -> list[dict]:
    """This rank's per-step summaries, the first two steps dropped (bucket rebuild)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    from workloads.model import VOCAB_SIZE, build_model

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model = DDP(build_model(args.model, seed=0), bucket_cap_mb=args.bucket_mb)
        events: list[tuple[float, int]] = []

        def hook(group, bucket):  # DDP's own all-reduce, after noting the moment
            buf = bucket.buffer()
            events.append((time.perf_counter(), buf.numel() * buf.element_size()))
            return allreduce_hook(group, bucket)

        model.register_comm_hook(dist.group.WORLD, hook)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        g = torch.Generator().manual_seed(rank)
        steps = []
        for _ in range(args.steps):
            ids = torch.randint(0, VOCAB_SIZE, (args.micro_batch, args.seq_len), generator=g)
            events.clear()
            loss = model(input_ids=ids, labels=ids).loss
            t0 = time.perf_counter()
            loss.backward()
            backward_s = time.perf_counter() - t0
            opt.step()
            opt.zero_grad(set_to_none=True)
            steps.append(summarize_step([(t - t0, b) for t, b in events], backward_s))
        return steps[2:]
    finally:
        dist.destroy_process_group()


def _worker(rank: int, world: int, port: int, args: argparse.Namespace, path: str) -> None:
    steps = _rank(rank, world, port, args)
    if rank == 0:
        Path(path).write_text(json.dumps(steps))


def measure(args: argparse.Namespace) -> dict:
    import tempfile

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "rank0.json")
        mp.spawn(_worker, args=(2, port, args, path), nprocs=2, join=True)
        steps = json.loads(Path(path).read_text())
    return {
        "model": args.model,
        "bucket_mb": args.bucket_mb,
        "n_buckets": steps[-1]["n_buckets"],
        "grad_bytes": steps[-1]["grad_bytes"],
        **{
            k: stats.median([s[k] for s in steps])
            for k in ("bytes_at_end_share", "window_s", "backward_s")
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="gpt2-tiny,gpt2", help="comma-separated (workloads/model)")
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb (MiB)")
    p.add_argument("--steps", type=int, default=6, help="steps per model; the first 2 dropped")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="gpt2-tiny, 3 steps: does it run?")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    if args.smoke:
        args.models, args.steps = "gpt2-tiny", 3
    from workloads.model import GPT2_SIZES

    models = [m for m in args.models.split(",") if m]
    bad = [m for m in models if m not in GPT2_SIZES]
    if bad or args.steps < 3:
        p.error(f"--models: unknown {bad}, allowed {sorted(GPT2_SIZES)}; --steps must be >= 3")
    rows = []
    for name in models:
        args.model = name
        r = measure(args)
        rows.append(r)
        print(
            f"{name}: {r['grad_bytes'] / 1e6:.1f} MB of gradients in {r['n_buckets']} bucket(s) "
            f"of {args.bucket_mb:g} MiB; {r['bytes_at_end_share']:.1%} ready only at the end of "
            f"the backward pass; backward {r['backward_s']:.3f} s, of which "
            f"{r['window_s']:.3f} s after the first bucket (the most that can hide)",
            flush=True,
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
