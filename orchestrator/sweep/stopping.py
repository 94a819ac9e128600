"""Stopping a sweep cleanly on SIGINT (Ctrl-C), SIGTERM (``ray job stop``, batch schedulers)
and SIGHUP (a closed terminal).

:func:`install` (called after ``ray.init``, which installs its own SIGTERM handler that exits 1)
makes each of these signals raise :class:`SweepStopped` in the main thread: the current run's
``finally`` blocks kill its actors and placement group and remove its NVMe folder, the sweep is
marked ``interrupted``, and the command exits ``128 + signal`` (130, 143, 129). A signal that
arrives inside :func:`critical` (a commit) is held until the block ends, so a run is either
stored whole or not at all. Repeated signals while stopping are ignored (the stop is bounded).

No Ray, no database: plain ``signal``.

May import: nothing (the standard library only).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class SweepStopped(KeyboardInterrupt):
    """A stop signal arrived; ``exit_code`` is 128 + the signal number."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum
        self.exit_code = 128 + signum


_state = {"critical": 0, "pending": None, "stopping": False, "signum": None}


def _handler(signum: int, frame) -> None:
    if _state["stopping"]:
        return
    _state["signum"] = signum  # Ray re-raises ours as a plain KeyboardInterrupt inside get/wait
    if _state["critical"]:
        _state["pending"] = signum
        return
    _state["stopping"] = True
    raise SweepStopped(signum)


def install() -> Callable[[], None]:
    """Route SIGINT, SIGTERM and SIGHUP to :class:`SweepStopped`; returns a function that puts
    the previous handlers back. Outside the main thread (where Python allows no handlers)
    nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    _state.update(critical=0, pending=None, stopping=False, signum=None)
    previous = {sig: signal.signal(sig, _handler) for sig in SIGNALS}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


def stopping_for() -> int | None:
    """The signal a stop is under way for, None when none is. A signal that arrives while
    DuckDB runs a query reaches the handler from inside the query, and DuckDB turns the
    :class:`SweepStopped` it raises into its own ``RuntimeError: Query interrupted``: the caller
    asks here to tell that error from any other."""
    return _state["signum"] if _state["stopping"] else None


def received(exc: BaseException) -> int:
    """The signal that stopped the sweep: ``exc``'s, else the last one the handler saw (Ray
    turns any KeyboardInterrupt raised inside ``ray.get``/``ray.wait`` into a plain one), else
    SIGINT (a KeyboardInterrupt before :func:`install`)."""
    if isinstance(exc, SweepStopped):
        return exc.signum
    return _state["signum"] or signal.SIGINT


def exit_code(exc: BaseException) -> int:
    """128 + the signal: 130 (SIGINT), 143 (SIGTERM), 129 (SIGHUP)."""
    return 128 + received(exc)


def describe(exc: BaseException) -> str:
    return f"stopped by {signal.Signals(received(exc)).name}"


@contextmanager
def critical() -> Iterator[None]:
    """Hold stop signals for the block; one that arrived is raised when it ends."""
    _state["critical"] += 1
    try:
        yield
    finally:
        _state["critical"] -= 1
        pending = _state["pending"]
        if not _state["critical"] and pending is not None and not _state["stopping"]:
            _state["pending"] = None
            _state["stopping"] = True
            raise SweepStopped(pending)
