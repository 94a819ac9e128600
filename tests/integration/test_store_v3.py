"""Schema v3: a v2 database is upgraded (rows kept, run_phases added, intervals relabelled or
recomputed as the range of the runs below 5 runs); link descriptions are stored at run start and shown with the measured busbw.
DuckDB only: no Ray."""

from __future__ import annotations

import duckdb
import pytest

from orchestrator.analysis.links import describe_links, link_label
from orchestrator.emulated.describe import shapes_by_interface
from orchestrator.store import (
    SCHEMA_VERSION,
    Q,
    Reader,
    Store,
    StoreError,
    bring_up_to_date,
    read_query,
)
from tests.integration.schema_v2 import as_v2

KEY = {"sweep_id": "s", "strategy": "ddp", "offload": "none", "bucket_mb": 25,
       "placement": "spread"}  # fmt: skip
FIGS = {  # (grad_accum, link) -> run figures
    (1, "fast"): [0.17, 0.30],
    (1, "slow"): [0.43, 0.47],
    (8, "fast"): [1.0, 1.1, 1.2, 1.0, 1.1, 1.2],
    (8, "slow"): [2.0, 2.1, 2.2, 2.0, 2.1, 2.2],
}


def _as_v2(db: str) -> None:
    """A database in v2's shape: v3's additions removed, version 2, intervals from v2's
    bootstrap (here: deliberately wrong numbers, to see which rows the upgrade recomputes)."""
    with Store(db) as s, s.transaction():
        i = 0
        for (ga, link), xs in FIGS.items():
            for x in xs:
                i += 1
                s.insert("runs", [KEY | {"run_id": f"r{i}", "grad_accum": ga, "link": link,
                                         "status": "ok", "median_step_time_s": x}])  # fmt: skip
            s.insert("variant_stats", [KEY | {"grad_accum": ga, "link": link, "n_runs": len(xs),
                                              "n_excluded": 0, "median_step_time_s": 1.0,
                                              "ci_low_s": -1.0, "ci_high_s": -2.0}])  # fmt: skip
        for ga in (1, 8):
            s.insert("sensitivity_stats", [KEY | {"grad_accum": ga, "link": "slow",
                                                  "baseline_link": "fast", "slowdown": 2.0,
                                                  "ci_low": -1.0, "ci_high": -2.0}])  # fmt: skip
    as_v2(db)


def test_v2_database_upgrades_intervals_truthfully(tmp_path):
    db = str(tmp_path / "v2.duckdb")
    _as_v2(db)
    with pytest.raises(StoreError, match="schema version 2, older"):
        Reader(db)  # opening read-only never writes: it cannot read an older schema
    with duckdb.connect(db, read_only=True) as con:
        assert con.execute("SELECT value FROM meta").fetchall() == [("2",)]
    bring_up_to_date(db)  # what a reading command does first: upgrades once
    with Reader(db) as r:
        variants = {
            (v["grad_accum"], v["link"]): v for v in r.rows(Q.REPORT_VARIANTS, sweep_id="s")
        }
        sens = {v["grad_accum"]: v for v in r.rows(Q.REPORT_SENSITIVITY, sweep_id="s")}
    assert read_query(db, "SELECT value FROM meta")[1] == [(str(SCHEMA_VERSION),)]
    # 2 runs: the interval becomes the range of the runs, labelled so
    v = variants[(1, "fast")]
    assert (v["ci_low_s"], v["ci_high_s"], v["interval_kind"]) == (0.17, 0.30, "range")
    s1 = sens[1]
    assert s1["interval_kind"] == "range"
    assert (s1["ci_low"], s1["ci_high"]) == pytest.approx((0.43 / 0.30, 0.47 / 0.17))
    # 6 runs: v2's bootstrap interval stays, labelled bootstrap95
    v8 = variants[(8, "slow")]
    assert (v8["ci_low_s"], v8["ci_high_s"], v8["interval_kind"]) == (-1.0, -2.0, "bootstrap95")
    assert (sens[8]["ci_low"], sens[8]["interval_kind"]) == (-1.0, "bootstrap95")
    # the new table and view exist and are empty for the old sweep
    assert read_query(db, "SELECT count(*) FROM link_overview")[1] == [(0,)]


