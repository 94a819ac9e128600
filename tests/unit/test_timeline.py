"""The report's timeline (``orchestrator/report/timeline.py``): a panel whose ranks were all read
from their rebased traces shares one time axis, from the earliest rank's start of the step, so a
rank that started late sits to the right; otherwise each lane starts at its own rank's step."""

from __future__ import annotations

from orchestrator.report.timeline import lane_origins, plot_timeline


def row(rank: int, start: float, common: bool) -> dict:
    w = (start, start + 100.0)
    return {"label": "DDP, ga 2", "link": "fast", "rank": rank, "window": w,
            "comm": [(start + 60.0, start + 100.0)], "compute": [(start, start + 60.0)],
            "common_clock": common}  # fmt: skip


def test_one_clock_puts_every_lane_on_the_earliest_start():
    rows = [row(0, 1000.0, True), row(1, 1025.0, True)]
    assert lane_origins(rows) == [1000.0, 1000.0]


def test_a_lane_not_on_the_common_clock_makes_each_lane_start_at_its_own_step():
    rows = [row(0, 1000.0, True), row(1, 9_999_000.0, False)]
    assert lane_origins(rows) == [1000.0, 9_999_000.0]


def test_the_caption_and_axis_say_which_clock_the_lanes_are_on():
    fig, caption = plot_timeline([row(0, 1000.0, True), row(1, 1025.0, True)], ["fast"])
    ax = fig.axes[0]
    assert "one clock" in ax.get_xlabel() and "share one clock" in caption
    assert ax.get_xlim() == (0.0, 0.125)  # ms: rank 1's step ends 125 us after rank 0's start
    fig, caption = plot_timeline([row(0, 1000.0, False), row(1, 1025.0, False)], ["fast"])
    assert "each rank's" in fig.axes[0].get_xlabel() and "share one clock" not in caption
    assert fig.axes[0].get_xlim() == (0.0, 0.1)
