"""Live sweep and fleet metrics for Prometheus (through Ray's metrics).

One module per job:
    sweep_metrics the ``--metrics`` options, their checks, the observer ``run`` and ``fleet`` get.

May import: nothing (the standard library only).
"""
