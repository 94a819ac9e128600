"""Code that runs in the rank processes Ray starts: gpt2 training (DDP, ZeRO), the link
microbenchmark, NVML telemetry, the per-node probe, the emulated cluster's link check.

What crosses the Ray boundary is defined once, in ``contract.py``: a rank is given a
``RunConfig`` (or ``LinkbenchConfig``) and returns a ``RankRecord``. Nothing here imports
``orchestrator`` (the driver), the store or Ray scheduling; the driver imports this package's
contract and hands its functions to Ray.

May import: nothing (the standard library only).
"""
