"""linksweep orchestrator: the driver side (CLI, sweep spec, planner, Ray scheduling, store, analysis).

Glossary (used the same way everywhere in code, tables and docs):

sweep      one sweep file submitted once; a row in ``sweeps``.
variant    one point of the sweep's grid: strategy x offload x grad_accum x bucket_mb x link x placement.
run        one variant x one repeat: fresh Ray actors, one process group, warmup then timed steps.
repeat     the 1-based index of a run among its variant's runs.
step       one optimizer step (= grad_accum micro-steps); "timed step" excludes warmup.
link       a named connectivity variant: environment variables set on every rank before start
           (e.g. NCCL_P2P_DISABLE=1), because NCCL and gloo read them once per process.
transport  what the communication library really used (P2P, SHM, NET/Socket, gloo/tcp).
placement  pack: all ranks on one node (STRICT_PACK); spread: one rank per node (STRICT_SPREAD).
"""

__version__ = "0.1.0"
