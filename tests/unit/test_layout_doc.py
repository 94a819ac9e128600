"""The module map cannot go stale: ``docs/layout.md`` names every module of ``orchestrator/``
and ``workloads/`` and names none that is gone, and each package's ``__init__.py`` lists its own
modules. Reads files only (nothing here imports the modules).

How layout.md names a module (the rule both directions use):

- by its path, from the repository root or from its top package (``orchestrator/sweep/spec.py``
  or ``sweep/spec.py``), anywhere in the page (the diagram, the prose, a table), or
- by its file name (``spec.py``) in the table row of its folder: a row belongs to the folder of
  the first `` `path` `` of its first cell (``orchestrator/sweep/`` -> orchestrator/sweep,
  ``workloads/train.py`` -> workloads).

A package is named by its own row (so every package has one); ``__init__.py`` is the package's,
not a module of its own. Backticked bare words (``plan_sweep``, ``VARIANT_KEY``) are free text:
only ``.py`` names count, so every one of them must exist, where the page says it is.

A package's ``__init__.py`` lists its modules under a line ``One module per job``: one module a
line, indented four spaces, its name first and then its job (continuation lines indented
deeper), up to the first blank line; the names are exactly the package's modules
(``__main__.py`` aside, an entry point).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAYOUT = REPO / "docs" / "layout.md"
PACKAGES = ("orchestrator", "workloads")

PY_NAME = re.compile(r"(?<![\w./-])((?:[\w-]+/)*\w+\.py)\b")
"""A module's path or file name as the page writes it (``sweep/spec.py``, ``spec.py``)."""
FIRST_PATH = re.compile(r"`([\w./-]+)`")


def _modules() -> list[str]:
    """Every module's path from the repository root, ``__init__.py`` aside."""
    return sorted(
        p.relative_to(REPO).as_posix()
        for pkg in PACKAGES
        for p in (REPO / pkg).rglob("*.py")
        if p.name != "__init__.py"
    )


def _packages() -> list[str]:
    return sorted(
        p.parent.relative_to(REPO).as_posix()
        for pkg in PACKAGES
        for p in (REPO / pkg).rglob("__init__.py")
    )


def _rows(text: str) -> list[tuple[str, str]]:
    """(folder, the row's text) for each table row but the header and its rule."""
    out = []
    for line in text.splitlines():
        if not line.startswith("|") or re.match(r"\|\s*-", line):
            continue
        first = line.split("|")[1]
        m = FIRST_PATH.search(first)
        if m is None:  # the header
            continue
        path = m.group(1)
        out.append((path.rstrip("/") if path.endswith("/") else path.rpartition("/")[0], line))
    return out


def _named(text: str) -> tuple[set[str], set[tuple[str, str]], list[tuple[str, str]]]:
    """(paths named anywhere, (folder, file name) pairs named in a folder's row, every ``.py``
    name with where it stands: the folder of its row, or '' outside the table)."""
    paths, in_rows, every = set(), set(), []
    rows = _rows(text)
    row_lines = {line for _, line in rows}
    for folder, line in rows:
        for name in PY_NAME.findall(line):
            every.append((folder, name))
            if "/" in name:
                paths.add(name)
            else:
                in_rows.add((folder, name))
    for line in text.splitlines():
        if line in row_lines:
            continue
        for name in PY_NAME.findall(line):
            every.append(("", name))
            if "/" in name:
                paths.add(name)
    return paths, in_rows, every


def _mentioned(module: str, paths: set[str], in_rows: set[tuple[str, str]]) -> bool:
    folder, _, name = module.rpartition("/")
    from_package = module.partition("/")[2]
    return module in paths or from_package in paths or (folder, name) in in_rows


