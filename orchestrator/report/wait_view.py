"""Waiting for peers against moving bytes, in the report: the traced steps' exposed communication
split into the time a rank waited for the last one to arrive and the time the transfer took
(``orchestrator/analysis/trace_wait.py``; rules in docs/trace-overlap.md), per variant and link,
per collective, and each traced run's straggler verdict. Rows in (views ``trace_wait_summary``,
``trace_collective_wait``, ``trace_exposure``; query ``report_trace_lateness``), HTML out; no
statistic is computed here, only rows of the same variant and link laid side by side.

The measured-vs-fitted table (view ``trace_exposure``) gets the transfer and the wait beside the
link model's fitted exposed time: the fit prices bytes on the link, so the transfer is what it
should match, and the wait is what no link model can predict.

May import: fmt, labels, markup, orchestrator.analysis.trace_wait (the rule's constants).
"""

from __future__ import annotations

from orchestrator.analysis.trace_wait import DOMINANCE, MIN_SCORE, MIN_SHARE, MIN_STEADY_S
from orchestrator.report.fmt import fmt_seconds
from orchestrator.report.labels import GROUP_KEY, VARIANT_KEY, variant_label, varying
from orchestrator.report.markup import esc, html_table, missing

WAIT_COLS = (
    *VARIANT_KEY, "n_runs", "exposed_s", "waited_s", "transfer_s", "waited_share",
    "waited_low_s", "waited_high_s", "uncertainty_s", "predicted_comm_s",
    "n_straggler_runs", "straggler_ranks",
)  # fmt: skip
COLLECTIVE_WAIT_COLS = (
    *VARIANT_KEY, "op", "n_runs", "per_step_n", "exposed_s", "waited_s", "transfer_s",
)  # fmt: skip
LATENESS_COLS = (
    "seq", "variant", "rank", "instances", "times_last", "share_last", "mean_lateness_s",
    "max_lateness_s", "lateness_per_step_s", "score", "straggler", "clock_offset_ns",
    "clock_uncertainty_ns",
)  # fmt: skip
BESIDE_FIT = ("measured_waited_s", "measured_transfer_s")
"""The columns :func:`with_wait` lays beside ``trace_exposure``'s fitted exposed time."""

WAIT_NOTE = (
    "<p class='note'>view <code>trace_wait_summary</code>: every rank's traced steps on rank "
    "0's clock; each collective matched across the ranks of its group (the k-th call of an op "
    "in a group within a step), and each rank's exposed communication split at the last "
    "rank's arrival: <b>waited</b> before it (waiting for a slower rank: fix the node, the "
    "data loader, the throttle), <b>transfer</b> after it (the link moving bytes: a better "
    "link, compression, syncing less often). Per traced step the rank with the most exposed "
    "communication (its waited + transfer = its exposed), then each figure's median over "
    "steps and median and range over runs (medians taken apart need not add up). "
    "uncertainty_s: how far the split can move with the clocks' measured "
    "offsets. predicted_comm_s: the link model's communication time on the link, for the "
    "transfer to be read against. Rules in docs/trace-overlap.md.</p>"
)
COLLECTIVE_WAIT_NOTE = (
    "<p class='note'>view <code>trace_collective_wait</code>: the same split per collective "
    "(what the strategy called); an overlap of two collectives on one rank counts for the one "
    "that started first.</p>"
)
LATENESS_NOTE = (
    "<p class='note'>query <code>report_trace_lateness</code>: per traced run and rank, how "
    "often it arrived last (times_last of instances) and by how much beyond the next-latest "
    "rank; score: that lateness per step over the median traced step. A straggler is named "
    f"when the latest rank is late by {MIN_STEADY_S * 1e3:.0f} ms beyond every other rank in "
    f"three quarters of the traced steps, its score is at least {MIN_SCORE:.0%}, and it holds "
    f"at least {MIN_SHARE:.0%} of the run's lateness and {DOMINANCE:g}x the runner-up's "
    "(docs/trace-overlap.md); clock_offset_ns: its clock minus rank 0's.</p>"
)


def _key(row: dict) -> tuple:
    return tuple(row.get(k) for k in VARIANT_KEY)


def with_wait(trace_exposure: list[dict], trace_wait: list[dict]) -> list[dict]:
    """``trace_exposure``'s rows with the same variant and link's waited and transfer time per
    step (``trace_wait_summary``) beside the fitted exposed time; None where it has none."""
    wait = {_key(w): w for w in trace_wait}
    out = []
    for row in trace_exposure:
        w = wait.get(_key(row), {})
        out.append(
            row
            | {"measured_waited_s": w.get("waited_s"), "measured_transfer_s": w.get("transfer_s")}
        )
    return out


def _share(row: dict) -> dict:
    exposed, waited = row.get("exposed_s"), row.get("waited_s")
    share = waited / exposed if exposed and waited is not None else None
    return row | {"waited_share": share}


def verdict_lines(lateness: list[dict]) -> list[str]:
    """One sentence per traced run: its variant and link, then the straggler named or none."""
    runs: dict[object, dict] = {}
    for row in lateness:
        runs.setdefault(row.get("run_id"), row)
    vary = varying(list(runs.values()), GROUP_KEY)
    out = []
    for row in sorted(runs.values(), key=lambda r: r.get("seq") or 0):
        name = variant_label(row, vary)
        why = row.get("straggler_why") or "no verdict stored"
        out.append(f"run {row.get('seq')} ({name}): {why}")
    return out


def _lateness_rows(lateness: list[dict]) -> list[dict]:
    vary = varying(lateness, GROUP_KEY)
    return [r | {"variant": variant_label(r, vary)} for r in lateness]


def _headline(rows: list[dict]) -> str:
    """The largest waited share among the variants, in words."""
    shares = [r for r in rows if r.get("waited_share") is not None]
    if not shares:
        return ""
    top = max(shares, key=lambda r: r["waited_share"])
    vary = varying(rows, GROUP_KEY)
    return (
        f"<p>Most waiting: {esc(variant_label(top, vary))}, "
        f"{esc(fmt_seconds(top['waited_s']))} of {esc(fmt_seconds(top['exposed_s']))} exposed "
        f"per step ({top['waited_share']:.0%}) spent waiting for a slower rank.</p>"
    )


def wait_html(trace_wait: list[dict], collective_wait: list[dict], lateness: list[dict]) -> str:
    """The section: waited vs transfer per variant and link, per collective, and each traced
    run's verdict with its ranks' lateness."""
    if not trace_wait:
        return missing(
            "No waited/transfer rows: the traced runs predate every rank on one clock (schema "
            "v15), or a run traced one rank only (nobody to wait for)."
        )
    rows = [_share(r) for r in trace_wait]
    out = WAIT_NOTE + _headline(rows) + html_table(rows, WAIT_COLS, fold=True)
    if collective_wait:
        out += COLLECTIVE_WAIT_NOTE + html_table(collective_wait, COLLECTIVE_WAIT_COLS, fold=True)
    if lateness:
        lines = verdict_lines(lateness)
        out += (
            "<h3>Straggler</h3><ul>"
            + "".join(f"<li>{esc(x)}</li>" for x in lines)
            + "</ul>"
            + LATENESS_NOTE
            + f"<details><summary>{len(lateness)} rank row(s)</summary>"
            + html_table(_lateness_rows(lateness), LATENESS_COLS, fold=True)
            + "</details>"
        )
    return out
