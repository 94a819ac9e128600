"""What a resumed sweep still has to run, and whether the sweep file still matches. Pure.

A sweep's plan (``planner.plan_runs``) is a function of its spec, so the same spec gives the same
(seq, repeat, variant) list. Resuming runs, in that original interleaved order, only the slots
with no stored run (``--retry-failed``: also those whose stored run failed; that run is kept
and marked superseded by the new attempt, which gets its own run id), as ``planner.RunSlot``s
(a new sweep's: ``planner.fresh_slots``).

May import: planner, orchestrator.analysis.stats.
"""

from __future__ import annotations

from orchestrator.analysis.stats import VARIANT_KEY
from orchestrator.sweep.planner import PlannedRun, RunSlot, run_id_for


def attempt_run_id(sweep_id: str, seq: int, attempt: int) -> str:
    base = run_id_for(sweep_id, seq)
    return base if attempt == 1 else f"{base}-a{attempt}"


class ResumeError(ValueError):
    """The stored sweep cannot be resumed with this file (exit 2, nothing run)."""


def remaining_slots(
    sweep_id: str, planned: list[PlannedRun], stored: list[dict], retry_failed: bool
) -> list[RunSlot]:
    """The slots of ``planned`` still to run, in plan order.

    ``stored``: the sweep's runs (``run_id, seq, repeat, status, attempt, superseded_by`` and the
    variant columns). A stored run whose seq, repeat or variant disagrees with the plan means
    the plan changed: ResumeError.
    """
    by_seq: dict[int, list[dict]] = {}
    for r in stored:
        by_seq.setdefault(int(r["seq"]), []).append(r)
    plan_seqs = {p.seq for p in planned}
    unknown = sorted(set(by_seq) - plan_seqs)
    if unknown:
        raise ResumeError(f"stored runs with seq {unknown} are not in this sweep file's plan")
    out = []
    for p in planned:
        runs = by_seq.get(p.seq, [])
        for r in runs:
            got = tuple(r[k] for k in VARIANT_KEY)
            want = tuple(getattr(p.variant, k) for k in VARIANT_KEY)
            if got != want or int(r["repeat"]) != p.repeat:
                raise ResumeError(
                    f"stored run {r['run_id']} (seq {p.seq}) is {dict(zip(VARIANT_KEY, got, strict=False))} "
                    f"repeat {r['repeat']}, the plan says {p.variant.to_dict()} repeat {p.repeat}"
                )
        current = [r for r in runs if r.get("superseded_by") is None]
        if not runs:
            out.append(RunSlot(p, attempt_run_id(sweep_id, p.seq, 1)))
        elif retry_failed and current and all(r["status"] != "ok" for r in current):
            last = max(current, key=lambda r: int(r["attempt"]))
            attempt = max(int(r["attempt"]) for r in runs) + 1
            out.append(
                RunSlot(p, attempt_run_id(sweep_id, p.seq, attempt), attempt, last["run_id"])
            )
    return out


def spec_differences(stored: dict, current: dict, prefix: str = "") -> list[str]:
    """Dotted names of the fields whose values differ between two spec dicts."""
    out = []
    for key in sorted(set(stored) | set(current), key=str):
        name = f"{prefix}{key}"
        a, b = stored.get(key), current.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out.extend(spec_differences(a, b, name + "."))
        elif a != b:
            out.append(name)
    return out
