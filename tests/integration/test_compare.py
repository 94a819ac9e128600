"""``linksweep compare`` and ``baseline`` end to end on planted databases (no Ray: runs are stored
with planted step times, as tests/integration/test_variant_key.py does): across two files, within
one, a database against itself, named baselines, every format, and the bad inputs (exit 2).
"""

from __future__ import annotations

import json
import sys

import pytest

from orchestrator.cli import main
from orchestrator.store import Q, Reader, Store

LINKS = {"fast": {"X_LINK": "fast"}, "slow": {"X_LINK": "slow"}}
WORKLOAD = {"model": "gpt2-tiny", "precision": "fp32", "seq_len": 64, "micro_batch_size": 2,
            "world_size": 2}  # fmt: skip
# Step time per (strategy, link) and per repeat: the candidate's slow link costs 1.9x as much.
BASE = {("ddp", "fast"): 0.20, ("ddp", "slow"): 0.30, ("zero3", "fast"): 0.35,
        ("zero3", "slow"): 0.70}  # fmt: skip
SLOWER_SLOW = {k: v * (1.9 if k[1] == "slow" else 1.0) for k, v in BASE.items()}
JITTER = (0.99, 1.0, 1.01)


def _plant(store: Store, sweep_id: str, started: str, times: dict, versions: dict,
           workload: dict = WORKLOAD, extra_variant: bool = False) -> None:  # fmt: skip
    spec = {"name": sweep_id, "model": workload["model"], "links": LINKS}
    runs, seq = [], 0
    keys = list(times) + ([("zero2", "fast")] if extra_variant else [])
    for rep, jitter in enumerate(JITTER):
        for strategy, link in keys:
            t = times.get((strategy, link), 0.3) * jitter
            runs.append(
                {"run_id": f"{sweep_id}-{seq}", "sweep_id": sweep_id, "seq": seq, "repeat": rep,
                 "strategy": strategy, "offload": "none", "grad_accum": 1, "bucket_mb": 0,
                 "overlap_comm": "default", "link": link, "placement": "spread",
                 "grad_compression": "none" if strategy == "ddp" else "n/a", "powersgd_rank": 0,
                 "status": "ok", "throttled": False, "median_step_time_s": t,
                 "tokens_per_s": 256 / t, "link_class": "NET", "effective_transport": "gloo/tcp",
                 "backend": "gloo", "ranks_per_gpu": 1} | workload
            )  # fmt: skip
            seq += 1
    bench = [
        {"sweep_id": sweep_id, "link": link, "placement": "spread", "op": "all_reduce",
         "msg_bytes": 1 << 20, "iteration": i, "time_s": 1.0, "algbw_gbps": bw, "busbw_gbps": bw,
         "status": "ok", "source": "linksweep"}
        for link, bw0 in (("fast", 0.8), ("slow", 0.06 / (times[("ddp", "slow")] / 0.30)))
        for i, bw in enumerate((bw0 * 0.98, bw0, bw0 * 1.02))
    ]  # fmt: skip
    with store.transaction():
        store.insert(
            "sweeps",
            [{"sweep_id": sweep_id, "name": sweep_id, "spec": spec, "started_at": started,
              "status": "ok", "versions": versions, "n_runs_planned": len(runs)}],
        )  # fmt: skip
        store.insert("runs", runs)
        store.insert("link_bench", bench)
        store.insert(
            "link_descriptions",
            [{"sweep_id": sweep_id, "link": "slow", "kind": "emulated",
              "description": f"tc rate {'500' if times is BASE else '200'}mbit"}],
        )  # fmt: skip


V1 = {"torch": "2.5.1", "ray": "2.40.0", "deepspeed": "0.16.0"}
V2 = {"torch": "2.6.0", "ray": "2.40.0", "deepspeed": "0.16.0"}


