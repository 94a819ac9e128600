"""A stopwatch for the phases of a run on one rank (``contract.PHASES``).

May import: contract.
contract; the rank and the training loop time themselves with it."""

from __future__ import annotations

import time
from contextlib import contextmanager

from workloads.contract import PHASES, PhaseTiming


class PhaseClock:
    """Accumulates seconds per phase; a phase timed twice adds up."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, phase: str, seconds: float) -> None:
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; phases are {PHASES}")
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    @contextmanager
    def phase(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def records(self) -> tuple[PhaseTiming, ...]:
        return tuple(PhaseTiming(p, s) for p, s in self.seconds.items())
