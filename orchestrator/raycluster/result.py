"""What one run produced, as the driver holds it between ``runs.execute_run`` and ``rows``.

Pure (no Ray): ``orchestrator/sweep/rows.py`` and the unit tests build a :class:`RunResult` by hand.

May import: orchestrator.sweep.planner, workloads.contract.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.sweep.planner import RankPlacement
from workloads.contract import RankDiagnostic, RankRecord


@dataclass
class RunResult:
    """What one run produced: per-rank records, or a failure. Filled even on failure."""

    rank_records: list[RankRecord] = field(default_factory=list)
    placements: list[RankPlacement] = field(default_factory=list)
    error: str | None = None
    actors_created_wall_s: float | None = None
    driver_phases: dict[str, float] = field(default_factory=dict)
    """Seconds of the phases the driver times (placement, teardown; ``contract.PHASES``)."""
    launcher: str = "actors"
    """How the ranks started: ``actors`` (fresh Ray actors) or ``fork`` (per-node fork server)."""
    diagnostics: list[RankDiagnostic] = field(default_factory=list)
    """Each rank's stack (and NCCL trace) when the run hit run_timeout_s."""
    nccl_logs: dict[str, str] = field(default_factory=dict)
    """NCCL logs found on the run's nodes after it ended, ``"host:/tmp/path" -> text``: those
    of a failed or hung run (no rank returned its log), or of any process that was not a rank."""
    cleanup_errors: list[str] = field(default_factory=list)
    """Files of the run that could not be read or removed after it (``runs.collect_leftovers``)."""
