"""One variant key (``stats.VARIANT_KEY``) everywhere a variant is grouped, matched, labelled or
resumed, checked on a sweep that varies every key: strategy, offload, bucket_mb, overlap_comm,
compile, link and placement. Without Ray: the planner plans the sweep, every planned run is stored with a
step time planted per variant group (``compute_s + exposure x predicted comm``), and the real
statistics, link model, ``linksweep project``, report and resume read it back. A module that
dropped a key (as ``project`` and the link-model figure once dropped ``overlap_comm``) merges
two groups: their fits mix, their rows and panels repeat. DDP's ``grad_compression`` takes
powersgd at two ranks, so ``powersgd_rank`` varies too (and ``overlap_comm`` takes default and
true: PowerSGD refuses false, linksweep's own all-reduce, which carries no comm hook).
"""

from __future__ import annotations

import json

import pytest

from orchestrator.analysis.stats import GROUP_KEY, VARIANT_KEY, varying
from orchestrator.cli import main
from orchestrator.report.labels import group_label
from orchestrator.report.linkmodel_view import plot_link_model
from orchestrator.store import Q, Reader, Store
from orchestrator.sweep.execute import refresh_all_stats
from orchestrator.sweep.planner import plan_runs
from orchestrator.sweep.resume import ResumeError, remaining_slots
from orchestrator.sweep.spec import parse_spec

SID = "s-every-key"
COMM_S = {"a": 0.1, "b": 0.4, "c": 1.6}  # predicted communication per step on each link
SPEC = {
    "name": "every-key",
    "model": "gpt2-tiny",
    "world_size": 2,
    "warmup_steps": 3,  # the fewest from which every measured PowerSGD step compresses here
    "links": {name: {"X_LINK": name} for name in COMM_S},
    "grid": {
        "strategy": ["ddp", "zero3"],
        "offload": ["none", "cpu"],
        "bucket_mb": ["default", 4],
        "overlap_comm": ["default", "true"],
        "grad_compression": ["none", "bf16", "powersgd"],
        "powersgd_rank": [1, 4],
        "grad_sync": ["each", "last"],
        "compile": [False, True],
        "placement": ["pack", "spread"],
        "linkbench": True,
    },
}


def _planted(v) -> tuple[float, float]:
    """(compute_s, exposure) of a variant group: every key moves them, so groups differ."""
    compute = 0.2 + 0.1 * (v.strategy == "zero3") + 0.05 * (v.offload == "cpu")
    compute += 0.01 * (v.bucket_mb == 4) + 0.02 * (v.placement == "spread")
    compute -= 0.03 * (v.compile == "true")  # compiled kernels
    exposure = 0.3 + 0.4 * (v.overlap_comm == "true") + 0.1 * (v.bucket_mb == 4)
    exposure += 0.05 * (v.strategy == "zero3") + 0.02 * (v.placement == "spread")
    exposure -= 0.15 * (v.grad_compression == "bf16")  # half the bytes on the link
    exposure -= 0.25 * (v.grad_compression == "powersgd") - 0.05 * (v.powersgd_rank == 4)
    exposure += 0.2 * (v.grad_sync == "each")  # every micro-batch reduces
    return compute, exposure


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    spec = parse_spec(SPEC)
    planned = plan_runs(spec)
    runs = []
    for p in planned:
        compute, exposure = _planted(p.variant)
        comm = COMM_S[p.variant.link]
        runs.append(
            {"run_id": f"{SID}-{p.seq}", "sweep_id": SID, "seq": p.seq, "repeat": p.repeat,
             "status": "ok", "throttled": False, "median_step_time_s": compute + exposure * comm,
             "predicted_comm_s_per_step": comm}
            | p.variant.to_dict()
        )  # fmt: skip
    bench = [
        {"sweep_id": SID, "link": link, "placement": placement, "op": "all_reduce",
         "msg_bytes": 1 << 22, "iteration": 0, "time_s": 1.0, "algbw_gbps": 1 / comm,
         "busbw_gbps": 1 / comm, "status": "ok"}
        for link, comm in COMM_S.items() for placement in ("pack", "spread")
    ]  # fmt: skip
    db = str(tmp_path_factory.mktemp("every-key") / "r.duckdb")
    with Store(db) as s:
        with s.transaction():
            s.insert("sweeps", [{"sweep_id": SID, "name": "every-key", "spec": SPEC}])
            s.insert("runs", runs)
            s.insert("link_bench", bench)
        refresh_all_stats(s, spec, SID)
    return spec, planned, db


