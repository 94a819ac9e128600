"""What ``run`` and ``linkbench`` share: the sweep file and the database checked before any
work, an earlier driver's spool committed, the cluster joined with stop signals handled, the
cluster's fit checked, and a named query printed as a table at the end.

May import: shared, orchestrator.sweep.ds_check, orchestrator.errors, orchestrator.sweep.exclusions,
orchestrator.sweep.overrides, orchestrator.sweep.preflight, orchestrator.raycluster.session,
orchestrator.sweep.spec, orchestrator.sweep.stopping, orchestrator.store, orchestrator.ui.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from orchestrator.commands.shared import join_cluster
from orchestrator.errors import EXIT_BAD_INPUT, err

if TYPE_CHECKING:
    from orchestrator.store import SweepStore, TableStore


def add_set_argument(parser) -> None:
    """``--set KEY=VALUE`` (repeatable): what ``run`` and ``linkbench`` override in the file."""
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key of the sweep file, VALUE read as YAML, KEY dotted for nested keys "
        "(e.g. --set ranks_per_gpu=2 --set steps=20 --set 'grid.strategy=[ddp]'); repeatable; "
        "the sweep is stored as overridden; default: none",
    )


def load_checked(sweep_path: str, db: str, deepspeed: bool, overrides: Sequence[str] = ()):
    """The sweep file's spec with ``overrides`` (``--set KEY=VALUE``) set, checked (with
    ``deepspeed``: its ZeRO configs by DeepSpeed's own models; inside a Slurm job, against the
    allocation's node count), and the database checked writable; None after saying why (the
    caller exits 2)."""
    from orchestrator.store import StoreError, check_writable
    from orchestrator.sweep.overrides import describe
    from orchestrator.sweep.spec import SpecError, deepspeed_runs, load_spec

    try:
        spec = load_spec(sweep_path, overrides)
        if "SLURM_JOB_ID" in os.environ:  # preflight imports Ray: only inside a Slurm job
            from orchestrator.sweep.preflight import allocation_errors

            if problems := allocation_errors(spec, os.environ):  # before Ray starts or joins
                raise SpecError(problems, sweep_path)
        if overrides:
            print(f"linksweep: {sweep_path} with {describe(overrides)}", file=sys.stderr)
        for note in spec.notes:  # a renamed key, read under its new name
            print(f"linksweep: {sweep_path}: {note}", file=sys.stderr)
        if deepspeed and deepspeed_runs(spec):
            from orchestrator.sweep.ds_check import check_deepspeed

            if problems := check_deepspeed(spec):  # DeepSpeed's own models, before any work
                raise SpecError(problems, sweep_path)
        check_writable(db)
    except (SpecError, StoreError) as exc:
        err(str(exc))
        return None
    return spec


def open_store(db: str) -> SweepStore | None:
    """The driver's database handle (``LiveStore``), after committing what an earlier driver
    left spooled and marking its sweep interrupted; None after saying why."""
    from orchestrator.store import StoreError
    from orchestrator.store.live import LiveStore

    store = LiveStore(db)
    try:
        store.recover()
    except StoreError as exc:
        err(str(exc))
        return None
    return store


def on_cluster(
    spec,
    address: str | None,
    resume_hint: str,
    body: Callable[[str, dict, list[dict]], int],
    exclude: Sequence[tuple[str, str]] = (),
) -> int:
    """Join the cluster, resolve the nodes to keep off (the spec's ``exclude_nodes`` and
    ``exclude``, e.g. a fleet check's suspects: ``exclusions``), check the sweep fits the nodes
    left (``preflight``: each rank's bundle), then ``body(address label, bundle, excluded)``
    with stop signals turned into ``SweepStopped``; always leave the cluster.

    Exit 2 when the cluster cannot be joined or the sweep does not fit; 130/143/129 on SIGINT,
    SIGTERM, SIGHUP (finished runs are stored; ``resume_hint`` says how to go on)."""
    from orchestrator.raycluster import session
    from orchestrator.sweep import preflight, stopping
    from orchestrator.sweep.exclusions import exclusion_notes
    from orchestrator.sweep.spec import SpecError

    label = join_cluster(address)
    if label is None:
        return EXIT_BAD_INPUT
    restore_signals = stopping.install()  # after ray.init, which sets its own SIGTERM handler
    try:
        if label == "embedded":
            print(
                "Ray: embedded single-node cluster on this machine (no --address, no "
                "RAY_ADDRESS); every link variant shares this machine's loopback",
                file=sys.stderr,
            )
        try:
            excluded = preflight.resolve_cluster_exclusions(spec, exclude)
            preflight.preflight(spec, excluded)  # only the nodes ranks may run on are asked
            for note in exclusion_notes(excluded):
                print(f"linksweep: {note}", file=sys.stderr)
            bundle = preflight.check_cluster(spec, excluded)
        except SpecError as exc:
            err(str(exc))
            return EXIT_BAD_INPUT
        return body(label, bundle, excluded)
    except KeyboardInterrupt as exc:  # stopping.SweepStopped: SIGINT, SIGTERM, SIGHUP
        err(f"{stopping.describe(exc)}; finished runs are stored ({resume_hint})")
        return stopping.exit_code(exc)
    finally:
        session.disconnect()
        restore_signals()


def print_query_table(
    store: TableStore, query, sweep_id: str, title: str, if_empty: bool = True
) -> None:
    """A named query's rows for one sweep, as an aligned table on stdout."""
    from orchestrator.ui import print_table

    cols, rows = store.table(query, sweep_id=sweep_id)
    if rows or if_empty:
        print_table(cols, rows, title=title, digits=4)
