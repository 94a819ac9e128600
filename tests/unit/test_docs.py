"""The docs cannot go stale: docs/schema.md matches the real schema (every table, view and
column it documents exists, and every one that exists is documented), every view or table the
README and docs name exists, and the README keeps the two commands a fresh machine runs.
The schema is built in an in-memory DuckDB (no file)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.store import TABLES, VIEWS
from orchestrator.store.schema_doc import columns, render

REPO = Path(__file__).resolve().parents[2]
SCHEMA_MD = REPO / "docs" / "schema.md"
REGENERATE = "regenerate it: .venv/bin/python -m orchestrator.store.schema_doc > docs/schema.md"


def _documented() -> dict[str, set[str]]:
    """`### `name` (view|table)` headings -> the columns of the table under each."""
    out: dict[str, set[str]] = {}
    current = None
    for line in SCHEMA_MD.read_text().splitlines():
        m = re.match(r"### `([a-z_0-9]+)` \((view|table)\)", line)
        if m:
            current = m.group(1)
            out[current] = set()
        elif current and (c := re.match(r"\| `([a-z_0-9]+)` \|", line)):
            out[current].add(c.group(1))
    return out


@pytest.fixture(scope="module")
def real() -> dict[str, set[str]]:
    return {name: {c for c, _ in cols} for name, cols in columns().items()}


def test_every_documented_view_table_and_column_exists(real):
    documented = _documented()
    assert documented, "docs/schema.md documents nothing"
    assert set(documented) - set(real) == set(), REGENERATE
    missing_cols = {n: sorted(cols - real[n]) for n, cols in documented.items() if cols - real[n]}
    assert missing_cols == {}, REGENERATE


def test_every_view_table_and_column_is_documented(real):
    documented = _documented()
    assert set(real) - set(documented) == set(), REGENERATE
    undocumented = {n: sorted(real[n] - documented[n]) for n in real if real[n] - documented[n]}
    assert undocumented == {}, REGENERATE


def test_schema_md_is_the_generated_text():
    assert SCHEMA_MD.read_text() == render(), REGENERATE


def _markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


SQL_NAME = re.compile(r"\b(?:FROM|JOIN)\s+([a-z_][a-z_0-9]*)", re.I)
VIEWISH = re.compile(r"`([a-z]+_(?:summary|sensitivity|bandwidth|overview|times|stats))`")


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_view_named_in_the_docs_exists(path):
    text = path.read_text()
    known = set(TABLES) | set(VIEWS)
    named = set(VIEWISH.findall(text))
    for block in re.findall(r"```sql\n(.*?)```", text, flags=re.S):
        named |= {n for n in SQL_NAME.findall(block) if n.lower() != "select"}
    assert named - known == set()


def test_readme_starts_with_the_two_commands():
    text = (REPO / "README.md").read_text()
    head = text[: text.index("\n## ")]
    assert "bash scripts/quickstart.sh" in head
    assert ".venv/bin/python -m pytest -q" in head


def test_readme_examples_are_real_sweep_files():
    text = (REPO / "README.md").read_text()
    shown = re.findall(r"`(sweeps/[a-z0-9_.-]+\.yaml)`:\n\n```yaml\n(.*?)```", text, flags=re.S)
    assert shown, "README shows no sweep file"
    for path, body in shown:
        assert body == (REPO / path).read_text(), f"README's {path} differs from the file"
    for path in set(re.findall(r"\bsweeps/[a-z0-9_.-]+\.yaml\b", text)):
        assert (REPO / path).exists(), path


def test_one_default_slow_rate():
    from orchestrator.emulated.shapes import DEFAULT_LINKS

    default = dict(s.partition("=")[::2] for s in DEFAULT_LINKS)["slow"]
    quickstart = (REPO / "scripts" / "quickstart.sh").read_text()
    readme = (REPO / "README.md").read_text()
    assert f"--link slow={default}" in quickstart
    rates = set(re.findall(r"slow=(\d+[kmg]bit)", readme))
    assert rates == {default}, rates


HISTORY = re.compile(r"\b[Ii]ssues? \d+|\bitems? \d+\b")
"""A tracker's issue or item number: the tracker is not in the repository, so a reader cannot
follow it; code and docs say the reason itself (a public project's issue is cited by its URL or
``owner/repo#N``)."""


def test_code_and_docs_give_reasons_not_tracker_numbers():
    roots = ["orchestrator", "workloads", "tests", "scripts", "bench", "clusters", "sweeps", "docs"]
    files = [REPO / "README.md"]
    for root in roots:
        files += [p for p in (REPO / root).rglob("*") if p.suffix in (".py", ".md", ".sh", ".yaml")]
    hits = [
        f"{p.relative_to(REPO)}:{i}: {line.strip()}"
        for p in files
        for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if HISTORY.search(line) and "HISTORY = re.compile" not in line
    ]
    assert hits == []


def test_the_readme_fits_on_a_few_screens():
    """The front page: what linksweep answers, the two commands, the quickstart, the GPU status,
    a minimal sweep file, the command list, links into docs/ for the rest (about 15 KB)."""
    assert len((REPO / "README.md").read_bytes()) <= 15_000


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_in_the_readme_and_docs_resolves():
    """A page moved or a heading renamed leaves no dead link behind (file and anchor)."""
    bad = []
    for page in _markdown_files():
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, fragment = target.partition("#")
            dest = (page.parent / path) if path else page
            if not dest.exists():
                bad.append(f"{page.relative_to(REPO)}: {target}")
            elif fragment and dest.suffix == ".md":
                body = re.sub(r"```.*?```", "", dest.read_text(), flags=re.S)
                heads = {_slug(h) for h in re.findall(r"^#{1,6} (.*)$", body, flags=re.M)}
                if fragment not in heads:
                    bad.append(f"{page.relative_to(REPO)}: {target}")
    assert bad == []