@pytest.fixture(scope="module")
def dbs(tmp_path_factory):
    d = tmp_path_factory.mktemp("compare")
    a, b, both, other = (str(d / n) for n in ("a.duckdb", "b.duckdb", "both.duckdb", "o.duckdb"))
    with Store(a) as s:
        _plant(s, "base", "2026-11-01 10:00:00+00", BASE, V1)
    with Store(b) as s:
        _plant(s, "cand", "2026-11-02 10:00:00+00", SLOWER_SLOW, V2, extra_variant=True)
    with Store(both) as s:
        _plant(s, "base", "2026-11-01 10:00:00+00", BASE, V1)
        _plant(s, "cand", "2026-11-02 10:00:00+00", SLOWER_SLOW, V2, extra_variant=True)
    with Store(other) as s:
        _plant(s, "bigger", "2026-11-03 10:00:00+00", BASE, V1, WORKLOAD | {"seq_len": 128})
    return {"a": a, "b": b, "both": both, "other": other}


def _json(capsys, argv) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main(["compare", *argv, "--format", "json"])
    out, err = capsys.readouterr()
    print(err, file=sys.stderr)  # left for the test to read
    return rc, (json.loads(out) if out.strip() else {})


def _verdicts(rows) -> dict:
    return {(r["key"]["strategy"], r["key"]["link"]): r["verdict"] for r in rows}


def _check_slow_link_regressed(doc: dict) -> None:
    assert _verdicts(doc["variants"]) == {
        ("ddp", "fast"): "no change", ("ddp", "slow"): "slower",
        ("zero3", "fast"): "no change", ("zero3", "slow"): "slower",
    }  # fmt: skip
    assert _verdicts(doc["slowdowns"]) == {("ddp", "slow"): "slower", ("zero3", "slow"): "slower"}
    assert doc["regressions"] == 4
    slow = [r for r in doc["variants"] if r["key"]["link"] == "slow"]
    assert all(r["ratio"] == pytest.approx(1.9) and r["test"] == "ranges" for r in slow)
    assert doc["unmatched"]["candidate_only"][0]["strategy"] == "zero2"
    assert doc["unmatched"]["baseline_only"] == []
    bench = {r["link"]: r["verdict"] for r in doc["linkbench"]}
    assert bench == {"fast": "no change", "slow": "slower"}
    fields = {d["field"]: (d["baseline"], d["candidate"]) for d in doc["fingerprint"]}
    assert fields["version.torch"] == ("2.5.1", "2.6.0")
    assert fields["link slow"] == ("tc rate 500mbit", "tc rate 200mbit")
    assert "version.ray" not in fields


def test_across_two_files(dbs, capsys):
    rc, doc = _json(capsys, [dbs["a"], dbs["b"], "--threshold", "30%"])
    assert rc == 1
    _check_slow_link_regressed(doc)
    assert doc["baseline"]["sweep_id"] == "base" and doc["candidate"]["db"] == dbs["b"]
    assert doc["threshold"] == 0.3


def test_within_one_file_and_path_colon_sweep(dbs, capsys):
    rc, doc = _json(capsys, ["base", "cand", "--db", dbs["both"], "--threshold", "0.3"])
    assert rc == 1
    _check_slow_link_regressed(doc)
    rc, doc = _json(capsys, [f"{dbs['both']}:base", f"{dbs['both']}:cand", "--threshold", "30%"])
    assert rc == 1 and doc["regressions"] == 4


def test_a_database_against_itself_flags_nothing(dbs, capsys):
    rc, doc = _json(capsys, [dbs["a"], dbs["a"]])
    assert rc == 0
    assert doc["regressions"] == 0 and doc["fingerprint"] == []
    assert {r["verdict"] for r in doc["variants"] + doc["slowdowns"]} == {"no change"}


def test_link_map_matches_renamed_links(dbs, capsys):
    rc, doc = _json(capsys, [dbs["a"], dbs["a"], "--link-map", "slow=nope"])
    assert rc == 2 and doc == {}
    assert "no link 'nope'" in capsys.readouterr().err
    # given before the sides, --link-map takes one value and leaves the sides to the command
    rc, doc = _json(capsys, ["--link-map", "slow=slow", dbs["a"], dbs["a"]])
    assert rc == 0 and doc["regressions"] == 0


