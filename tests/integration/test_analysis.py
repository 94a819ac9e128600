"""A real small sweep with repeats 3: views, interleaved order, README's SQL, the report."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.store import read_query

REPO = str(Path(__file__).resolve().parents[2])


def q(db, sql):
    return read_query(str(db), sql)


@pytest.fixture(scope="module")
def analysis_db(run_sweep, tmp_path_factory):
    spec = {
        "name": "analysis-it",
        "seq_len": 32,
        "micro_batch_size": 1,
        "steps": 2,
        "warmup_steps": 1,
        "repeats": 3,
        "world_size": 2,
        "linkbench_max_mb": 1,
        "links": {"base": {}, "other": {"NCCL_P2P_DISABLE": "1"}},
        "grid": {"strategy": ["ddp", "zero3"], "linkbench": True},
    }
    rc, db = run_sweep(tmp_path_factory.mktemp("analysis"), spec)
    assert rc == 0
    return db


def test_interleaved_order(analysis_db):
    _, rows = q(analysis_db, 'SELECT seq, "repeat", strategy, link FROM runs ORDER BY seq')
    assert [r[0] for r in rows] == list(range(1, 13))
    assert [r[1] for r in rows] == [1] * 4 + [2] * 4 + [3] * 4
    variants = [(r[2], r[3]) for r in rows]
    assert variants[0:4] == variants[4:8] == variants[8:12]
    assert len(set(variants[0:4])) == 4


def test_variant_summary_rows_and_columns(analysis_db):
    cols, rows = q(analysis_db, "SELECT * FROM variant_summary")
    for c in [
        "sweep_id",
        "strategy",
        "offload",
        "grad_accum",
        "bucket_mb",
        "link",
        "placement",
        "n_runs",
        "n_excluded",
        "median_step_time_s",
        "ci_low_s",
        "ci_high_s",
        "samples_per_s",
        "tokens_per_s",
        "comm_bytes_per_step",
        "peak_mem_bytes",
    ]:
        assert c in cols
    assert len(rows) == 4
    for r in rows:
        row = dict(zip(cols, r, strict=True))
        assert row["n_runs"] == 3 and row["n_excluded"] == 0
        assert row["ci_low_s"] <= row["median_step_time_s"] <= row["ci_high_s"]
        assert row["tokens_per_s"] == pytest.approx(row["samples_per_s"] * 32)
        assert row["predicted_comm_s_per_step"] > 0


def test_link_sensitivity_rows(analysis_db):
    cols, rows = q(
        analysis_db,
        "SELECT strategy, link, baseline_link, slowdown, ci_low, ci_high "
        "FROM link_sensitivity ORDER BY strategy",
    )
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("ddp", "other", "base"),
        ("zero3", "other", "base"),
    ]
    for _, _, _, slowdown, lo, hi in rows:
        assert 0 < lo <= slowdown <= hi


def test_link_bandwidth_rows(analysis_db):
    _, rows = q(
        analysis_db,
        "SELECT link, collective, count(*), min(msg_bytes), max(msg_bytes), min(busbw_gbps) "
        "FROM link_bandwidth GROUP BY ALL ORDER BY ALL",
    )
    assert {(r[0], r[1]) for r in rows} == {
        (link, op)
        for link in ("base", "other")
        for op in ("all_gather", "all_reduce", "reduce_scatter")
    }
    for _, _, n_sizes, lo, hi, bw in rows:
        assert (lo, hi, n_sizes) == (1024, 2**20, 11) and bw > 0


def readme_queries() -> list[str]:
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read()
    section = text.split("## Questions you can answer with SQL", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sql\n(.*?)```", section, flags=re.S)


def test_readme_has_five_or_more_questions():
    assert len(readme_queries()) >= 5


@pytest.mark.parametrize("i", range(7))
def test_readme_queries_run(analysis_db, i):
    queries = readme_queries()
    if i >= len(queries):
        pytest.skip("fewer queries in README")
    cols, rows = q(analysis_db, queries[i])
    assert cols
    first_line = queries[i].splitlines()[0]
    if "status <> 'ok'" not in queries[i] and "slowdown < 1.05" not in queries[i]:
        assert rows, f"README query {i} returned nothing: {first_line}"


def test_report_files(analysis_db, tmp_path):
    import matplotlib.image as mpimg

    out = tmp_path / "report"
    assert main(["report", "--db", str(analysis_db), "--out", str(out)]) == 0
    html = (out / "report.html").read_text()
    assert len(html) > 1000 and "https://" not in html and "http://" not in html
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) >= 4
    for png in pngs:
        assert png.stat().st_size > 1000
        img = mpimg.imread(png)
        assert img.shape[0] > 100 and img.shape[1] > 100


def test_export(analysis_db, tmp_path):
    import pyarrow.parquet as pq

    assert main(["export", str(tmp_path / "pq"), "--db", str(analysis_db)]) == 0
    runs = pq.read_table(tmp_path / "pq" / "runs.parquet")
    assert runs.num_rows == 12
    assert (tmp_path / "pq" / "link_sensitivity.parquet").exists()
    assert main(["export", str(tmp_path / "csv"), "--format", "csv", "--db", str(analysis_db)]) == 0
    assert (tmp_path / "csv" / "variant_summary.csv").read_text().startswith("sweep_id,")
