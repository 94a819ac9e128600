"""Every file under tests/data is listed, with its source, in tests/data/SOURCES.md, and none of
them is someone else's capture: those live in shared/data (tests/captures.py)."""

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


def test_tests_data_holds_only_what_the_project_made():
    """Every file is this project's: its own runs' output or a file constructed here, never a
    log or matrix copied from a public source (those are read from shared/data)."""
    for name, source in _listed().items():
        assert not name.endswith((".log", ".txt")), name
        assert name == "SOURCES.md" or "here" in source or "this repository" in source, name
