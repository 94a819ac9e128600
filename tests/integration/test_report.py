"""linksweep report / export on a real DuckDB file built without Ray.

The database is filled through ``orchestrator.store.Store`` with rows shaped like the driver's
(planned runs in interleaved order, per-rank steps with warmup, comms, link microbenchmark,
topology). Schema v2 stores the figures instead of computing them in views, so the fixture
stores them as a sweep does, with the driver's own functions: ``orchestrator.analysis.stats.run_figures``
for each run's columns in ``runs``, ``orchestrator.analysis.stats.variant_and_sensitivity_rows`` for
``variant_stats`` and ``sensitivity_stats``. Step times follow a simple model: ZeRO-3 costs
more than DDP, the no_p2p link costs more at grad_accum 1 than at 4 for DDP, and not less for
ZeRO-3.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pytest

from orchestrator import report
from orchestrator.analysis import linkmodel, stats
from orchestrator.cli import main
from orchestrator.store import TABLES, VIEWS, Q, Store
from orchestrator.sweep.planner import plan_runs, run_id_for
from orchestrator.sweep.spec import parse_spec

SWEEP_ID = "20250101-120000-abc123"
FAILED_ERROR = "RuntimeError: NCCL error in ProcessGroupNCCL.cpp:1970, unhandled system error"
T0 = dt.datetime(2025, 1, 1, 12, 0, tzinfo=dt.timezone.utc)
N_PARAMS = 124_439_808


def sweep_spec(links=None, strategies=("ddp", "zero3"), grad_accum=(1, 4), repeats=3):
    return parse_spec(
        {
            "name": "report-test",
            "model": "gpt2",
            "precision": "fp32",
            "seq_len": 128,
            "micro_batch_size": 4,
            "steps": 6,
            "warmup_steps": 2,
            "repeats": repeats,
            "world_size": 2,
            "links": links or {"default": {}, "no_p2p": {"NCCL_P2P_DISABLE": "1"}},
            "grid": {"strategy": list(strategies), "grad_accum": list(grad_accum)},
        }
    )


def insert_sweep(st: Store, spec, sweep_id: str, started_at: dt.datetime, status="ok") -> None:
    st.insert(
        "sweeps",
        [
            {
                "sweep_id": sweep_id,
                "name": spec.name,
                "spec": spec.to_json_dict(),
                "started_at": started_at,
                "finished_at": started_at + dt.timedelta(minutes=20),
                "status": status,
                "git_sha": "0123456789abcdef0123456789abcdef01234567",
                "git_dirty": False,
                "versions": {
                    "torch": "2.5.1",
                    "nccl": "2.21.5",
                    "deepspeed": "0.16.2",
                    "ray": "2.40.0",
                },
                "ray_address": "embedded",
                "n_runs_planned": len(plan_runs(spec)),
                "driver_host": "box0",
                "topology_status": "nvml ok",
            }
        ],
    )


def _step_time(strategy: str, ga: int, link: str) -> float:
    compute = 0.060 * ga
    comm = (
        0.030 if strategy == "ddp" else 0.045 * ga
    )  # DDP syncs once per step, ZeRO-3 per micro-step
    if link == "no_p2p":
        comm *= 2.5
    return compute + comm


def _predicted_comm_s(strategy: str, ga: int, link: str) -> float:
    """What the link microbenchmark would price the step's collectives at: the comm term of
    ``_step_time`` (so the link model's exposure is 1)."""
    return _step_time(strategy, ga, link) - 0.060 * ga


def stored_figures(steps: list[dict]) -> dict:
    """A run's figure columns from its per-rank step rows, as the driver computes them."""
    timed: dict[int, list[SimpleNamespace]] = defaultdict(list)
    for s in sorted(steps, key=lambda s: s["step"]):
        if not s["warmup"]:
            timed[s["rank"]].append(SimpleNamespace(**s))
    return stats.run_figures(timed)


def store_figures(st: Store, sweep_id: str, spec) -> None:
    """variant_stats and sensitivity_stats of the stored runs, as a sweep computes them (see
    ``orchestrator.sweep.execute.refresh_stats``): one variant group (a variant on every link) at a
    time, from its runs as stored."""
    variant_rows, sens_rows = [], []
    for group in {tuple(getattr(p.variant, k) for k in stats.GROUP_KEY) for p in plan_runs(spec)}:
        runs = st.rows(
            Q.VARIANT_GROUP_RUNS,
            sweep_id=sweep_id,
            **dict(zip(stats.GROUP_KEY, group, strict=True)),
        )
        v, s = stats.variant_and_sensitivity_rows(sweep_id, runs, spec.baseline, spec.seed)
        variant_rows += v
        sens_rows += s
    st.insert("variant_stats", variant_rows)
    st.insert("sensitivity_stats", sens_rows)
    # The link model of each group, as orchestrator.sweep.execute.refresh_link_model stores it.
    for group in {tuple(getattr(p.variant, k) for k in stats.GROUP_KEY) for p in plan_runs(spec)}:
        key = dict(zip(stats.GROUP_KEY, group, strict=True))
        runs = st.rows(Q.VARIANT_GROUP_RUNS, sweep_id=sweep_id, **key)
        model, check = linkmodel.link_model_rows(sweep_id, runs, spec.seed)
        st.insert("link_model", model)
        st.insert("link_model_check", check)


def build_database(path: str, repeats: int = 3) -> dict:
    """A sweep like a real one: ddp/zero3 x ga 1/4 x default/no_p2p x 3 repeats.

    Run seq 3 fails mid-run, seq 5 is throttled, seq 6 reports a link mismatch.
    """
    spec = sweep_spec(repeats=repeats)
    rng = np.random.default_rng(7)
    facts = {"failed_seq": 3, "throttled_seq": 5, "mismatch_seq": 6}
    with Store(path) as st:
        insert_sweep(st, spec, SWEEP_ID, T0, status="failed")
        st.insert(
            "nodes",
            [
                {
                    "sweep_id": SWEEP_ID,
                    "node": "box0",
                    "node_id": "n0",
                    "ip": "10.0.0.2",
                    "cpus": 24.0,
                    "gpus": 2.0,
                    "topo_text": "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV2\t0-23\nGPU1\tNV2\t X \t0-23",
                    "driver_version": "550.54",
                    "cuda_version": "12.4",
                    "nvml": "ok",
                }
            ],
        )
        st.insert(
            "gpus",
            [
                {
                    "sweep_id": SWEEP_ID,
                    "node": "box0",
                    "gpu_index": i,
                    "name": "NVIDIA TITAN RTX",
                    "uuid": f"GPU-{i}",
                    "pci_bus_id": f"0000:0{i + 1}:00.0",
                    "memory_total_bytes": 24 * 10**9,
                    "nvlink_active_count": 2,
                }
                for i in range(2)
            ],
        )
        st.insert(
            "gpu_links",
            [
                {"sweep_id": SWEEP_ID, "node": "box0", "gpu_a": a, "gpu_b": b, "link": "NV2"}
                for a, b in (("GPU0", "GPU1"), ("GPU1", "GPU0"))
            ],
        )
        bench = []
        for link, bw in (("default", 40.0), ("no_p2p", 9.0)):
            for op in ("all_reduce", "all_gather", "reduce_scatter"):
                for k in range(10, 27, 2):
                    size = 2**k
                    # bandwidth saturates with size: latency-bound small messages
                    busbw = bw * size / (size + 2**20)
                    for it in range(3):
                        t = size / (busbw * 1e9) * (1 + 0.02 * it)
                        bench.append(
                            {
                                "sweep_id": SWEEP_ID,
                                "link": link,
                                "placement": "pack",
                                "backend": "nccl",
                                "world_size": 2,
                                "op": op,
                                "msg_bytes": size,
                                "iteration": it,
                                "time_s": t,
                                "algbw_gbps": size / t / 1e9,
                                "busbw_gbps": busbw / (1 + 0.02 * it),
                                "status": "ok",
                                "error": None,
                            }
                        )
        st.insert("link_bench", bench)

        for p in plan_runs(spec):
            v = p.variant
            run_id = run_id_for(SWEEP_ID, p.seq)
            failed = p.seq == facts["failed_seq"]
            throttled = p.seq == facts["throttled_seq"]
            expected = (
                2 * N_PARAMS * 4 * 0.5
                if v.strategy == "ddp"
                else 3 * N_PARAMS * 4 * 0.5 * v.grad_accum
            )
            run = {
                "run_id": run_id,
                "sweep_id": SWEEP_ID,
                "seq": p.seq,
                **v.axes,  # every key column, as the planner names it
                "link_env": spec.links[v.link],
                "world_size": 2,
                "model": "gpt2",
                "n_params": N_PARAMS,
                "precision": "fp32",
                "seq_len": 128,
                "micro_batch_size": 4,
                "steps": spec.steps,
                "warmup_steps": spec.warmup_steps,
                "repeat": p.repeat,
                "backend": "nccl",
                "status": "failed" if failed else "ok",
                "error": f"{FAILED_ERROR}\nTraceback (most recent call last):\n  ..."
                if failed
                else None,
                "started_at": T0 + dt.timedelta(seconds=30 * p.seq),
                "finished_at": T0 + dt.timedelta(seconds=30 * p.seq + 25),
                "startup_s": 4.2,
                "nodes": [{"rank": r, "hostname": "box0", "gpu_ids": [0, 1]} for r in range(2)],
                "gpu_visibility": "same-node ranks share the node's assigned GPUs",
                "data_source": "wikitext-2-raw-v1",
                "tokenizer": "gpt2",
                "peak_mem_bytes": 9 * 10**9,
                "comm_bytes_per_step": None if failed else expected * 1.02,
                "predicted_comm_s_per_step": None
                if failed
                else _predicted_comm_s(v.strategy, v.grad_accum, v.link),
                "expected_comm_bytes_per_step": expected,
                "link_class": "NV2",
                "effective_transport": "SHM" if v.link == "no_p2p" else "P2P",
                "link_check": "mismatch" if p.seq == facts["mismatch_seq"] else "ok",
                "nccl_version": "2.21.5",
                "telemetry": "nvml",
                "max_temp_c": 91.0 if throttled else 71.0,
                "mean_power_w": 250.0,
                "min_sm_clock_mhz": 900.0 if throttled else 1770.0,
                "throttled": throttled,
                "hot": throttled,
                "variant": v.to_dict(),
            }
            base = _step_time(v.strategy, v.grad_accum, v.link) * (1.3 if throttled else 1.0)
            steps = []
            n_steps = 2 if failed else spec.warmup_steps + spec.steps
            for step in range(n_steps):
                warm = step < spec.warmup_steps
                for rank in range(2):
                    t = base * (1.8 if warm else 1.0) * (1 + 0.03 * rng.standard_normal())
                    steps.append(
                        {
                            "run_id": run_id,
                            "rank": rank,
                            "step": step,
                            "warmup": warm,
                            "step_time_s": t,
                            "samples": 4 * v.grad_accum,
                            "tokens": 4 * v.grad_accum * 128,
                            "loss": 10.0 - 0.1 * step,
                        }
                    )
            run.update(stored_figures(steps))
            comms = [
                {
                    "run_id": run_id,
                    "rank": rank,
                    "op": "all_reduce",
                    "msg_bytes": 25 * 10**6,
                    "count": 20,
                    "total_time_s": 0.2,
                    "algbw_gbps": 2.5,
                    "busbw_gbps": 2.5,
                }
                for rank in range(2)
            ]
            with st.transaction():
                st.insert("runs", [run])
                st.insert("steps", steps)
                st.insert("comms", [] if failed else comms)
        store_figures(st, SWEEP_ID, spec)
        plant_traces(st, path, [run_id_for(SWEEP_ID, seq) for seq in (1, 2)])
    return facts


def plant_traces(st: Store, db: str, run_ids: list[str]) -> None:
    """Two traced steps per rank of ``run_ids``, as a traced sweep keeps them: a file beside the
    database (a gloo-shaped Chrome trace: the main thread's ops, gloo's all_reduce on its own
    thread, the call that issued it on the main one) and its ``traces``, ``trace_overlap`` and
    ``trace_collectives`` rows."""
    import gzip
    import json

    from orchestrator.sweep.trace_rows import (
        collective_rows,
        overlap_rows,
        trace_dir_for,
        trace_path,
    )

    folder = trace_dir_for(db, SWEEP_ID)
    os.makedirs(folder, exist_ok=True)
    files, overlap, named = [], [], []
    for run_id in run_ids:
        for rank in range(2):
            events = []
            for k in range(2):
                t0 = 1000.0 * k
                events += [
                    {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}",
                     "pid": 1, "tid": 1, "ts": t0, "dur": 900.0},
                    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                     "ts": t0 + 10, "dur": 500.0 + 50 * rank},
                    {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1,
                     "tid": 1, "ts": t0 + 395, "dur": 5.0},
                    {"ph": "X", "cat": "cpu_op", "name": "gloo:all_reduce", "pid": 1,
                     "tid": 2, "ts": t0 + 400, "dur": 300.0},
                ]  # fmt: skip
            packed = gzip.compress(json.dumps({"traceEvents": events}).encode())
            path = trace_path(folder, run_id, rank)
            with open(path, "wb") as f:
                f.write(packed)
            files.append({"run_id": run_id, "rank": rank, "path": path, "bytes": len(packed),
                          "steps": 2})  # fmt: skip
            doc = json.loads(gzip.decompress(packed))
            overlap += overlap_rows(run_id, rank, doc)
            named += collective_rows(run_id, rank, doc, [("all_reduce", 4096, 2)])
    with st.transaction():
        st.insert("traces", files)
        st.insert("trace_overlap", overlap)
        st.insert("trace_collectives", named)


