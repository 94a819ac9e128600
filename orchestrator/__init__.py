"""linksweep's driver side: everything that runs on the machine that submits a sweep.

CLI (``cli``), sweep spec (``spec``), planning (``planner``), the one Ray package
(``raycluster/``), the sweep loop (``sweep``), result -> rows (``rows``), statistics (``stats``),
the communication model (``comm_model``), the results database (``store/``), the report
(``report/``), the emulated cluster (``emulated/``), topology and NCCL-log parsing (``topo``,
``discovery``, ``nccl_log``). The data's path and the module map: docs/layout.md. The
vocabulary (sweep, variant, run, repeat, step, link, transport, placement) is defined once,
in ``workloads/contract.py``.

May import: nothing (the standard library only).
"""

__version__ = "0.1.0"
