"""Schema v7: each collective's dtype (``comms.dtype``) and DDP's gradient dtype as a variant
column (``ddp_grad_dtype``). A v6 database (the v7 columns dropped, as v6 wrote it) upgrades in
place: DDP rows say fp32, as every DDP run before v7 all-reduced fp32; ZeRO runs' ddp_grad_dtype
is n/a and their collectives' dtype NULL (not recorded)."""

from __future__ import annotations

from orchestrator.store import SCHEMA_VERSION, Store, read_query
from tests.unit.schema_downgrade import as_version


def test_v6_database_upgrades_with_each_collectives_dtype(tmp_path):
    db = str(tmp_path / "v6.duckdb")
    key = {"sweep_id": "s", "offload": "none", "grad_accum": 1, "bucket_mb": 25}
    with Store(db) as s, s.transaction():
        s.insert("sweeps", [{"sweep_id": "s", "name": "v6"}])
        s.insert(
            "runs",
            [
                {"run_id": "d", "seq": 1, "strategy": "ddp", **key},
                {"run_id": "z", "seq": 2, "strategy": "zero3", **key},
            ],
        )
        s.insert(
            "comms",
            [
                {"run_id": "d", "rank": 0, "op": "all_reduce", "msg_bytes": 8, "count": 1},
                {"run_id": "z", "rank": 0, "op": "all_gather", "msg_bytes": 8, "count": 1},
            ],
        )
        s.insert(
            "variant_stats",
            [{"strategy": st, "link": "a", "placement": "pack", **key} for st in ("ddp", "zero3")],
        )
    as_version(db, 6)
    with Store(db) as s:
        assert s.query("SELECT run_id, ddp_grad_dtype FROM runs ORDER BY run_id")[1] == [
            ("d", "fp32"),
            ("z", "n/a"),
        ]
        assert s.query("SELECT run_id, dtype FROM comms ORDER BY run_id")[1] == [
            ("d", "fp32"),
            ("z", None),
        ]
        assert s.query("SELECT strategy, ddp_grad_dtype FROM variant_summary ORDER BY 1")[1] == [
            ("ddp", "fp32"),
            ("zero3", "n/a"),
        ]
        assert s.query("SELECT ddp_grad_dtype FROM run_summary ORDER BY run_id")[1] == [
            ("fp32",),
            ("n/a",),
        ]
        assert s.query("SELECT count(*) FROM link_model WHERE ddp_grad_dtype IS NULL")[1] == [(0,)]
    assert SCHEMA_VERSION >= 7  # v8 and later keep what v7 added
    assert read_query(db, "SELECT value FROM meta")[1] == [(str(SCHEMA_VERSION),)]


def test_report_variants_name_what_each_strategy_sent(tmp_path):
    from orchestrator.store import Q

    key = {"sweep_id": "s", "offload": "none", "grad_accum": 1, "bucket_mb": 25}
    key |= {"link": "a", "placement": "pack", "overlap_comm": "default"}
    runs = [
        ("d32", "ddp", "fp32", "ok"),
        ("d16", "ddp", "bf16", "ok"),
        ("z3", "zero3", "n/a", "ok"),
        ("z3x", "zero3", "n/a", "failed"),  # not in figures: its collectives are not named
    ]
    comms = [
        ("d32", "all_reduce", 4000, 1, "fp32"),
        ("d16", "all_reduce", 2000, 1, "bf16"),
        ("z3", "all_gather", 2000, 2, "bf16"),
        ("z3", "reduce_scatter", 2000, 1, "bf16"),
        ("z3", "all_reduce", 8, 3, "fp32"),  # a scalar norm: left out
        ("z3", "broadcast", 16, 2, "int64"),  # under 1% of the largest (4000 B): left out
        ("z3x", "all_to_all", 9000, 1, "fp32"),
    ]
    with Store(str(tmp_path / "r.duckdb")) as s:
        with s.transaction():
            s.insert("sweeps", [{"sweep_id": "s", "name": "r"}])
            s.insert(
                "runs",
                [
                    {"run_id": r, "strategy": st, "ddp_grad_dtype": g, "status": ok, **key}
                    for r, st, g, ok in runs
                ],
            )
            s.insert(
                "comms",
                [
                    {"run_id": r, "rank": 0, "op": op, "msg_bytes": b, "count": n, "dtype": d}
                    for r, op, b, n, d in comms
                ],
            )
            s.insert(
                "variant_stats",
                [
                    {"strategy": "ddp", "ddp_grad_dtype": "fp32", **key},
                    {"strategy": "ddp", "ddp_grad_dtype": "bf16", **key},
                    {"strategy": "zero3", "ddp_grad_dtype": "n/a", **key},
                ],
            )
        got = {
            (v["strategy"], v["ddp_grad_dtype"]): v["comm_dtypes"]
            for v in s.rows(Q.REPORT_VARIANTS, sweep_id="s")
        }
    assert got == {
        ("ddp", "fp32"): "all_reduce fp32",
        ("ddp", "bf16"): "all_reduce bf16",
        ("zero3", "n/a"): "all_gather bf16 + reduce_scatter bf16",
    }