@pytest.fixture(scope="module")
def full_db(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("report") / "results.duckdb")
    facts = build_database(path)
    return path, facts


@pytest.fixture(scope="module")
def full_report(full_db, tmp_path_factory):
    db, facts = full_db
    out = tmp_path_factory.mktemp("report-out")
    assert main(["report", "--db", db, "--out", str(out)]) == 0
    return out, (out / "report.html").read_text(encoding="utf-8"), facts


def test_report_writes_html_and_every_figure(full_report):
    from PIL import Image

    out, page, _ = full_report
    assert (out / "report.html").stat().st_size > 10_000
    for name in report.FIGURES:
        path = out / name
        assert path.exists() and path.stat().st_size > 5_000, name
        with Image.open(path) as img:
            img.load()  # decodes the whole image, not just the header
            w, h = img.size
        assert img.format == "PNG"
        assert 500 <= w <= 4000 and 200 <= h <= 4000, (name, w, h)


def test_report_is_self_contained(full_report):
    _, page, _ = full_report
    refs = re.findall(r"""(?:src|href)\s*=\s*['"]([^'"]*)['"]""", page, flags=re.I)
    assert refs, "expected embedded images and in-page links"
    assert not [r for r in refs if r.startswith(("http:", "https:", "//"))]
    assert all(r.startswith(("data:image/png;base64,", "#")) for r in refs), refs
    assert "<script" not in page.lower() and "@import" not in page and "url(" not in page
    assert page.count("data:image/png;base64,") == len(report.FIGURES)


