"""The driver's database handle during a sweep: the database is open only while it is used.

:class:`LiveStore` has :class:`Store`'s API (``transaction``, ``insert``, ``update``, ``delete``,
``rows``, ``table``), but opens the database for each call or transaction and closes it right
after, so ``linksweep query``, ``report`` and ``export`` work while a sweep runs. A finished run
goes through :meth:`LiveStore.commit_run`: spooled durably first (``spool.py``), then
``Store.commit_spooled`` commits every spooled run. If someone else holds the database, opening
is retried with backoff and the driver says so; a run still spooled when the wait ends stays
spooled, and the next commit (the next run's, ``recover`` at the next sweep's start, or a
reading command's ``bring_up_to_date``) commits it. Nothing is lost and nothing fails the sweep.

May import: db, liveness, queries, spool.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from orchestrator.store import liveness, spool
from orchestrator.store.db import Store, StoreLocked
from orchestrator.store.queries import Query

LOCK_WAIT_S = 120.0
"""How long one commit waits for a database someone else holds (then the run stays spooled);
``LINKSWEEP_LOCK_WAIT_S`` overrides it."""


def _say(msg: str) -> None:
    print(f"linksweep: {msg}", file=sys.stderr, flush=True)


class LiveStore:
    def __init__(self, path: str, lock_wait_s: float | None = None, say: Callable = _say):
        self.path = path
        if lock_wait_s is None:
            lock_wait_s = float(os.environ.get("LINKSWEEP_LOCK_WAIT_S", LOCK_WAIT_S))
        self.lock_wait_s = lock_wait_s
        self.say = say
        self._open_store: Store | None = None
        self._lock = threading.RLock()  # the heartbeat thread opens the database too
        self.on_commit: Callable[[], None] | None = None  # a test hook: called before COMMIT

    def _waiting(self, what: str, wait_s: float) -> Callable[[float], None]:
        told = [-1.0]
        first = min(1.0, wait_s / 2)  # a moment's overlap with a reader is not worth a word

        def on_wait(waited: float) -> None:
            if waited >= first and (told[0] < 0 or waited - told[0] >= 10.0):
                told[0] = waited
                self.say(
                    f"{self.path} is held by another process; retrying ({what}, "
                    f"waited {waited:.0f} s of {wait_s:.0f} s)"
                )

        return on_wait

    @contextmanager
    def open(self, what: str = "store", wait_s: float | None = None) -> Iterator[Store]:
        """The database, open for writing for the block; then closed."""
        with self._lock:
            if self._open_store is not None:
                yield self._open_store
                return
            wait = self.lock_wait_s if wait_s is None else wait_s
            on_wait = None if what == "heartbeat" else self._waiting(what, wait)
            store = Store(self.path, wait_s=wait, on_wait=on_wait)
            self._open_store = store
            try:
                yield store
            finally:
                self._open_store = None
                store.close()

    @contextmanager
    def transaction(self) -> Iterator[LiveStore]:
        with self.open("transaction") as store, store.transaction():
            yield self

    def insert(self, table: str, rows) -> None:
        with self.open("insert") as store:
            store.insert(table, rows)

    def update(self, table: str, key: dict[str, Any], values: dict[str, Any]) -> None:
        with self.open("update") as store:
            store.update(table, key, values)

    def delete(self, table: str, where: dict[str, Any]) -> None:
        with self.open("delete") as store:
            store.delete(table, where)

    def rows(self, query: Query, **params: Any) -> list[dict[str, Any]]:
        with self.open("read") as store:
            return store.rows(query, **params)

    def table(self, query: Query, **params: Any):
        with self.open("read") as store:
            return store.table(query, **params)

    def commit_run(self, payload: spool.Payload) -> bool:
        """Spool the run durably, then commit it. False: the database stayed busy, the run is
        still spooled and the next open for writing commits it."""
        path = spool.write(self.path, payload)
        if self.on_commit is not None:
            self.on_commit()
        try:
            with self.open(f"commit of run {payload.run_id}") as store:
                store.commit_spooled(just_spooled=payload)  # and any a busy commit left
        except StoreLocked:
            self.say(
                f"run {payload.run_id} kept in {path}: the database stayed busy; it is "
                "committed by the next command that opens the database for writing"
            )
            return False
        return True

    def recover(self) -> None:
        """Before a sweep starts or resumes: commit what an earlier driver left spooled and mark
        sweeps whose driver is gone ``interrupted`` (a resume then finds its sweep stopped).
        Nothing to recover, no file: the database is not created here (bad input found later
        must leave nothing behind)."""
        if not os.path.exists(self.path) and not spool.pending(self.path):
            return
        with self.open("recovery") as store:
            store.commit_spooled()
            store.mark_interrupted()

    def heartbeat(
        self, row_id: str, every_s: float = liveness.HEARTBEAT_S, table: str = "sweeps"
    ) -> Heartbeat:
        """A sweep's heartbeat; with ``table="fleet_checks"``, a fleet check's (``liveness.DRIVER_TABLES``)."""
        return Heartbeat(self, row_id, every_s, table)


class Heartbeat:
    """Every ``every_s``, the row's ``heartbeat_at`` = now (skipped while the database is
    busy: a missed beat costs nothing, the rule allows many). ``stop()`` ends it."""

    def __init__(self, store: LiveStore, row_id: str, every_s: float, table: str = "sweeps"):
        self.store, self.row_id, self.every_s = store, row_id, every_s
        self.table, self.key = table, liveness.DRIVER_TABLES[table].key
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="linksweep-heartbeat", daemon=True)
        self._thread.start()

    def beat(self) -> None:
        values = {"heartbeat_at": dt.datetime.now(dt.timezone.utc), "driver_pid": os.getpid()}
        try:
            with self.store.open("heartbeat", wait_s=1.0) as s:
                s.update(self.table, {self.key: self.row_id}, values)
        except StoreLocked:
            pass

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.beat()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
