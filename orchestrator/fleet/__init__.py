"""The fleet check (``linksweep fleet``): find the one slow node or link before it spoils a
sweep. Its Ray side is ``orchestrator/raycluster/pinned_probes.py``; its rank side
``workloads/fleet_probe.py``.

One module per job:
    loop      nodes -> health -> groups -> pairs, round by round -> verdict -> rows -> store.
    groups    which nodes are judged against which (device kind and model); pure.
    pairs     which node pairs are measured, in which rounds; pure.
    suspects  the verdict: which nodes and pairs are suspects, and why; pure.
    tables    measurements and verdict -> rows of the ``fleet_*`` tables; pure.
    summary   a fleet check as terminal text; pure.

May import: nothing.
"""
