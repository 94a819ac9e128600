"""Code that runs in the rank processes Ray starts: gpt2 training under each strategy of the
catalog (DDP, ZeRO, FSDP2, ...), the link microbenchmark, NVML telemetry, the per-node probe, the
fleet check's probes, the emulated cluster's link check.

What crosses the Ray boundary is defined once, in ``contract.py``: a rank is given a
``RunConfig`` (or ``LinkbenchConfig``) and returns a ``RankRecord``. What a strategy or an axis
is, is declared once, in ``catalog.py`` (standard library only, so the driver reads it too).
Nothing here imports ``orchestrator`` (the driver), the store or Ray scheduling; the driver
imports this package's contract and catalog and hands its functions to Ray.

One module per job:
    catalog     every strategy and every variant axis, declared once; lookups; plugins.
    contract    the Ray boundary: what a rank is given and what it gives back; vocabulary.
    rank        one rank of a run: the body of the actor the driver starts per rank.
    train       the measurement loop: build, warm up, time N optimizer steps, records.
    strategies  DDP and ZeRO behind one interface; ``make_strategy`` builds the catalog's.
    compression DDP's gradient compression: PowerSGD's settings and split, the warmup rule; pure.
    optimizer   the optimizer a run steps, as Hugging Face Trainer builds it, and its name.
    compiling   torch.compile as people apply it per strategy, and what it did.
    fsdp        FSDP2 and HSDP behind the same interface.
    collectives one collective recorder for every strategy; the accumulation probe.
    model       gpt2 configs with random init.
    data        training data and tokenizer, with honest fall-backs.
    device      the rank's device, and waiting for it before a clock is read.
    phases      a stopwatch for the phases of a run on one rank.
    clocks      this rank's clock offset to rank 0's, measured over the run's process group.
    diag        hang diagnosis: stacks and NCCL's flight recorder.
    nccl_files  the files NCCL leaves on a rank's node, read and removed.
    ds_effective the DeepSpeed config a ZeRO engine actually parsed.
    ds_comms    DeepSpeed's comms logger for the profiled pass, and its format.
    aio_check   what NVMe offload needs on a node: DeepSpeed's async_io op.
    linkbench   the collective microbenchmark: how fast is the link.
    telemetry   GPU telemetry sampled while steps run.
    throttle    which NVML clock-event reasons a run records, and which exclude it; pure.
    probe       the per-node probe: topology, NVML, torch's CUDA view.
    gpu_doctor  which NVML inventory readings make link results suspect; pure.
    linkcheck   one rank of the emulated cluster's link check.
    fleet_probe the fleet check's worker side: health, compute probe, one all_reduce rank.
    fleet_contract what crosses Ray in a fleet check.
    launcher    the per-node launcher actor and its fork server.
    forkserver_preload what the fork server imports once, before forking ranks.
    forkserver_lazy what a run would import lazily, skipped quietly where it fails.
    cpu_policy  scheduling policy of the processes around the ranks.

May import: nothing (the standard library only).
"""
