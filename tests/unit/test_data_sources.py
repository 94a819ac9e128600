"""Every file under tests/data is listed, with its source, in tests/data/SOURCES.md."""

from __future__ import annotations

import re
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"


def _listed() -> dict[str, str]:
    rows = {}
    for line in (DATA / "SOURCES.md").read_text().splitlines():
        m = re.match(r"\| `([^`]+)` \| (.+) \| (.+) \|\s*$", line)
        if m:
            rows[m.group(1)] = m.group(3)
    return rows


def test_every_file_under_tests_data_is_in_the_index():
    files = sorted(
        str(p.relative_to(DATA)) for p in DATA.rglob("*") if p.is_file() and p.name[0] != "."
    )
    listed = _listed()
    assert [f for f in files if f not in listed] == []
    assert [f for f in listed if f not in files] == []  # no row for a file that is gone


def test_every_captured_fixture_names_a_public_source():
    for name, source in _listed().items():
        if name.endswith((".log", ".txt")):
            assert "http" in source or "/" in source, (name, source)