def test_report_lists_failed_throttled_and_mismatch_runs(full_report):
    _, page, facts = full_report
    assert FAILED_ERROR in page
    attention = page.split("id='attention'")[1].split("<h2")[0]
    throttled = attention.split("Throttled runs")[1].split("<h3>")[0]
    assert f"<td class='num'>{facts['throttled_seq']}</td>" in throttled
    assert "91" in throttled  # its max temperature
    mismatch = attention.split("Link-mismatch runs")[1]
    assert f"<td class='num'>{facts['mismatch_seq']}</td>" in mismatch


def test_report_classic_table(full_report):
    _, page, _ = full_report
    classic = page.split("id='classic'")[1].split("<h2")[0]
    assert "<h3>DDP <small>(bucket 25 MB)</small></h3>" in classic  # pack: the default
    assert "<h3>ZeRO-3 <small>" in classic
    ddp = classic.split("<h3>DDP")[1].split("<h3>")[0]
    # each link with its measured busbw; the brackets say what they are (3 runs: the range)
    assert re.search(
        r"default \(measured busbw [\d.]+ GB/s\) \(baseline\): time / step \[range of runs\]", ddp
    )
    assert re.search(r"no_p2p \(measured busbw [\d.]+ GB/s\): time / step \[range of runs\]", ddp)
    assert "no_p2p ÷ default" in ddp
    # ddp ga=1: 90 ms on default, 135 ms through SHM -> 1.5x, clearly slower
    assert re.search(r"<td class='num slower'>1\.[45]\d×", ddp)
    assert "ms [" in ddp


