"""linksweep's driver side: everything that runs on the machine that submits a sweep.

One package per concept: ``commands/`` (one module per CLI command), ``sweep/`` (spec, planner,
the loop, a sweep's life), ``raycluster/`` (the one Ray package), ``store/`` (the results
database), ``analysis/`` (statistics and models), ``topology/`` (nodes, links, NCCL's
transports), ``fleet/``, ``compare/``, ``selftest/``, ``report/`` and ``emulated/`` (the emulated
cluster). The root keeps what the whole program shares: the CLI entry (``cli``, ``cli_help``),
``errors``, ``ui``, ``provenance``, and the embedded cluster's ``watchdog`` and ``daemons``. The
data's path and the module map: docs/layout.md. The vocabulary (sweep, variant, run, repeat,
step, link, transport, placement) is defined once, in ``workloads/contract.py``.

May import: nothing (the standard library only).
"""

__version__ = "0.1.0"