def test_baseline_set_list_and_compare(dbs, capsys):
    db = dbs["both"]
    assert main(["baseline", "set", "ref", "--db", db, "--sweep", "base", "--note", "v1"]) == 0
    assert "baseline ref = sweep base" in capsys.readouterr().out
    assert main(["baseline", "set", "ref", "--db", db]) == 0  # newest: cand, replacing base
    assert "replacing sweep base" in capsys.readouterr().out
    assert main(["baseline", "set", "ref", "--db", db, "--sweep", "base"]) == 0
    assert main(["baseline", "set", "x", "--db", db, "--sweep", "nope"]) == 2
    capsys.readouterr()
    assert main(["baseline", "list", "--db", db, "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["name"], row["sweep_id"], row["note"], row["n_runs"]) == ("ref", "base", None, 12)
    assert main(["baseline", "list", "--db", db]) == 0
    assert "ref" in capsys.readouterr().out
    rc, doc = _json(capsys, ["--baseline", "ref", "cand", "--db", db, "--threshold", "30%"])
    assert rc == 1 and doc["baseline"]["sweep_id"] == "base" and doc["regressions"] == 4
    rc, _ = _json(capsys, ["--baseline", "nope", "cand", "--db", db])
    assert rc == 2 and "no such baseline" in capsys.readouterr().err
    with Reader(db) as r:
        assert [b["name"] for b in r.rows(Q.BASELINES)] == ["ref"]


def test_table_and_markdown(dbs, capsys):
    capsys.readouterr()
    assert main(["compare", dbs["a"], dbs["b"], "--threshold", "30%"]) == 1
    out = capsys.readouterr().out
    assert out.index("fingerprint") < out.index("Variants")
    assert "REGRESSION: 4 beyond 30%" in out.splitlines()[-1]
    assert "Unmatched: variants only in the candidate" in out
    assert main(["compare", dbs["a"], dbs["a"], "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("✅ **No regression beyond 5%")
    assert "| figure | strategy | link |" in md


def test_workload_mismatch_refused_unless_forced(dbs, capsys):
    rc, doc = _json(capsys, [dbs["a"], dbs["other"]])
    assert rc == 2
    assert doc["workload_mismatch"] == [{"field": "seq_len", "baseline": "64", "candidate": "128"}]
    assert "seq_len 64 vs 128" in capsys.readouterr().err
    rc, doc = _json(capsys, [dbs["a"], dbs["other"], "--force"])
    assert rc == 0 and doc["workload_mismatch"][0]["field"] == "seq_len"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["nope", "base"], "no sweep 'nope'"),
        (["/no/such.duckdb", "base"], "no such database file"),
        (["base", "cand", "--threshold", "abc"], "--threshold 'abc'"),
        (["base", "cand", "--threshold", "150%"], "between 0% and 100%"),
        (["base", "cand", "--link-map", "slow"], "expected OLD=NEW"),
        (["base"], "BASELINE CANDIDATE"),
    ],
)
def test_bad_input_exits_2(dbs, capsys, argv, message):
    capsys.readouterr()
    assert main(["compare", *argv, "--db", dbs["both"]]) == 2
    assert message in capsys.readouterr().err


def test_report_with_a_baseline(dbs, tmp_path, capsys):
    db, out = dbs["both"], tmp_path / "rep"
    assert main(["baseline", "set", "before", "--db", db, "--sweep", "base"]) == 0
    assert main(["report", "--db", db, "--sweep", "cand", "--baseline", "before",
                 "--out", str(out)]) == 0  # fmt: skip
    html = (out / "report.html").read_text()
    assert "Compared with baseline before" in html
    assert "4 regression(s) beyond 5% and the noise against baseline before" in html
    assert (out / "compared_with_baseline.png").read_bytes()[:4] == b"\x89PNG"
    capsys.readouterr()
    assert main(["report", "--db", db, "--baseline", "nope", "--out", str(tmp_path / "x")]) == 2
    assert "no such baseline" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