def test_report_provenance(full_report):
    _, page, _ = full_report
    prov = page.split("id='provenance'")[1]
    for text in (
        "0123456789abcdef",
        "2.21.5",
        "wikitext-2-raw-v1",
        "SHM",
        "P2P",
        "TITAN RTX",
        "NV2",
    ):
        assert text in prov, text


def test_report_explicit_sweep_and_errors(full_db, tmp_path, capsys):
    db, _ = full_db
    assert main(["report", "--db", db, "--sweep", SWEEP_ID, "--out", str(tmp_path / "a")]) == 0
    assert (tmp_path / "a" / "report.html").exists()
    assert (
        main(["report", "--db", db, "--sweep", "no-such-sweep", "--out", str(tmp_path / "b")]) == 2
    )
    assert "no-such-sweep" in capsys.readouterr().err
    assert (
        main(["report", "--db", str(tmp_path / "missing.duckdb"), "--out", str(tmp_path / "c")])
        == 2
    )
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


def test_report_of_failed_only_single_link_sweep(tmp_path, capsys):
    """Only failed runs, one link, no microbenchmark: a report that says what is missing."""
    db = str(tmp_path / "r.duckdb")
    spec = sweep_spec(links={"default": {}}, strategies=("ddp",), grad_accum=(1,), repeats=2)
    with Store(db) as st:
        insert_sweep(st, spec, "old-sweep", T0 - dt.timedelta(days=1))
        insert_sweep(st, spec, "new-sweep", T0, status="failed")
        runs = [
            {
                "run_id": run_id_for("new-sweep", p.seq),
                "sweep_id": "new-sweep",
                "seq": p.seq,
                **p.variant.axes,  # DDP at grad_accum 1 on the default link, packed
                "repeat": p.repeat,
                "status": "failed",
                "error": "ActorDiedError: the actor died unexpectedly\nmore",
                **stored_figures([]),
            }
            for p in plan_runs(spec)
        ]
        for run in runs:
            st.insert("runs", [run])
        store_figures(st, "new-sweep", spec)
    out = tmp_path / "out"
    out.mkdir()
    (out / "busbw_vs_msg_size.png").write_bytes(b"stale figure from another sweep")
    assert main(["report", "--db", db, "--out", str(out)]) == 0  # latest sweep: new-sweep
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "new-sweep" in page and "old-sweep" not in page
    assert "ActorDiedError: the actor died unexpectedly" in page
    assert "Only one link" in page
    assert "No link slowdowns" in page
    assert "No timed steps" in page
    assert "No link microbenchmark results" in page
    assert "No topology was recorded" in page
    assert not list(out.glob("*.png"))  # nothing to draw, and the stale figure is gone

    # a sweep with no runs at all
    assert main(["report", "--db", db, "--sweep", "old-sweep", "--out", str(tmp_path / "old")]) == 0
    assert "No runs stored" in (tmp_path / "old" / "report.html").read_text(encoding="utf-8")


