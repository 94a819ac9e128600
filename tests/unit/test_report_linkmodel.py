"""The link model in the report, from plain rows: the figure (points and fitted lines) and the
section (fits and leave-one-link-out), with what each shows when there is no model."""

from __future__ import annotations

from orchestrator import report
from orchestrator.analysis.linkmodel import link_model_rows
from orchestrator.report.linkmodel_view import link_model_html, plot_link_model

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
COMM_S = {"r50": 4.0, "r100": 2.0, "r300": 0.667, "r1g": 0.2}


def _runs(strategy: str, ga: int, compute_s: float, exposure: float) -> list[dict]:
    return [
        {"strategy": strategy, "offload": "none", "grad_accum": ga, "bucket_mb": 25, "overlap_comm": "default",
         "grad_compression": "none" if strategy == "ddp" else "n/a", "powersgd_rank": 0, "placement": "spread", "link": link, "repeat": rep, "status": "ok", "throttled": False,
         "median_step_time_s": (compute_s + exposure * x) * (1 + 0.01 * rep),
         "predicted_comm_s_per_step": x}
        for link, x in COMM_S.items() for rep in (1, 2)
    ]  # fmt: skip


def _model(*groups):
    runs, models, checks = [], [], []
    for g in groups:
        rs = _runs(*g)
        m, c = link_model_rows("s1", rs)
        runs += rs
        models += m
        checks += c
    return runs, models, checks


def test_figure_draws_one_panel_per_fitted_variant():
    runs, models, _ = _model(("ddp", 1, 0.2, 0.5), ("zero3", 8, 0.9, 1.0))
    fig, note = plot_link_model(runs, models, list(COMM_S))
    assert fig is not None and "slope is the exposure" in note
    titles = [ax.get_title() for ax in fig.axes]
    assert len(titles) == 2
    assert titles[0].startswith("ddp ga=1\nexposure 0.50") and titles[1].startswith("zero3 ga=8")
    # The line starts at compute_s on the y axis and has the exposure as its slope.
    (x0, x1), (y0, y1) = fig.axes[1].lines[-1].get_data()
    assert x0 == 0 and abs(y0 - models[1]["compute_s"]) < 1e-12
    assert abs((y1 - y0) / (x1 - x0) - models[1]["exposure"]) < 1e-9
    assert report.build_figures  # the figure is one of the report's
    assert "step_time_vs_comm.png" in report.FIGURES


def test_figure_without_a_line_is_a_reason():
    runs = _runs("ddp", 1, 0.2, 0.5)[:2]  # one link only
    models, _ = link_model_rows("s1", runs)
    fig, note = plot_link_model(runs, models, ["r50"])
    assert fig is None and "two or more links" in note


def test_section_lists_fits_and_leave_one_out():
    _, models, checks = _model(("ddp", 1, 0.2, 0.5), ("zero3", 8, 0.9, 1.0))
    page = link_model_html(models, checks)
    assert "<code>link_model</code>" in page and "Leave one link out" in page
    assert "Largest |rel_error|" in page
    assert page.count("<tr>") == 1 + 2 + 1 + 8  # headers + fits + header + 4 links x 2
    assert "No link model rows" in link_model_html([], [])
