"""The accumulation check, in words: which runs failed it, and what they sent. Pure.

Every run stores ``runs.accum_check`` (``ok`` | ``fail: <op> sent X B, promised Y B; ...`` |
``n/a: ...`` | ``unchecked: ...``, from ``orchestrator.analysis.comm_model.accumulation_verdict``):
did the non-final micro-batches of an accumulation window send what the strategy and its
``grad_sync`` promise (DDP ``last`` nothing, ``each`` an all-reduce of every gradient; FSDP2 what
``fsdp_theory`` says)? A run that fails does not measure the flavour it is named for.

``accumulation_lines(runs)`` is what ``linksweep run`` prints after its summary and what the
report's "Read with care" box says; ``accumulation_failures`` the same as entries, for the
report's table (``sections.accumulation_html``). Both are empty when no run failed: a sweep
whose runs all passed says nothing about it.

May import: orchestrator.analysis.flavours, orchestrator.analysis.headline,
orchestrator.analysis.stats.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.analysis.flavours import strategy_name
from orchestrator.analysis.headline import fmt_mb, series_order
from orchestrator.analysis.stats import GROUP_KEY

ACCUM_FAIL = "fail: "
"""How ``runs.accum_check`` starts when a run's non-final micro-batches did not send what its
strategy and ``grad_sync`` promise (``comm_model.accumulation_verdict``)."""


@dataclass(frozen=True)
class AccumFailure:
    """The runs of one variant group (every link) that failed the accumulation check with one
    verdict: what they are, and what their non-final micro-batches sent against the promise."""

    variant: str
    """The strategy's name with its flavour, ``grad_sync`` always (``DDP (sync last)``)."""
    grad_accum: int
    detail: str
    """The verdict after ``fail:``, bytes written out: ``reduce_scatter sent 474,000,000 B
    (474 MB), promised 0 B``."""
    run_ids: tuple[str, ...]
    links: tuple[str, ...]


def _bytes_words(n: int) -> str:
    return f"{n:,} B" + (f" ({fmt_mb(n)})" if n >= 1e6 else "")


CHECKED = ("grad_sync",)
"""The axis the check judges (what the non-final micro-batches promise depends on it): named
in a failure's name even at the strategy's default."""


def _accum_name(row: Mapping[str, Any]) -> str:
    """``strategy_name`` with the ``grad_sync`` a default leaves unnamed (``DDP (sync last)``):
    the check is about the flavour, so a failure always says which one."""
    return strategy_name(row, always=CHECKED)


def accumulation_failures(runs: Sequence[Mapping[str, Any]]) -> list[AccumFailure]:
    """The runs whose ``accum_check`` failed, one entry per (variant group, verdict), in the
    headline's strategy order then grad_accum; empty when every run passed or went unchecked."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in runs:
        verdict = str(r.get("accum_check") or "")
        if verdict.startswith(ACCUM_FAIL):
            key = tuple(r.get(k) for k in GROUP_KEY) + (verdict,)
            groups.setdefault(key, []).append(r)
    out = []
    for members in sorted(
        groups.values(), key=lambda g: (series_order(g[0]), int(g[0]["grad_accum"]))
    ):
        r0 = members[0]
        detail = str(r0["accum_check"]).removeprefix(ACCUM_FAIL)
        out.append(
            AccumFailure(
                variant=_accum_name(r0),
                grad_accum=int(r0["grad_accum"]),
                detail=re.sub(r"\b(\d+) B\b", lambda m: _bytes_words(int(m[1])), detail),
                run_ids=tuple(str(r.get("run_id")) for r in members),
                links=tuple(dict.fromkeys(str(r.get("link")) for r in members)),
            )
        )
    return out


def accumulation_lines(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """What ``linksweep run`` and the report say when any run failed the accumulation check
    (``runs`` with ``accum_check``, ``run_id``, the variant keys): a heading line, then one line
    per ``AccumFailure``; nothing when none failed."""
    failures = accumulation_failures(runs)
    if not failures:
        return []
    checked = sum(1 for r in runs if str(r.get("accum_check") or "").startswith(("ok", "fail")))
    n = sum(len(f.run_ids) for f in failures)
    lines = [
        f"ACCUMULATION CHECK FAILED on {n} of {checked} checked run(s): their non-final "
        "micro-batches did not send what the strategy and its grad_sync promise, so their "
        "bytes and step times are not those of the flavour they are named for."
    ]
    for f in failures:
        lines.append(
            f"  {f.variant} at grad_accum {f.grad_accum} "
            f"(link{'s' if len(f.links) > 1 else ''} {', '.join(f.links)}): "
            f"{f.detail}; run(s) {', '.join(f.run_ids)}"
        )
    return lines
