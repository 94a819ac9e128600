"""Live progress and end-of-sweep tables (rich). No logic: it only shows what it is told.

May import: numpy, rich.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Sequence

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table


class SweepUI:
    """Runs done/total, the current variant and the current step of rank 0. Each callback is
    then passed on to every observer that has it (``orchestrator.commands.observers``)."""

    def __init__(self, console: Console | None = None, observers: Sequence = ()):
        self.console = console or Console(stderr=True)
        self.observers = list(observers)
        self.live = self.console.is_terminal
        self.progress: Progress | None = None
        self.task = None
        self.current = ""
        self.failed = 0

    def _tell(self, callback: str, *args) -> None:
        for observer in self.observers:
            if hasattr(observer, callback):
                getattr(observer, callback)(*args)

    def sweep_started(self, spec, sweep_id: str, n_runs: int) -> None:
        self.console.print(f"sweep [bold]{spec.name}[/] id {sweep_id}: {n_runs} runs")
        if self.live:
            self.progress = Progress(
                TextColumn("[bold]runs"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=self.console,
            )
            self.progress.start()
            self.task = self.progress.add_task("", total=n_runs)
        self._tell("sweep_started", spec, sweep_id, n_runs)

    def run_started(self, planned, run_id: str) -> None:
        self.current = f"#{planned.seq} {planned.variant.label} repeat {planned.repeat}"
        if self.progress is not None:
            self.progress.update(self.task, description=self.current)
        else:
            self.console.print(f"run {self.current} ...")
        self._tell("run_started", planned, run_id)

    def linkbench_started(self, link: str, placement: str) -> None:
        self.current = f"link microbenchmark link={link} {placement}"
        if self.progress is not None:
            self.progress.update(self.task, description=self.current)
        else:
            self.console.print(f"{self.current} ...")
        self._tell("linkbench_started", link, placement)

    def linkbench_finished(self, link: str, placement: str, error: str | None) -> None:
        first = (error or "").strip().splitlines()[:1]
        msg = "ok" if error is None else f"[red]FAILED[/]: {first[0] if first else ''}"
        self.console.print(f"link microbenchmark link={link} {placement}: {msg}")
        self._tell("linkbench_finished", link, placement, error)

    def tick(self, state: dict) -> None:
        """Rank 0's progress (``state`` is empty between its reports): the sweep's heartbeat."""
        self._tell("tick", state)
        if not state or self.progress is None:
            return
        phase = "warmup" if state.get("warmup") else "step"
        self.progress.update(
            self.task, description=f"{self.current}  {phase} {state['step']}/{state['total']}"
        )

    def run_finished(self, planned, run: dict) -> None:
        ok = run["status"] == "ok"
        self.failed += 0 if ok else 1
        if self.progress is not None:
            self.progress.advance(self.task)
        first_line = (run.get("error") or "").strip().splitlines()[:1]
        msg = "ok" if ok else f"[red]FAILED[/]: {first_line[0] if first_line else ''}"
        self.console.print(f"run #{planned.seq} {planned.variant.label} r{planned.repeat}: {msg}")
        self._tell("run_finished", planned, run)

    def sweep_finished(self, sweep_id: str, status: str) -> None:
        if self.progress is not None:
            self.progress.stop()
        self.console.print(f"sweep {sweep_id} {status}; {self.failed} run(s) failed")
        self._tell("sweep_finished", sweep_id, status)


def print_table(
    cols: list[str], rows: list[tuple], title: str | None = None, file=None, digits=None
) -> None:
    """A plain aligned table: numbers never in e-notation, never cut or wrapped, right-aligned;
    a line is as long as its widest cell needs. ``digits``: significant digits of floats (None:
    every digit, as ``linksweep query`` prints them). ``--format csv`` for machines."""
    out = file or sys.stdout
    for line in format_table(cols, rows, title, digits):
        print(line, file=out)


def write_csv(cols: list[str], rows: list[tuple], file=None) -> None:
    """CSV with lines ending in ``\n``, as the duckdb CLI and psql write it (Python's csv ends
    them with ``\r\n``, so a shell comparison of the last field would see ``0\r``)."""
    w = csv.writer(file or sys.stdout, lineterminator="\n")
    w.writerow(cols)
    w.writerows(rows)


def format_table(
    cols: list[str], rows: list[tuple], title: str | None = None, digits: int | None = None
) -> list[str]:
    cells = [[fmt_cell(v, digits) for v in r] for r in rows]
    numeric = [
        bool(rows) and all(r[i] is None or _is_number(r[i]) for r in rows) for i in range(len(cols))
    ]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(cols)]

    def line(values: list[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    out = [title] if title else []
    out.append(line(list(cols)))
    out.append("  ".join("-" * w for w in widths))
    out += [line(r) for r in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return out


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def fmt_cell(v, digits: int | None = None) -> str:
    """A value as text: floats positional, never 1.353e+07; without ``digits`` the shortest text
    that reads back as the same float (13530000, 0.0000012), with it that many significant
    digits (0.2348, 13530000); None as empty."""
    if v is None:
        return ""
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return str(v)
        if digits is None:
            return np.format_float_positional(v, unique=True, trim="-")
        return np.format_float_positional(
            v, precision=digits, unique=True, fractional=False, trim="-"
        )
    return str(v)


def print_headline(headline, file=None) -> None:
    """The headline (orchestrator/analysis/headline.py): per link, its sentences (one line each, never
    wrapped mid-number) and the compact table strategy x grad_accum -> slowdown [interval];
    then the notes."""
    if headline.empty:
        return
    out = file or sys.stdout
    console = Console(file=out, width=120, highlight=False)
    print("\nHeadline", file=out)
    for h in headline.links:
        for s in h.sentences:
            print(s, file=out)
        table = Table(
            title=escape(f"slowdown on {h.link} ÷ {h.baseline} [{h.interval_label}]"),
            title_justify="left",
        )
        table.add_column("strategy")
        for ga in h.grad_accums:
            table.add_column(f"grad_accum {ga}", justify="right", no_wrap=True)
        for series, per in h.cells.items():
            table.add_row(series, *(per[ga].text() if ga in per else "–" for ga in h.grad_accums))
        console.print(table)
    for note in headline.notes:
        print(note, file=out)
