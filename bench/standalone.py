"""The linksweep workload under a bare ``torchrun``: no Ray, no database, the same measurement loop.

    torchrun --nproc_per_node 2 bench/standalone.py --sweep sweeps/x.yaml \\
        --strategy ddp --grad-accum 1 [--link NAME] [--bucket-mb 25] [--offload none] \\
        [--out result.json]

The sweep file supplies everything but the grid point (model, data, seq_len, micro batch, steps,
warmup, seed); the flags pick one variant, defaulting to the grid's first values. The rank gets
the same ``RunConfig`` a linksweep run's Ray actor gets (``orchestrator.sweep.planner.run_config``) and runs
the same ``workloads.train.run_training``, so the two differ only in how the processes are
started: this is the bare-torchrun baseline for ``bench/bench_overhead.py``, and a way to rerun
one variant outside Ray. It is a torchrun target, not a benchmark: it has no ``--smoke`` of its
own; ``bench_overhead.py --smoke`` runs it (its torchrun arm), which is how CI runs it
(``tests/integration/test_bench_smoke.py``; also ``tests/integration/test_standalone.py``).

Process group from torchrun's env (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT): gloo on CPU,
nccl on GPU with the LOCAL_RANK device. The link's env vars are set before the process group is
initialised (NCCL reads its env when its first communicator is built); set them on the torchrun
command line instead to be certain a library reading env at import time sees them.

Rank 0 gathers every rank's records (``dist.gather_object``) and prints one summary line; with
``--out`` it writes JSON: the variant, the cfg, per-rank records (per-step times, losses,
first_step_wall, peak memory, comms) and ``median_step_time_s`` = median over timed steps of the
max over ranks (``orchestrator.analysis.stats.run_figure``, the figure ``run_summary`` stores), plus
``startup_s`` = the last rank's first (warmup) step start minus the earliest rank's process
start: interpreter, imports, process group, model and data build.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import sys
import time


def _process_start_wall() -> float:
    """When this OS process started (wall clock), so start-up covers interpreter and imports."""
    try:
        import psutil  # a Ray dependency, so present wherever linksweep is installed

        return psutil.Process().create_time()
    except Exception:  # noqa: BLE001 - fall back to "now": start-up then excludes imports
        return time.time()


PROCESS_START_WALL = _process_start_wall()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from orchestrator.sweep.spec import ALLOWED

    p = argparse.ArgumentParser(
        prog="torchrun --nproc_per_node N bench/standalone.py",
        description="One linksweep variant under torchrun (no Ray, no database).",
    )
    p.add_argument("--sweep", required=True, help="sweep YAML file (model, data, steps...)")
    p.add_argument("--strategy", choices=ALLOWED["strategy"], help="default: grid's first")
    p.add_argument("--grad-accum", type=int, help="micro-steps per optimizer step")
    p.add_argument("--link", help="link name from the sweep's links (default: baseline)")
    p.add_argument("--bucket-mb", type=int, help="DDP bucket_cap_mb / DeepSpeed bucket size")
    p.add_argument("--offload", choices=ALLOWED["offload"], help="ZeRO only")
    p.add_argument("--out", help="write rank 0's gathered JSON here")
    args = p.parse_args(argv)
    if args.grad_accum is not None and args.grad_accum < 1:
        p.error(f"--grad-accum must be >= 1, got {args.grad_accum}")
    if args.bucket_mb is not None and args.bucket_mb < 1:
        p.error(f"--bucket-mb must be >= 1, got {args.bucket_mb}")
    return args


def build_variant(spec, args: argparse.Namespace):
    """The grid point from the flags, each defaulting to the sweep grid's first value."""
    from orchestrator.sweep.ds_config import default_bucket_mb
    from orchestrator.sweep.planner import Variant
    from orchestrator.sweep.spec import SpecError, offload_applies
    from workloads import catalog

    g = spec.grid
    strategy = args.strategy or g.strategy[0]
    offered = catalog.offered("offload", strategy) or ()
    offload = args.offload or (offered[0] if len(offered) == 1 else g.offload[0])
    link = args.link or spec.baseline
    errors = []
    if link not in spec.links:
        errors.append(f"--link: unknown link {link!r}; links defined: {list(spec.links)}")
    if not offload_applies(strategy, offload):
        takers = [s for s in catalog.names() if offload in (catalog.offered("offload", s) or ())]
        errors.append(
            f"--offload: {offload!r} needs {' or '.join(takers)}; --strategy {strategy} "
            f"allows {list(offered)}"
        )
    if errors:
        raise SpecError(errors)
    return Variant(
        strategy=strategy,
        grad_accum=args.grad_accum or g.grad_accum[0],
        link=link,
        placement="pack",  # torchrun --nproc_per_node: every rank on this node
        offload=offload,
        bucket_mb=args.bucket_mb
        or (
            g.bucket_mb[0]
            if g.bucket_mb[0] != "default"
            else default_bucket_mb(strategy, spec.precision, spec.deepspeed, spec.deepspeed_preset)
        ),
        overlap_comm=g.overlap_comm[0],
    )


