"""Schema v7: each collective's dtype (``comms.dtype``) and DDP's gradient dtype as a variant
column (``ddp_grad_dtype``, which v13 folds into ``grad_compression``: fp32 reads as none). A v6
database (the v7 columns dropped, as v6 wrote it) upgrades in place through v7 and v13: DDP rows
said fp32 at v7, as every DDP run before v7 all-reduced fp32, and so read uncompressed (none)
now; ZeRO runs' compression is n/a and their collectives' dtype NULL (not recorded)."""

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
        assert s.query("SELECT run_id, grad_compression FROM runs ORDER BY run_id")[1] == [
            ("d", "none"),
            ("z", "n/a"),
        ]
        assert s.query("SELECT run_id, dtype FROM comms ORDER BY run_id")[1] == [
            ("d", "fp32"),
            ("z", None),
        ]
        assert s.query("SELECT strategy, grad_compression FROM variant_summary ORDER BY 1")[1] == [
            ("ddp", "none"),
            ("zero3", "n/a"),
        ]
        assert s.query("SELECT grad_compression FROM run_summary ORDER BY run_id")[1] == [
            ("none",),
            ("n/a",),
        ]
        assert s.query("SELECT count(*) FROM link_model WHERE grad_compression IS NULL")[1] == [
            (0,)
        ]
        assert "ddp_grad_dtype" not in {r[0] for r in s.query("DESCRIBE runs")[1]}
    assert SCHEMA_VERSION >= 13  # v13 folds v7's ddp_grad_dtype into grad_compression
    assert read_query(db, "SELECT value FROM meta")[1] == [(str(SCHEMA_VERSION),)]


def test_report_variants_name_what_each_strategy_sent(tmp_path):
    from orchestrator.store import Q

    key = {"sweep_id": "s", "offload": "none", "grad_accum": 1, "bucket_mb": 25}
    key |= {"link": "a", "placement": "pack", "overlap_comm": "default"}
    runs = [
        ("d32", "ddp", "none", "ok"),
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
                    {"run_id": r, "strategy": st, "grad_compression": g, "status": ok, **key}
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
                    {"strategy": "ddp", "grad_compression": "none", **key},
                    {"strategy": "ddp", "grad_compression": "bf16", **key},
                    {"strategy": "zero3", "grad_compression": "n/a", **key},
                ],
            )
        got = {
            (v["strategy"], v["grad_compression"]): v["comm_dtypes"]
            for v in s.rows(Q.REPORT_VARIANTS, sweep_id="s")
        }
    assert got == {
        ("ddp", "none"): "all_reduce fp32",
        ("ddp", "bf16"): "all_reduce bf16",
        ("zero3", "n/a"): "all_gather bf16 + reduce_scatter bf16",
    }
