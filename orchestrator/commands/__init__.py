"""The command line's commands, one module per command.

Each module defines ``add_parser(sub)``, its arguments (defined once, here and nowhere else), and
``main(args) -> int``, the command itself, returning an exit code of ``orchestrator.errors``.
``orchestrator/cli.py`` builds the parser from them and dispatches; ``python -m
orchestrator.emulated`` reuses ``cluster``'s arguments.

One module per job (a command's module is named for it; ``import`` is ``importing``):
    run         ``linksweep run``: every variant of a sweep file, then its tables and headline.
    linkbench   ``linksweep linkbench``: only the link microbenchmark of a sweep file.
    query       one read-only SQL statement, as a table, CSV or JSON.
    report      one sweep's report.html and figures (or a fleet check's fleet.html).
    project     what unmeasured links would cost, from the link model.
    compare     did a sweep get slower than the baseline, beyond the noise.
    baseline    name a sweep to compare later ones with.
    importing   ``linksweep import nccl-tests``: another tool's link figures as rows.
    export      every table and view, one parquet or CSV file each.
    topo        each node's topology matrix and NVML inventory.
    transports  what NCCL's log says it used.
    doctor      what on the cluster would make links measure something else.
    selftest    the acceptance run for a node.
    fleet       the fleet check: the slow node or pair.
    cluster     the emulated cluster: up, down, status, check.
    observers   who else watches ``run`` and ``fleet``: live metrics, MLflow.
    sweeping    what ``run`` and ``linkbench`` share, before and after the work.
    shared      what several commands do alike: read a named file, join the cluster.
    text        the inspecting commands' plain text; pure.

May import: nothing (the standard library only).
"""