def summarize(variant, cfg, records: list[dict]) -> dict:
    """Rank 0's JSON document from every rank's records. Pure."""
    from orchestrator.analysis.stats import run_figure

    timed = {r["rank"]: [s["step_time_s"] for s in r["steps"] if not s["warmup"]] for r in records}
    firsts = [r["first_step_wall_s"] for r in records if r.get("first_step_wall_s")]
    starts = [r["process_start_wall"] for r in records]
    return {
        "variant": variant.to_dict(),
        "cfg": dataclasses.asdict(cfg),
        "world_size": len(records),
        "median_step_time_s": run_figure(timed) if all(timed.values()) else None,
        "startup_s": max(firsts) - min(starts) if firsts else None,
        "ranks": sorted(records, key=lambda r: r["rank"]),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from orchestrator.sweep.planner import run_config
    from orchestrator.sweep.spec import SpecError, load_spec

    try:
        spec = load_spec(args.sweep)
        variant = build_variant(spec, args)
    except SpecError as exc:
        print(f"standalone: {exc}", file=sys.stderr)
        return 2

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if world_size != spec.world_size:
        print(
            f"standalone: note: torchrun started {world_size} ranks, the sweep says "
            f"world_size {spec.world_size}; running with {world_size}",
            file=sys.stderr,
        )
    os.environ.update(spec.links[variant.link])

    import torch
    import torch.distributed as dist

    from workloads.train import rank_device, run_training

    # The same device and thread count a linksweep rank uses (planner.run_env sets OMP_NUM_THREADS
    # to the rank's CPU share; torchrun sets 1 for nproc_per_node > 1 unless the caller set it).
    backend, device = rank_device(local_rank)

    run_id = "standalone-" + dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    cfg = run_config(spec, variant, run_id)
    timeout = dt.timedelta(seconds=cfg.pg_timeout_s)
    dist.init_process_group(backend, timeout=timeout)  # env:// from torchrun
    try:
        rec = dataclasses.asdict(run_training(cfg, rank, world_size, device))
        rec.update(
            {
                "rank": rank,
                "local_rank": local_rank,
                "backend": backend,
                "device": str(device),
                "process_start_wall": PROCESS_START_WALL,
                "omp_num_threads": torch.get_num_threads(),
            }
        )
        gathered: list[dict] | None = [None] * world_size if rank == 0 else None
        dist.gather_object(rec, gathered, dst=0)
        dist.barrier()  # no rank tears gloo down while another still has an op in flight
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return 0
    doc = summarize(variant, cfg, gathered)
    print(
        f"standalone: {variant.label} world_size={world_size} backend={backend} "
        f"median_step_time_s={doc['median_step_time_s']} startup_s={doc['startup_s']}",
        file=sys.stderr,
    )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1, default=str)
    return 0


def _exit(code: int) -> None:
    """Leave without interpreter finalisation. Under load, a rank that returned first (rank 1:
    rank 0 still summarises) sometimes aborted while Python tore down ("terminate called without
    an active exception", SIGABRT, about 1 run in 30 on 2 busy cores; CI saw it once), and
    torchrun then fails the whole job. Everything worth keeping is written and closed by now."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(main())