def test_the_mention_rule_reads_a_page_as_documented():
    page = (
        "```\n  -> sweep/planner.py  plan_sweep\n```\n\n| package or module | job |\n| --- | --- |\n"
        "| `orchestrator/sweep/` | `spec.py` (the file), `plan_sweep` |\n"
        "| `workloads/train.py`, `model.py` | the loop; `rows.py` elsewhere |\n"
    )
    paths, in_rows, every = _named(page)
    named = {
        m: _mentioned(m, paths, in_rows)
        for m in (
            "orchestrator/sweep/spec.py",
            "orchestrator/sweep/planner.py",
            "orchestrator/sweep/rows.py",
            "workloads/train.py",
            "workloads/model.py",
        )
    }
    assert named == {
        "orchestrator/sweep/spec.py": True,  # its file name in its folder's row
        "orchestrator/sweep/planner.py": True,  # its path from its top package, in the diagram
        "orchestrator/sweep/rows.py": False,  # a file name in another folder's row
        "workloads/train.py": True,
        "workloads/model.py": True,
    }
    assert ("workloads", "rows.py") in every  # so the gone check looks for workloads/rows.py
    assert not _exists("rows.py", "workloads")


def test_layout_names_every_module():
    paths, in_rows, _ = _named(LAYOUT.read_text())
    missing = [m for m in _modules() if not _mentioned(m, paths, in_rows)]
    assert missing == [], (
        "docs/layout.md does not name these modules (write `name.py` in its folder's row, "
        "with its job in a few words from its docstring): " + ", ".join(missing)
    )


def test_every_package_has_its_row():
    folders = {folder for folder, _ in _rows(LAYOUT.read_text())}
    assert [p for p in _packages() if p not in folders] == []


def _exists(name: str, folder: str) -> bool:
    if "/" in name:
        return any((REPO / top / name).is_file() for top in ("", *PACKAGES))
    if folder:
        return (REPO / folder / name).is_file()
    return any(next((REPO / top).rglob(name), None) for top in (*PACKAGES, "bench", "tests"))


def test_layout_names_no_module_that_is_gone():
    text = LAYOUT.read_text()
    gone = sorted(
        f"{name} (in the row of {folder}/)" if folder else name
        for folder, name in set(_named(text)[2])
        if not _exists(name, folder)
    )
    assert gone == [], f"docs/layout.md names modules that do not exist: {gone}"
    folders = sorted({folder for folder, _ in _rows(text)})
    assert [f for f in folders if not (REPO / f).is_dir()] == []


def listed_modules(docstring: str) -> list[str] | None:
    """The names under a package docstring's ``One module per job`` line, or None."""
    lines = docstring.splitlines()
    start = next((i for i, line in enumerate(lines) if "One module per job" in line), None)
    if start is None:
        return None
    while not lines[start].rstrip().endswith(":"):  # the heading may run over two lines
        start += 1
    names = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        if m := re.match(r" {4}(\w+)\b", line):
            names.append(m.group(1))
    return names


def test_the_list_reader_reads_a_block_as_documented():
    doc = (
        "Words.\n\nOne module per job (none\nimports ray):\n    spec        the sweep file.\n"
        "    planner     spec -> runs,\n                continued.\n    ds_config the config.\n\n"
        "    other       after the blank line.\n"
    )
    assert listed_modules(doc) == ["spec", "planner", "ds_config"]
    assert listed_modules("No list.") is None


def test_each_package_lists_its_modules():
    wrong = {}
    for package in _packages():
        path = REPO / package / "__init__.py"
        listed = listed_modules(ast.get_docstring(ast.parse(path.read_text())) or "")
        modules = sorted(
            p.stem for p in (REPO / package).glob("*.py") if p.stem not in ("__init__", "__main__")
        )
        if listed is None or sorted(listed) != modules:
            wrong[f"{package}/__init__.py"] = {
                "not listed": sorted(set(modules) - set(listed or ())),
                "listed, not a module": sorted(set(listed or ()) - set(modules)),
                "no 'One module per job' block": listed is None,
            }
    assert wrong == {}
