"""Live progress and end-of-sweep tables (rich). No logic: it only shows what it is told."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table


class SweepUI:
    """Runs done/total, the current variant and the current step of rank 0."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.live = self.console.is_terminal
        self.progress: Progress | None = None
        self.task = None
        self.current = ""
        self.failed = 0

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

    def run_started(self, planned, run_id: str) -> None:
        self.current = f"#{planned.seq} {planned.variant.label} repeat {planned.repeat}"
        if self.progress is not None:
            self.progress.update(self.task, description=self.current)
        else:
            self.console.print(f"run {self.current} ...")

    def linkbench_started(self, link: str, placement: str) -> None:
        self.current = f"link microbenchmark link={link} {placement}"
        if self.progress is not None:
            self.progress.update(self.task, description=self.current)
        else:
            self.console.print(f"{self.current} ...")

    def linkbench_finished(self, link: str, placement: str, error: str | None) -> None:
        first = (error or "").strip().splitlines()[:1]
        msg = "ok" if error is None else f"[red]FAILED[/]: {first[0] if first else ''}"
        self.console.print(f"link microbenchmark link={link} {placement}: {msg}")

    def tick(self, state: dict) -> None:
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

    def sweep_finished(self, sweep_id: str, status: str) -> None:
        if self.progress is not None:
            self.progress.stop()
        self.console.print(f"sweep {sweep_id} {status}; {self.failed} run(s) failed")


def print_table(cols: list[str], rows: list[tuple], title: str | None = None, file=None) -> None:
    console = Console(file=file or sys.stdout, width=200)
    table = Table(title=title)
    for c in cols:
        table.add_column(c, overflow="fold")
    for r in rows:
        table.add_row(*(_fmt(v) for v in r))
    console.print(table)


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