def test_classic_table_with_single_runs_shows_no_interval(tmp_path):
    """One repeat: a bootstrap interval of one run is a point; it must not look significant."""
    db = str(tmp_path / "r.duckdb")
    build_database(db, repeats=1)
    assert main(["report", "--db", db, "--out", str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    classic = page.split("id='classic'")[1].split("<h2")[0]
    assert "(1 run, no CI)" in classic
    assert "num slower" not in classic and "num faster" not in classic
    assert "no ok run" in classic  # ddp ga=4 default: its only run failed


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_export_writes_every_table_and_view(full_db, tmp_path, fmt, capsys):
    import pyarrow.csv
    import pyarrow.parquet as pq

    db, _ = full_db
    out = tmp_path / fmt
    assert main(["export", str(out), "--format", fmt, "--db", db]) == 0
    names = [n for n in [*TABLES, *VIEWS] if n != "meta"]
    printed = capsys.readouterr().out
    for name in names:
        path = out / f"{name}.{fmt}"
        assert path.exists(), name
        assert str(path) in printed
    read = pq.read_table if fmt == "parquet" else pyarrow.csv.read_csv
    runs = read(str(out / f"runs.{fmt}"))
    assert runs.num_rows == 24
    steps = read(str(out / f"step_times.{fmt}"))
    assert steps.num_rows == 23 * 6 + 0  # the failed run stopped inside warmup
    sens = read(str(out / f"link_sensitivity.{fmt}"))
    assert sens.num_rows == 4 and set(sens.column("link").to_pylist()) == {"no_p2p"}
    if fmt == "csv":  # lines end with \n, as the duckdb CLI and psql write them
        assert b"\r" not in (out / "runs.csv").read_bytes()


def test_query_csv_lines_end_with_newline(full_db, capsys):
    db, _ = full_db
    assert main(["query", "SELECT count(*) AS n FROM runs", "--format", "csv", "--db", db]) == 0
    assert capsys.readouterr().out == "n\n24\n"  # a shell's `tail -1` gives 24, not 24\r


def test_export_bad_input(full_db, tmp_path, capsys):
    db, _ = full_db
    with pytest.raises(SystemExit) as exc:
        main(["export", str(tmp_path / "x"), "--format", "xlsx", "--db", db])
    assert exc.value.code == 2 and "choose from 'parquet', 'csv'" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "y"), "--db", str(tmp_path / "none.duckdb")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "x") and not os.path.exists(tmp_path / "y")


def test_report_link_model_section(full_report, full_db):
    from orchestrator.store import Reader

    _, page, _ = full_report
    assert "Link model (exposure)" in page and "Leave one link out" in page
    with Reader(full_db[0]) as r:
        models = r.rows(Q.REPORT_LINK_MODEL, sweep_id=SWEEP_ID)
    # Step times are compute + the predicted communication: exposure 1 within the noise.
    assert len(models) == 4 and all(m["n_links"] == 2 for m in models)
    assert all(abs(m["exposure"] - 1) < 0.2 for m in models), models