def test_emulated_link_tc_rate_is_stored_and_shown_with_busbw(tmp_path):
    db = str(tmp_path / "r.duckdb")
    state = {"plan": {"links": [{"name": "ctl", "rate": None, "delay": None},
                                {"name": "fast", "rate": None, "delay": None},
                                {"name": "slow", "rate": "500mbit", "delay": None}]}}  # fmt: skip
    links = {"fast": {"GLOO_SOCKET_IFNAME": "ls-fast"}, "slow": {"GLOO_SOCKET_IFNAME": "ls-slow"}}
    with Store(db) as s, s.transaction():
        s.insert("link_descriptions", describe_links(links, shapes_by_interface(state), "s"))
        s.insert(
            "link_bench",
            [
                {"sweep_id": "s", "link": "slow", "placement": "spread", "backend": "gloo",
                 "world_size": 2, "op": "all_reduce", "msg_bytes": size, "iteration": it,
                 "time_s": 1.0, "algbw_gbps": bw, "busbw_gbps": bw, "status": "ok",
                 "error": None, "source": "linksweep", "in_place": None}
                for size, bw in ((2**20, 0.04), (2**23, 0.0601)) for it in (0, 1)
            ]
            # an imported nccl-tests figure at a larger size: beside ours, never our share
            + [{"sweep_id": "s", "link": "slow", "placement": "spread", "backend": "nccl",
                "world_size": 2, "op": "all_reduce", "msg_bytes": 2**30, "iteration": 0,
                "time_s": 1.0, "algbw_gbps": 9.0, "busbw_gbps": 9.0, "status": "ok",
                "error": None, "source": "nccl-tests", "in_place": False}],
        )  # fmt: skip
        s.insert("runs", [{"run_id": "r", "sweep_id": "s", "link": "slow", "status": "ok",
                           "link_class": "unknown", "effective_transport": "gloo/tcp"}])  # fmt: skip
    with Reader(db) as r:
        ov = {o["link"]: o for o in r.rows(Q.REPORT_LINK_OVERVIEW, sweep_id="s")}
    slow = ov["slow"]
    assert (slow["kind"], slow["rate"], slow["rated_gbps"]) == ("emulated", "500mbit", 0.0625)
    assert (slow["measured_msg_bytes"], slow["measured_busbw_gbps"]) == (2**23, 0.0601)
    assert slow["transports"] == "gloo/tcp"
    assert slow["rated_source"] == "tc" and slow["busbw_share"] == pytest.approx(0.0601 / 0.0625)
    assert link_label("slow", slow) == (
        "slow (tc 500mbit = 0.0625 GB/s; measured busbw 0.0601 GB/s = 96% of the tc rate 500mbit)"
    )
    assert ov["fast"]["rate"] is None and ov["fast"]["measured_busbw_gbps"] is None
    assert ov["fast"]["busbw_share"] is None  # unshaped: no rated rate, no share


def test_v2_database_gets_run_phases_and_keeps_its_runs(tmp_path):
    assert SCHEMA_VERSION >= 3
    db = str(tmp_path / "old.duckdb")
    with Store(db) as s, s.transaction():
        s.insert("runs", [{"run_id": "kept", "sweep_id": "s", "status": "ok"}])
    as_v2(db)
    with duckdb.connect(db, read_only=True) as con:  # not read_query: readers upgrade
        assert con.execute("SELECT value FROM meta").fetchall() == [("2",)]
    with Store(db) as s:
        with s.transaction():
            s.insert("run_phases", [{"run_id": "kept", "rank": None, "phase": "commit",
                                     "seconds": 0.5}])  # fmt: skip
        assert s.query("SELECT run_id, status FROM runs")[1] == [("kept", "ok")]
    assert read_query(db, "SELECT value FROM meta")[1] == [(str(SCHEMA_VERSION),)]
    with Reader(db) as r:
        assert r.rows(Q.REPORT_PHASES, sweep_id="s") == [
            {"phase": "commit", "n_runs": 1, "median_s": 0.5, "total_s": 0.5}
        ]


def test_a_reading_command_upgrades_a_v2_database_once(tmp_path):
    db = str(tmp_path / "old.duckdb")
    Store(db).close()
    as_v2(db)
    bring_up_to_date(db)
    bring_up_to_date(db)  # nothing due: no second write
    with Reader(db) as r:
        assert r.rows(Q.REPORT_PHASES, sweep_id="s") == []
    assert read_query(db, "SELECT value FROM meta")[1] == [(str(SCHEMA_VERSION),)]
