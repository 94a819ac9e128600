"""``linksweep import nccl-tests`` end to end on a database file: rows land beside linksweep's
own microbenchmark and never pool with it, the report shows both, bad input writes nothing.

No Ray: a linksweep sweep is planted (sweeps + link_bench rows, as the driver stores them)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.store import Q, Reader, Store, read_query
from tests.captures import CAPTURES, needs

DATA = CAPTURES / "nccl_tests"
pytestmark = needs(DATA)
SID = "20261124-000000-beside"
A3MEGA = str(DATA / "a3mega_h100_2node_binary_on_command_line.log")
EFA = str(DATA / "eks_efa_t4_2node_mpirun_prefix.log")


def _plant(db: str) -> None:
    """A linksweep sweep whose microbenchmark measured link nv (all_reduce, 1 MiB and 8 GiB,
    three iterations each)."""
    bench = [
        {"sweep_id": SID, "link": "nv", "placement": "same-node", "backend": "nccl",
         "world_size": 2, "op": "all_reduce", "msg_bytes": size, "iteration": i,
         "time_s": t, "algbw_gbps": size / t / 1e9, "busbw_gbps": size / t / 1e9,
         "status": "ok", "source": "linksweep"}
        for size, times in ((1048576, (1e-4, 2e-4, 3e-4)), (8589934592, (0.1, 0.1, 0.1)))
        for i, t in enumerate(times)
    ]  # fmt: skip
    with Store(db) as s, s.transaction():
        s.insert("sweeps", [{"sweep_id": SID, "name": "ours", "spec": json.dumps({}),
                             "status": "ok", "n_runs_planned": 0}])  # fmt: skip
        s.insert("link_bench", bench)


def _bandwidth(db: str) -> dict[tuple, tuple]:
    cols, rows = read_query(
        db,
        "SELECT source, in_place, msg_bytes, iterations, busbw_gbps FROM link_bandwidth "
        f"WHERE sweep_id = '{SID}' AND link = 'nv'",
    )
    return {(r[0], r[1], r[2]): (r[3], r[4]) for r in rows}


def test_import_beside_linksweep_never_pools_and_the_report_shows_both(tmp_path, capsys):
    db = str(tmp_path / "r.duckdb")
    _plant(db)
    rc = main(["import", "nccl-tests", A3MEGA, "--link", "nv", "--sweep", SID, "--db", db])
    assert rc == 0
    assert f"imported 62 rows of {Path(A3MEGA).name} (all_reduce, world size 16" in (
        capsys.readouterr().out
    )
    bw = _bandwidth(db)
    # linksweep's three iterations keep their own median; nccl-tests' two placements stay apart
    assert bw[("linksweep", None, 8589934592)] == (3, pytest.approx(85.89934592))
    assert bw[("nccl-tests", False, 8589934592)] == (1, 338.82)  # as printed
    assert bw[("nccl-tests", True, 8589934592)] == (1, 337.35)
    assert bw[("nccl-tests", False, 1048576)] == (1, 9.68)
    with Reader(db) as r:
        # the driver and project price links from linksweep's own figures only
        (busbw,) = r.rows(Q.LINK_BUSBW, sweep_id=SID)
        assert busbw["busbw_gbps"] == pytest.approx(85.89934592)
        algbw = r.rows(Q.LINK_ALGBW, sweep_id=SID, link="nv", placement="same-node")
        assert len(algbw) == 2
        (sweep,) = r.rows(Q.SWEEP, sweep_id=SID)
    (record,) = json.loads(sweep["spec"])["imports"]
    assert record["avg_busbw_gbps"] == 70.742 and record["hosts"] == [
        "ztan-mig-235z",
        "ztan-mig-gq73",
    ]

    out = tmp_path / "report"
    assert main(["report", "--db", db, "--sweep", SID, "--out", str(out)]) == 0
    html = (out / "report.html").read_text()
    assert "<h2 id='nccltests'>" in html
    assert "<td class='num'>8 GiB</td><td class='num'>85.9</td><td class='num'>338.82</td>" in html

    # the same op of the same link again: refused, nothing added
    n = len(read_query(db, "SELECT * FROM link_bench")[1])
    rc = main(["import", "nccl-tests", A3MEGA, "--link", "nv", "--sweep", SID, "--db", db])
    assert rc == 2 and "already holds nccl-tests all_reduce for link nv" in capsys.readouterr().err
    assert len(read_query(db, "SELECT * FROM link_bench")[1]) == n


def test_import_without_sweep_makes_one_that_latest_sweep_skips(tmp_path, capsys):
    db = str(tmp_path / "r.duckdb")
    _plant(db)
    # the file names no binary; its redop, root, size/count and bus factor fit all_reduce only
    rc = main(["import", "nccl-tests", EFA, "--link", "efa", "--db", db])
    assert rc == 0
    _, rows = read_query(
        db, "SELECT sweep_id, name, status, started_at, spec FROM sweeps WHERE name LIKE 'import:%'"
    )
    (sid, name, status, started, spec) = rows[0]
    assert (name, status, started) == ("import:eks_efa_t4_2node_mpirun_prefix.log", "ok", None)
    assert json.loads(spec)["imports"][0]["op_source"] == "columns and figures"
    _, bench = read_query(
        db,
        "SELECT msg_bytes, in_place, busbw_gbps, wrong, world_size, source FROM link_bench "
        f"WHERE sweep_id = '{sid}' AND msg_bytes = 268435456 ORDER BY in_place",
    )
    assert bench == [(268435456, False, 3.15, 0, 2, "nccl-tests"),
                     (268435456, True, 3.13, 0, 2, "nccl-tests")]  # fmt: skip
    with Reader(db) as r:  # "the newest sweep" is still the one that ran
        assert r.rows(Q.LATEST_SWEEPS, limit=1)[0]["sweep_id"] == SID


@pytest.mark.parametrize(
    "args, message",
    [
        (["--link", "efa", "--op", "all_gather"],
         "line 55: --op all_gather, but the table fits all_reduce (redop sum"),
        (["--link", "efa", "--op", "all_reduce", "--world-size", "4"],
         "--world-size 4, but the file's rank banners count 2 ranks"),
        (["--link", "efa", "--op", "all_reduce", "--sweep", "nope"], "--sweep nope: no such sweep"),
        (["--link", "efa", "--op", "sendrecv"], "linksweep stores all_reduce"),
    ],
)  # fmt: skip
def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, args, message):
    db = str(tmp_path / "r.duckdb")
    _plant(db)
    before = read_query(db, "SELECT count(*) FROM link_bench")[1]
    rc = main(["import", "nccl-tests", EFA, "--db", db, *args])
    assert rc == 2 and message in capsys.readouterr().err
    assert read_query(db, "SELECT count(*) FROM link_bench")[1] == before


def test_unreadable_file_creates_no_database(tmp_path, capsys):
    db = str(tmp_path / "new.duckdb")
    bad = tmp_path / "x.log"
    bad.write_text("# nThread 1 nGpus 1\nsomething else\n")
    assert main(["import", "nccl-tests", str(bad), "--link", "l", "--db", db]) == 2
    assert "no nccl-tests table" in capsys.readouterr().err
    assert not os.path.exists(db)


def test_a_file_that_leaves_two_ops_asks_for_op_naming_them(tmp_path, capsys):
    db = str(tmp_path / "r.duckdb")
    gke = str(DATA / "gke_a3high_all_gather_na_indented.log")
    assert main(["import", "nccl-tests", gke, "--link", "nv", "--db", db]) == 2
    err = capsys.readouterr().err
    assert "fits all_gather and all_to_all" in err and "pass --op" in err
    assert not os.path.exists(db)
    assert (
        main(["import", "nccl-tests", gke, "--link", "nv", "--db", db, "--op", "all_gather"]) == 0
    )
