"""Every function reads at once: none in orchestrator/ or workloads/ is longer than
MAX_FUNCTION_LINES, counted from its ``def`` line to its last line, docstring included (methods
and nested functions too). A longer one is split by what it does, each piece named for its job.
Checked by reading source files; nothing here imports the modules."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_FUNCTION_LINES = 80


def function_lengths(source: str) -> list[tuple[str, int]]:
    """(name, lines from ``def`` to the end) of every function and method in ``source``."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


def test_lengths_count_from_def_to_the_last_line_docstring_included():
    source = (
        "@decorator\n"
        "def outer():\n"
        '    """Doc."""\n'
        "    def inner():\n"
        "        return 1\n"
        "\n"
        "    return inner\n"
        "class C:\n"
        "    async def method(self):\n"
        "        pass\n"
    )
    assert sorted(function_lengths(source)) == [("inner", 2), ("method", 2), ("outer", 6)]


def test_no_function_is_longer_than_a_screen():
    files = sorted(
        p for folder in ("orchestrator", "workloads") for p in (REPO / folder).rglob("*.py")
    )
    assert files
    too_long = {
        f"{rel}::{name}": n
        for path in files
        for name, n in function_lengths(path.read_text())
        if n > MAX_FUNCTION_LINES and (rel := path.relative_to(REPO).as_posix())
    }
    assert too_long == {}, f"over {MAX_FUNCTION_LINES} lines: split by what they do"