def _groups(planned) -> set[tuple]:
    return {tuple(getattr(p.variant, k) for k in GROUP_KEY) for p in planned}


def test_the_sweep_varies_every_key(stored):
    _, planned, _ = stored
    rows = [p.variant.to_dict() for p in planned]
    # one grad_accum: the default; reshard_after_forward varies with an FSDP2 strategy only,
    # which refuses a bucket_mb or overlap_comm axis (test_fsdp_spec.py)
    assert varying(rows) == set(VARIANT_KEY) - {"grad_accum", "reshard_after_forward"}


def test_link_model_fits_each_group_apart(stored):
    _, planned, db = stored
    with Reader(db) as r:
        models = r.rows(Q.REPORT_LINK_MODEL, sweep_id=SID)
        table = r.rows(Q.LINK_MODEL_EXPOSURE_TABLE, sweep_id=SID)
    assert len(models) == len(table) == len(_groups(planned))
    by_group = {tuple(m[k] for k in GROUP_KEY): m for m in models}
    assert set(by_group) == _groups(planned)
    for p in planned:
        compute, exposure = _planted(p.variant)
        m = by_group[tuple(getattr(p.variant, k) for k in GROUP_KEY)]
        assert m["exposure"] == pytest.approx(exposure, rel=1e-6)  # a merged group would mix
        assert m["compute_s"] == pytest.approx(compute, rel=1e-6)


def test_link_model_figure_has_one_distinct_panel_per_group(stored):
    _, planned, db = stored
    with Reader(db) as r:
        models = r.rows(Q.REPORT_LINK_MODEL, sweep_id=SID)
        runs = r.rows(Q.SWEEP_MODEL_RUNS, sweep_id=SID)
    # under the figure's panel cap: DDP's uncompressed eager groups (every other key varies)
    some = [
        m
        for m in models
        if m["strategy"] == "ddp" and m["grad_compression"] == "none" and m["compile"] == "false"
    ]
    fig, _ = plot_link_model(runs, some, list(COMM_S))
    titles = [ax.get_title().splitlines()[0] for ax in fig.axes]
    assert len(titles) == len(set(titles)) == len(some)
    assert any("overlap=true" in t for t in titles) and any("bucket=4MB" in t for t in titles)
    assert any("sync=each" in t for t in titles) and any("sync=last" in t for t in titles)
    assert {group_label(m, varying(some, GROUP_KEY)) for m in some} == set(titles)


def test_project_keeps_every_group_apart(stored, capsys):
    _, planned, db = stored
    assert main(["project", "--db", db, "--bandwidth-gbps", "2", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    short = {"grad_accum": "ga", "overlap_comm": "overlap"}
    keys = [tuple(r[short.get(k, k)] for k in GROUP_KEY) for r in rows]
    assert len(keys) == len(set(keys)) and set(keys) == _groups(planned)
    variant_of = {tuple(getattr(p.variant, k) for k in GROUP_KEY): p.variant for p in planned}
    for key, r in zip(keys, rows, strict=True):
        assert r["exposure"] == pytest.approx(_planted(variant_of[key])[1], rel=1e-6)


def test_report_tables_keep_every_variant_apart(stored, tmp_path):
    _, planned, db = stored
    out = tmp_path / "report"
    assert main(["report", "--db", db, "--out", str(out)]) == 0
    html = (out / "report.html").read_text()
    assert "<th>overlap_comm</th>" in html and "<th>bucket_mb</th>" in html
    with Reader(db) as r:
        variants = r.rows(Q.REPORT_VARIANTS, sweep_id=SID)
        sens = r.rows(Q.REPORT_SENSITIVITY, sweep_id=SID)
    n_variants = len({p.variant for p in planned})
    assert len(variants) == n_variants
    assert len(sens) == n_variants - len(_groups(planned))  # every link but the baseline


def test_resume_matches_on_every_key(stored):
    _, planned, db = stored
    with Reader(db) as r:
        slots = r.rows(Q.SWEEP_RUN_SLOTS, sweep_id=SID)
    assert remaining_slots(SID, planned, slots, retry_failed=False) == []
    for key, other in (
        ("bucket_mb", 8),
        ("overlap_comm", "false"),
        ("grad_compression", "fp16"),
        ("powersgd_rank", 2),
        ("placement", "x"),
    ):
        changed = [dict(slots[0], **{key: other}), *slots[1:]]
        with pytest.raises(ResumeError, match=key):
            remaining_slots(SID, planned, changed, retry_failed=False)
