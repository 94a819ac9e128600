"""The driver's Ray package: the only place in ``orchestrator/`` that imports ray.

One module per job:
    session    connect (join a cluster, or start the embedded one with its watchdog) and
               disconnect; the embedded cluster's daemons kept under SCHED_IDLE.
    reach      why a cluster cannot be joined, in one line (``ClusterUnreachable``); pure.
    nodes      the cluster's nodes; a function run once on every node; pinned actors; a GCS
               asked before any ``ray.init`` (the emulated cluster coming up).
    runs       one run: placement group, ranks (fresh actors or forked), records, clean-up,
               stacks of a hung run, rank 0's progress.
    launchers  the sweep's per-node launcher actors that fork ranks (``launcher: fork``).
    pinned_probes  the fleet check's Ray side: which nodes, and the probes pinned to them.
    result     ``RunResult``, what a run produced; pure, so rows and unit tests use it.
    slurm      a Slurm allocation from its environment: its nodes, each node's share for
               ``ray start``, the head's address, whether a sweep fits; pure.

Words used here (the measurement's vocabulary is in ``workloads/contract.py``):
    embedded cluster  the single-node Ray cluster ``session.connect`` starts when given no
                      address; stopped by ``disconnect``, reaped by the watchdog after a kill.
    joined cluster    one ``ray start`` made (``--address`` or ``RAY_ADDRESS``); its processes
                      are not ours: never reniced, never stopped.
    node answer       one node's result of ``run_on_every_node``, or why there is none.
    bundle            one rank's share of a node (GPU:1, else CPU:1) in the run's placement
                      group; STRICT_PACK (placement ``pack``) or STRICT_SPREAD (``spread``).
    launcher          a per-node actor whose fork server has done the imports once; it forks a
                      run's ranks on its node.
    progress board    the actor rank 0 reports its step to (fresh actors only).

May import: nothing (the standard library only).
"""
