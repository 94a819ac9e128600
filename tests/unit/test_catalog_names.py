"""A strategy is named in the catalog and nowhere else in the code.

``workloads/catalog.py`` declares every strategy and axis; the rest of ``orchestrator/`` and
``workloads/`` asks it (a family, an entry's field, a resolved theory or workload). This test
reads every module's syntax tree and fails on a string constant that is a strategy's or a
family's name outside the catalog, docstrings and display text (a string inside an f-string's
text, an error message) aside: a name typed in code is a branch or a list that drifts.
"""

from __future__ import annotations

import ast
from pathlib import Path

from workloads import catalog

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("orchestrator", "workloads")
CATALOG = REPO / "workloads" / "catalog.py"


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string nodes that are docstrings (a module's, a class's, a function's) or an
    attribute's docstring (a bare string right after an assignment)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for stmt in body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                out.add(id(stmt.value))
    return out


FAMILY_TAKERS = {"names", "family_of"}
"""The catalog's lookups that take a family."""


def _called(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")


def named_in_code(path: Path, names: set[str], compared: frozenset[str] = frozenset()) -> list[str]:
    """``path:line: 'name'`` for each string constant in code that is one of ``names``, and for
    each of ``compared`` that is compared (``==``, ``in``) or passed to a call: family names are
    also plain words elsewhere (a selftest check is called ``fsdp2``), but a branch on a family
    or a lookup by family (``names``, ``family_of``) reads the catalog's constant
    (``catalog.ZERO``)."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _docstrings(tree)
    used: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):  # an f-string's text parts are display text
            skip.update(id(v) for v in node.values)
        elif isinstance(node, ast.Compare):
            for part in (node.left, *node.comparators):
                used.update(id(n) for n in ast.walk(part))
        elif isinstance(node, ast.Call) and _called(node) in FAMILY_TAKERS:
            used.update(id(a) for a in node.args)
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    return [
        f"{where}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and id(node) not in skip
        and (node.value in names or (node.value in compared and id(node) in used))
    ]


def test_no_strategy_or_family_name_outside_the_catalog():
    families = frozenset(catalog.FAMILIES) - set(catalog.names())
    found = [
        hit
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
        if path != CATALOG
        for hit in named_in_code(path, set(catalog.names()), families)
    ]
    assert not found, "strategy or family names typed outside workloads/catalog.py:\n" + "\n".join(
        found
    )


def test_the_rule_finds_a_name_in_code_and_not_in_prose(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        '"""ddp"""\n'
        'X = "ddp"\n'
        '"""zero3: an attribute docstring"""\n'
        'def f(s):\n    """fsdp"""\n    return f"zero3 {s}" if s == "hsdp" else "ok"\n'
        'CHECKS = {"zero": 1}\n'
        'def g(fam):\n    return fam == "zero" or h("zero") or names("zero")\n'
    )
    hits = named_in_code(src, {"ddp", "zero3", "fsdp", "hsdp"}, frozenset({"zero"}))
    assert [h.split(": ", 1)[1] for h in hits] == ["'ddp'", "'hsdp'", "'zero'", "'zero'"]
