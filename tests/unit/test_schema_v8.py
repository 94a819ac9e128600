"""Schema v8 and v9. v8: FSDP2 beside DDP and ZeRO; two variant keys (``grad_sync``,
``reshard_after_forward``), hsdp's shard size, and each collective's group size. A v7 database
(the v8 columns dropped, as v7 wrote it) upgrades in place: DDP ran ``no_sync`` until the last
micro-batch (``last``), ZeRO has no sync axis and no strategy before v8 had the reshard axis
(``n/a``), and every collective ran on the world group. v9: the accumulation check, NULL for
runs stored before it."""

from __future__ import annotations

from orchestrator.store import SCHEMA_VERSION, Store
from tests.unit.schema_downgrade import as_version


def test_v7_database_upgrades_with_the_sync_axes_and_group_sizes(tmp_path):
    db = str(tmp_path / "v7.duckdb")
    key = {"sweep_id": "s", "offload": "none", "grad_accum": 4, "bucket_mb": 25}
    with Store(db) as s, s.transaction():
        s.insert("sweeps", [{"sweep_id": "s", "name": "v7"}])
        s.insert(
            "runs",
            [
                {"run_id": "d", "seq": 1, "strategy": "ddp", "world_size": 2, **key},
                {"run_id": "z", "seq": 2, "strategy": "zero3", "world_size": 4, **key},
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
    as_version(db, 7)
    with Store(db) as s:
        got = s.query(
            "SELECT run_id, grad_sync, reshard_after_forward, hsdp_shard_size FROM runs "
            "ORDER BY run_id"
        )[1]
        assert got == [("d", "last", "n/a", None), ("z", "n/a", "n/a", None)]
        assert s.query("SELECT run_id, group_size FROM comms ORDER BY run_id")[1] == [
            ("d", 2),
            ("z", 4),
        ]
        assert s.query(
            "SELECT strategy, grad_sync, reshard_after_forward FROM variant_summary ORDER BY 1"
        )[1] == [("ddp", "last", "n/a"), ("zero3", "n/a", "n/a")]
        assert s.query("SELECT value FROM meta WHERE key = 'schema_version'")[1] == [
            (str(SCHEMA_VERSION),)
        ]


def test_v8_database_gains_the_accumulation_check_columns_empty(tmp_path):
    """v9: a run stored before the check has no verdict (NULL), not a made-up one."""
    db = str(tmp_path / "v8.duckdb")
    with Store(db) as s, s.transaction():
        s.insert("sweeps", [{"sweep_id": "s", "name": "v8"}])
        s.insert("runs", [{"run_id": "d", "seq": 1, "strategy": "ddp", "sweep_id": "s"}])
    as_version(db, 8)
    with Store(db) as s:
        got = s.query("SELECT non_final_bytes, promised_non_final_bytes, accum_check FROM runs")
        assert got[1] == [(None, None, None)]
        assert s.query("SELECT accum_check FROM run_summary")[1] == [(None,)]
