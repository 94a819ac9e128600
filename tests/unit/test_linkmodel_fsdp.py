"""The link model and ``linksweep project`` fit each FSDP2 flavour on its own (``grad_sync`` and
``reshard_after_forward`` are in ``stats.GROUP_KEY``) and name it; a run row without a flavour
(before schema v8, or NULL) joins its strategy's default flavour. Synthetic run rows with a
planted line per flavour, and one small database for the run summary's link model table; no Ray.
"""

from __future__ import annotations

import pytest

from orchestrator.analysis.linkmodel import link_model_rows, project_sweep
from orchestrator.analysis.stats import GROUP_KEY
from orchestrator.commands.project import table_cells

COMM_S = {"a": 0.1, "b": 0.4, "c": 1.6}  # predicted communication per step on each link
BUSBW = {(link, "spread"): 0.2 / x for link, x in COMM_S.items()}
COMMON = {"offload": "none", "grad_accum": 4, "bucket_mb": 0, "overlap_comm": "default",
          "grad_compression": "n/a", "powersgd_rank": 0, "placement": "spread", "status": "ok", "throttled": False,
          "link_class": "NET", "ranks_per_gpu": 1}  # fmt: skip
# (strategy, grad_sync, reshard_after_forward) -> (compute_s, exposure): each flavour its own line.
PLANTED = {
    ("fsdp", "each", "true"): (0.5, 0.9),
    ("fsdp", "last", "false"): (0.4, 0.3),
    ("hsdp", "replicate_last", "false"): (0.45, 0.6),
    ("ddp", "last", "n/a"): (0.3, 0.5),
    ("ddp", "each", "n/a"): (0.3, 0.8),
}


def _runs(planted=PLANTED) -> list[dict]:
    out = []
    for (strategy, sync, reshard), (compute, exposure) in planted.items():
        flavour = {"strategy": strategy, "grad_sync": sync, "reshard_after_forward": reshard}
        if strategy == "ddp":
            flavour["grad_compression"] = "none"  # DDP's default; n/a elsewhere
        for link, x in COMM_S.items():
            for j in (0.99, 1.0, 1.01):
                out.append(COMMON | flavour | {"link": link, "predicted_comm_s_per_step": x,
                                               "median_step_time_s": (compute + exposure * x) * j})  # fmt: skip
    return out


def _flavour(row: dict) -> tuple:
    return (row["strategy"], row["grad_sync"], row["reshard_after_forward"])


def test_each_flavour_is_fitted_on_its_own():
    runs = _runs()
    for flavour, (compute, exposure) in PLANTED.items():
        group = [r for r in runs if _flavour(r) == flavour]
        (model,), checks = link_model_rows("s", group, n_resamples=200)
        assert _flavour(model) == flavour
        assert model["exposure"] == pytest.approx(exposure, rel=1e-6)
        assert model["compute_s"] == pytest.approx(compute, rel=1e-6)
        assert {_flavour(c) for c in checks} == {flavour} and len(checks) == 3


def test_project_gives_one_row_per_flavour_with_its_own_exposure():
    rows = project_sweep(_runs(), BUSBW, [1.0])
    assert sorted(_flavour(r) for r in rows) == sorted(PLANTED)
    for r in rows:
        assert r["exposure"] == pytest.approx(PLANTED[_flavour(r)][1], rel=1e-6)
        assert r["quality"] == "ok" and r["reference_link"] is not None
    keys = [tuple(r[k] for k in GROUP_KEY) for r in rows]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("old", ["missing", "null"])
def test_rows_without_a_flavour_join_the_default_flavour(old):
    """A run stored before v8 says no flavour: an FSDP2 one is FSDP2's default (sync each,
    reshard) and fits with the new default runs; DDP's is ``last``. Nothing sorts a NULL
    against a text key (which would raise) and nothing forms a group of its own."""
    runs = _runs({("fsdp", "each", "true"): (0.5, 0.9), ("ddp", "last", "n/a"): (0.3, 0.5)})
    for r in runs[::2]:  # half the runs of each group lose their flavour
        for k in ("grad_sync", "reshard_after_forward"):
            if old == "missing":
                del r[k]
            else:
                r[k] = None
    rows = project_sweep(runs, BUSBW, [1.0])
    assert sorted(_flavour(r) for r in rows) == [("ddp", "last", "n/a"), ("fsdp", "each", "true")]
    assert {_flavour(r): r["exposure"] for r in rows} == pytest.approx(
        {("ddp", "last", "n/a"): 0.5, ("fsdp", "each", "true"): 0.9}, rel=1e-6
    )


def test_the_project_table_names_the_flavour():
    rows = project_sweep(_runs(), BUSBW, [1.0])
    names, cells = table_cells(rows)
    assert "grad_sync" not in names and "reshard_after_forward" not in names
    assert names[0] == "strategy"
    assert sorted(c[0] for c in cells) == [
        "ddp",
        "ddp (sync each)",
        "fsdp (no reshard, sync last)",
        "fsdp (reshard, sync each)",
        "hsdp (no reshard, sync replicate_last)",
    ]
    assert all(len(c) == len(names) for c in cells)


def test_the_run_summary_link_model_table_shows_the_flavour(tmp_path):
    """``linksweep run``'s link model table (``Q.LINK_MODEL_EXPOSURE_TABLE``): two FSDP2
    flavours are two rows that say which is which, not two rows reading ``fsdp`` alike."""
    from orchestrator.store import Q, Reader, Store

    db = str(tmp_path / "lm.duckdb")
    runs = _runs()
    models = []
    for flavour in PLANTED:
        group = [r for r in runs if _flavour(r) == flavour]
        models += link_model_rows("s", group, n_resamples=50)[0]
    with Store(db) as s, s.transaction():
        s.insert("link_model", models)
    with Reader(db) as r:
        got = r.rows(Q.LINK_MODEL_EXPOSURE_TABLE, sweep_id="s")
    assert [(g["strategy"], g["sync"], g["reshard"]) for g in got] == [
        ("ddp", "each", "n/a"),
        ("ddp", "last", "n/a"),
        ("fsdp", "each", "true"),
        ("fsdp", "last", "false"),
        ("hsdp", "replicate_last", "false"),
    ]
    assert [g["exposure"] for g in got] == pytest.approx([0.8, 0.5, 0.9, 0.3, 0.6], rel=1e-6)


def test_measured_vs_predicted_names_each_flavour():
    """The report's measured-vs-predicted table and figure (``report/predicted.py``): one row
    and one series per FSDP2 flavour, each named."""
    from orchestrator.report.predicted import extra_vs_predicted_html, plot_extra_vs_predicted

    rows = [
        {"strategy": s, "offload": "none", "grad_sync": sync, "reshard_after_forward": reshard,
         "grad_accum": 4, "link": "c", "baseline_link": "a", "measured_extra_s": extra,
         "predicted_extra_s": 1.5, "ratio": extra / 1.5}
        for (s, sync, reshard), extra in (
            (("fsdp", "each", "true"), 1.35), (("fsdp", "last", "false"), 0.45))
    ]  # fmt: skip
    html = extra_vs_predicted_html(rows)
    assert "FSDP2 (reshard, sync each)" in html and "FSDP2 (no reshard, sync last)" in html
    pytest.importorskip("matplotlib")
    fig, _ = plot_extra_vs_predicted(rows)
    labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert sorted(labels) == [
        "FSDP2 (no reshard, sync last) on c",
        "FSDP2 (reshard, sync each) on c",
    ]
