"""linksweep's driver side: everything that runs on the machine that submits a sweep.

One package per concept: ``commands/`` (one module per CLI command), ``sweep/`` (spec, planner,
the loop, a sweep's life), ``raycluster/`` (the one Ray package), ``store/`` (the results
database), ``analysis/`` (statistics and models), ``topology/`` (nodes, links, NCCL's
transports), ``fleet/``, ``compare/``, ``selftest/``, ``report/`` and ``emulated/`` (the emulated
cluster). What a strategy or an axis is: ``workloads/catalog.py``, read by every package here.
The data's path and the module map: docs/layout.md. The vocabulary (sweep, variant, run, repeat,
step, link, transport, placement) is defined once, in ``workloads/contract.py``.

The root keeps what the whole program shares (``__main__``: ``python -m orchestrator``).
One module per job:
    cli         the command line: the parser built from ``commands/``, and dispatch.
    cli_help    the help texts: the workflow, the views, the exit codes; pure data.
    errors      exit codes, the one error printer, the text a failed run stores.
    ui          live progress and end-of-sweep tables; shows only what it is told.
    provenance  where a result came from: git, versions, environment, one dict each.
    watchdog    a dead driver leaves no embedded Ray behind.
    daemons     the embedded cluster's daemons yield the CPU to the ranks.

May import: nothing (the standard library only).
"""

__version__ = "0.1.0"
