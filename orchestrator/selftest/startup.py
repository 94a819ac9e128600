"""Each launcher's start-up per run, from what the selftest's runs stored: the one-rank run and
the two ranks (sharing a GPU, on GPU nodes) went once per launcher (``plan.sweep_specs``), and
here their start-up is read back, phase by phase, for the table the command prints
(``startup.csv``) and the launcher checks' details (``verdicts``).

A run's start-up is what its stored phases say comes before its first (warmup) step, compile
left out (:data:`START_UP_PHASES`), each phase the slowest rank's: the same phases the report's
bar shows (``workloads.contract.PHASES``). ``facts`` is a ``verdicts.Facts``.

May import: plan, workloads.contract.
"""

from __future__ import annotations

from orchestrator.selftest.plan import SelftestPlan, sweep_name
from workloads.contract import PHASES

START_UP_PHASES = tuple(p for p in PHASES[: PHASES.index("warmup")] if p != "compile")
"""A run's start-up, phase by phase: from the placement group's reservation to the strategy's
set-up; compile is the model's first steps, not the launcher's."""
START_UP_SQL = f"""
SELECT s.name AS sweep, r.run_id, r.launcher, r.status, ph.phase, max(ph.seconds) AS s
FROM run_phases ph JOIN runs r USING (run_id) JOIN sweeps s USING (sweep_id)
WHERE ph.phase IN ({", ".join(f"'{p}'" for p in START_UP_PHASES)})
GROUP BY ALL ORDER BY s.name, r.run_id, ph.phase
"""
"""Every run's start-up phases, each the slowest rank's (the selftest's own database holds only
its sweeps: no parameter)."""


def start_up_s(facts, run_id: str) -> float | None:
    """A run's start-up: the sum of its :data:`START_UP_PHASES`; None when none was stored."""
    got = [
        r["s"]
        for r in facts.start_up
        if r["run_id"] == run_id and r["phase"] in START_UP_PHASES and r["s"] is not None
    ]
    return sum(got) if got else None


def _median(values: list[float]) -> float | None:
    values = sorted(values)
    n = len(values)
    return (
        None if not n else (values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2)
    )


START_UP_SWEEPS = {
    "one_rank": "one rank",
    "one_rank_alt": "one rank",
    "two_rank": "two ranks",
    "two_rank_fork": "two ranks",
}
"""The sweeps each launcher's start-up is compared on, by what they start."""
START_UP_COLUMNS = ("ranks", "launcher", "sweep", "runs", "median_s", "max_s",
                    *START_UP_PHASES)  # fmt: skip


def start_up_table(facts, plan: SelftestPlan) -> list[tuple]:
    """Per compared sweep (:data:`START_UP_SWEEPS`): what it starts (``two ranks, one GPU``
    where they share it), its launcher, its ok runs' count, median and slowest start-up, and
    each start-up phase's median (``None``: a phase the runs did not have, cuda_init on CPU).
    Pure."""
    rows = []
    for key, ranks in START_UP_SWEEPS.items():
        sweep = facts.sweeps.get(key)
        if sweep is None or key not in plan.sweeps:
            continue
        spec = plan.sweeps[key]
        ranks += ", one GPU" if spec.get("ranks_per_gpu") == 2 else ""
        ok = [r["run_id"] for r in sweep.runs if r["status"] == "ok"]
        totals = [t for t in (start_up_s(facts, run_id) for run_id in ok) if t is not None]
        phases = [
            _median([r["s"] for r in facts.start_up if r["run_id"] in ok and r["phase"] == p])
            for p in START_UP_PHASES
        ]
        launcher = next((r["launcher"] for r in sweep.runs), spec.get("launcher"))
        rows.append((ranks, launcher, sweep_name(key), len(totals), _median(totals),
                     max(totals, default=None), *phases))  # fmt: skip
    return rows


def start_up_text(facts, plan: SelftestPlan, keys: tuple[str, ...]) -> str:
    """``LAUNCHER start-up MEDIAN s/run`` per sweep of ``keys`` that ran, for a check's detail."""
    parts = []
    for row in start_up_table(facts, plan):
        if row[2] in {sweep_name(k) for k in keys} and row[4] is not None:
            parts.append(f"{row[1]} start-up {row[4]:.1f} s/run")
    return ", ".join(parts)
