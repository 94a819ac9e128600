"""What several commands do alike: read a file named on the command line, join the cluster
(inside a Slurm job, saying which allocated nodes the cluster has).

May import: orchestrator.errors, orchestrator.raycluster.nodes, orchestrator.raycluster.reach,
orchestrator.raycluster.session, orchestrator.raycluster.slurm, orchestrator.store.
"""

from __future__ import annotations

import os

from orchestrator.errors import err


def read_text(path: str, what: str) -> str | None:
    """The file's text, or None after saying on stderr why it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        err(f"{what} {path}: no such file")
    except IsADirectoryError:
        err(f"{what} {path}: is a directory, expected a text file")
    except OSError as exc:
        err(f"{what} {path}: cannot read: {exc.strerror or exc}")
    return None


def ready_to_read(db: str) -> bool:
    """The database named by ``--db`` exists and is brought up to date (``bring_up_to_date``:
    the one write a reading command makes, before it reads); False after saying why."""
    from orchestrator.store import StoreError, bring_up_to_date

    if not os.path.exists(db):
        err(f"--db {db} does not exist; run a sweep first (linksweep run SWEEP.yaml --db {db})")
        return False
    try:
        bring_up_to_date(db)
    except StoreError as exc:
        err(str(exc))
        return False
    return True


def join_cluster(address: str | None) -> str | None:
    """Connect to the Ray cluster (embedded when no address and no RAY_ADDRESS) and return its
    label; None after saying on stderr, in one line, why it cannot be joined (exit 2). Inside a
    Slurm job, one line on stderr names the allocated nodes and the Ray nodes joined."""
    from orchestrator.raycluster.reach import ClusterUnreachable
    from orchestrator.raycluster.session import connect

    try:
        label = connect(address)
    except ClusterUnreachable as exc:
        err(str(exc))
        return None
    if line := slurm_line(os.environ, label == "embedded"):
        err(line)
    return label


def slurm_line(env, embedded: bool) -> str | None:
    """Inside a Slurm job, the allocation's nodes beside the nodes of the Ray cluster joined
    (``raycluster.slurm.describe``); None outside one. Assumes a Ray connection."""
    from orchestrator.raycluster import slurm

    try:
        alloc = slurm.allocation_from_env(env)
    except slurm.SlurmEnvError as exc:
        return f"inside a Slurm job whose nodes cannot be read: {exc}"
    if alloc is None:
        return None
    from orchestrator.raycluster.nodes import alive_nodes

    return slurm.describe(alloc, alive_nodes(), embedded)
