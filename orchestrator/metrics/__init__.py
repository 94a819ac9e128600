"""Live sweep and fleet metrics for Prometheus (through Ray's metrics): docs/metrics.md.

One module per job:
    progress      pure: every metric declared once (name, unit, meaning, labels) and the values
                  a sweep's or a fleet check's progress callbacks give them (counts, step
                  times, slowdowns, the time-left estimate, the heartbeat).
    sweep_metrics the ``--metrics`` option of ``run`` and ``fleet``, its check, and the observer
                  that sets the values on Ray gauges (``raycluster.session.gauge``).

May import: nothing (the standard library only).
"""
