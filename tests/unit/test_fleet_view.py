"""The fleet check's page (orchestrator/report/fleet_view.py) on synthetic rows, and
``linksweep report --fleet`` on a small DuckDB file written with orchestrator.store.Store."""

from __future__ import annotations

import base64
import datetime as dt
import re

import pytest

from orchestrator.cli import main
from orchestrator.report.fleet_view import (
    _busbw_matrix,
    heatmap_caption,
    heatmap_png_name,
    render_fleet_html,
)
from orchestrator.store import Store
from tests.unit.test_fleet_text import FLEET_ID, SLOW_WHY, fleet

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_page_is_self_contained_with_the_heatmap_and_the_suspects_why():
    f = fleet(4, slow=2, failed=(0, 1))
    page, pngs = render_fleet_html(**f)
    assert list(pngs) == ["fleet_heatmap_default.png"]
    png = pngs["fleet_heatmap_default.png"]
    assert png.startswith(PNG_MAGIC)
    embedded = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert [base64.b64decode(b) for b in embedded] == [png]
    suspects = page[page.index("id='suspects'") : page.index("id='nodes'")]
    assert SLOW_WHY in suspects and "198.18.0.3" in suspects
    assert f"--exclude-suspects {FLEET_ID}" in page
    assert "diagonal is each node&#x27;s intra-node busbw" in page  # the caption says so
    assert "median 2.00 s, max 3.00 s over 3 round(s)" in page
    assert "link default: 1 pair failed, not judged" in page
    assert "RuntimeError: gloo timeout" in page  # the failed pair's error, in the pairs table
    assert "&quot;mad_k&quot;: 3.0" in page  # provenance: the rule's JSON
    assert "<script" not in page.lower()
    assert not re.search(r"(src|href)\s*=\s*['\"]?(https?:|//)", page)
    assert "@import" not in page and "url(" not in page


def test_one_heatmap_per_link_and_no_suspect_box():
    page, pngs = render_fleet_html(**fleet(3, slow=None, links=("eth", "ib/roce")))
    assert list(pngs) == ["fleet_heatmap_eth.png", "fleet_heatmap_ib_roce.png"]
    assert "No suspect among 3 node(s)." in page
    assert heatmap_png_name("a b/c") == "fleet_heatmap_a_b_c.png"


def test_a_link_without_pairs_says_so_instead_of_drawing():
    f = fleet(2, slow=None)
    check = dict(f["check"], links=[{"name": "default"}, {"name": "ib"}])
    page, pngs = render_fleet_html(**dict(f, check=check))
    assert list(pngs) == ["fleet_heatmap_default.png"]
    assert "No pair was measured on link ib." in page


def test_a_check_that_stopped_says_no_verdict():
    f = fleet(2, slow=None)
    check = dict(f["check"], status="interrupted", error="KeyboardInterrupt")
    page, _ = render_fleet_html(**dict(f, check=check))
    assert "No verdict: the check ended interrupted" in page and "No suspect among" not in page


def _both_ways(cells: dict) -> dict:
    return {**cells, **{(b, a): p for (a, b), p in cells.items()}}


CELLS = _both_ways(
    {
        ("a", "a"): {"status": "failed", "busbw_gbps": None},
        ("a", "b"): {"status": "ok", "busbw_gbps": 0.012, "slow": True},
        ("a", "c"): {"status": "failed", "busbw_gbps": None},
        ("b", "c"): {"status": "ok", "busbw_gbps": 0.048, "slow": False},
    }
)


def test_the_colour_matrix_holds_only_inter_node_pairs_measured_ok():
    values = _busbw_matrix(["a", "b", "c", "d"], CELLS)
    assert values[0, 1] == values[1, 0] == 0.012 and values[1, 2] == 0.048
    unset = [(0, 0), (1, 1), (0, 2), (2, 0), (0, 3), (3, 3)]  # diagonal, failed, not measured
    assert all(values[r, c] != values[r, c] for r, c in unset)  # NaN


def test_the_caption_counts_each_pair_once_and_never_the_diagonal():
    caption = heatmap_caption("eth", CELLS, lo=0.012, hi=0.048, coloured=True)
    assert "colour from 0 to the fleet's best 0.0480 GB/s (lowest 0.0120)" in caption
    assert "slow (below the suspect rule's bound), 1 pair(s); hatched FAIL: failed, 1;" in caption
    assert "none measured ok." in heatmap_caption("eth", CELLS, 0.0, 1.0, coloured=False)


# --- linksweep report --fleet on a real DuckDB file -------------------------------------------


T0 = dt.datetime(2026, 11, 24, 4, 0, tzinfo=dt.timezone.utc)


@pytest.fixture
def fleet_db(tmp_path):
    db = str(tmp_path / "fleet.duckdb")
    f = fleet(4, slow=2, failed=(0, 1))
    other = dict(f["check"], fleet_id="fleet-older", started_at=T0 - dt.timedelta(days=1))
    with Store(db) as st, st.transaction():
        st.insert("fleet_checks", [dict(f["check"], started_at=T0), other])
        st.insert("fleet_nodes", f["nodes"])
        st.insert("fleet_pairs", f["pairs"])
        st.insert("fleet_rounds", f["rounds"])
    return db


def test_report_fleet_writes_the_page_and_the_heatmap(fleet_db, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "fleet_heatmap_stale.png").write_bytes(b"from an earlier check")
    assert main(["report", "--db", fleet_db, "--out", str(out), "--fleet"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["fleet.html", "fleet_heatmap_default.png"]
    assert (out / "fleet_heatmap_default.png").read_bytes().startswith(PNG_MAGIC)
    page = (out / "fleet.html").read_text()
    assert f"linksweep fleet check {FLEET_ID}" in page  # the latest check by started_at
    assert SLOW_WHY in page  # through the view fleet_suspects
    assert f"report of fleet check {FLEET_ID} (1 suspect(s))" in capsys.readouterr().out
    assert main(["report", "--db", fleet_db, "--out", str(out), "--fleet", "fleet-older"]) == 0
    assert "linksweep fleet check fleet-older" in (out / "fleet.html").read_text()


def test_report_fleet_unknown_id_names_the_flag_and_lists_checks(fleet_db, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["report", "--db", fleet_db, "--out", str(out), "--fleet", "nope"]) == 2
    msg = capsys.readouterr().err
    assert "--fleet nope: no such fleet check" in msg
    assert f"{FLEET_ID}, fleet-older" in msg
    assert not out.exists()


def test_report_fleet_refuses_sweep_flags(fleet_db, tmp_path, capsys):
    args = ["report", "--db", fleet_db, "--out", str(tmp_path), "--fleet", "--sweep", "x"]
    assert main(args) == 2
    assert "--fleet reports a fleet check" in capsys.readouterr().err
