"""The code's shape, checked by reading source files (nothing here imports the modules):
one-way dependencies, one Ray package, one DuckDB module, no SQL outside the store, small files.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAX_FILE_LINES = 500
MAX_EXECUTE_SWEEP_LINES = 80


def _py(folder: str) -> list[Path]:
    files = sorted((REPO / folder).rglob("*.py"))
    assert files, f"no .py files under {folder}/"
    return files


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _lines_matching(path: Path, pattern: str) -> list[str]:
    rx = re.compile(pattern)
    return [line for line in path.read_text().splitlines() if rx.search(line)]


def test_workloads_never_import_the_driver():
    offenders = {
        _rel(p): hits
        for p in _py("workloads")
        if (hits := _lines_matching(p, r"^\s*(from|import)\s+orchestrator\b"))
    }
    assert offenders == {}


def test_only_the_raycluster_package_imports_ray():
    """Ray is reached through orchestrator/raycluster/ only; of it, result.py (rows and unit
    tests build a RunResult), reach.py (the join error's wording) and __init__.py never."""
    importers = [
        _rel(p)
        for p in _py("orchestrator")
        if _lines_matching(p, r"^\s*(import\s+ray\b|from\s+ray\b)")
    ]
    assert importers == [
        "orchestrator/raycluster/launchers.py",
        "orchestrator/raycluster/nodes.py",
        "orchestrator/raycluster/runs.py",
        "orchestrator/raycluster/session.py",
    ]
    ray_free = ["__init__.py", "result.py", "reach.py"]
    through_the_package = {
        name: hits
        for name in ray_free
        if (
            hits := _lines_matching(
                REPO / "orchestrator" / "raycluster" / name,
                r"^\s*from\s+orchestrator\.raycluster(\.(session|nodes|runs|launchers)\b|"
                r"\s+import\s+.*\b(session|nodes|runs|launchers)\b)",
            )
        )
    }
    assert through_the_package == {}


def test_only_the_store_imports_duckdb():
    importers = [
        _rel(p)
        for folder in ("orchestrator", "workloads", "bench")
        for p in _py(folder)
        if _lines_matching(p, r"^\s*(import\s+duckdb\b|from\s+duckdb\b)")
    ]
    assert importers == ["orchestrator/store/db.py"]


def test_no_sql_in_the_report_or_the_cli():
    files = [*_py("orchestrator/report"), REPO / "orchestrator" / "cli.py"]
    offenders = {_rel(p): hits for p in files if (hits := _lines_matching(p, r"\bSELECT\b"))}
    assert offenders == {}


@pytest.mark.parametrize("folder", ["orchestrator", "workloads", "bench"])
def test_no_source_file_over_500_lines(folder):
    sizes = {_rel(p): len(p.read_text().splitlines()) for p in _py(folder)}
    assert {f: n for f, n in sizes.items() if n > MAX_FILE_LINES} == {}


def test_execute_sweep_reads_on_one_screen():
    tree = ast.parse((REPO / "orchestrator" / "sweep.py").read_text())
    (fn,) = [
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "execute_sweep"
    ]
    first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
    assert fn.end_lineno - first + 1 < MAX_EXECUTE_SWEEP_LINES


def test_unit_tests_never_touch_ray():
    """tests/unit must run without Ray: no import of it, no session-cluster fixture."""
    offenders = {
        _rel(p): hits
        for p in sorted((REPO / "tests" / "unit").rglob("*.py"))
        if p.resolve() != Path(__file__).resolve()  # this file names them in its patterns
        and (
            hits := _lines_matching(
                p, r"^\s*(import\s+ray\b|from\s+ray\b)|\b(ray_cluster|run_sweep)\b"
            )
        )
    }
    assert offenders == {}
