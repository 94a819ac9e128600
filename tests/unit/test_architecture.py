"""The code's shape, checked by reading source files (nothing here imports the modules):
one-way dependencies, one Ray package, one DuckDB module, no SQL outside the store, small files,
and every module keeping to the 'May import:' line of its docstring.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAX_FILE_LINES = 500
"""A module longer than this says in its docstring that it has one job (``One job:`` and what
it is); a module never splits only to fit the number."""
HARD_MAX_FILE_LINES = 800
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
        "orchestrator/raycluster/pinned_probes.py",
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
def test_a_long_module_says_its_one_job_and_none_is_very_long(folder):
    """Over 500 lines a module's docstring says ``One job:`` and what it is (a long module that
    does one thing reads better than two halves split at a number); none passes 800."""
    over = {}
    for p in _py(folder):
        text = p.read_text()
        n = len(text.splitlines())
        doc = ast.get_docstring(ast.parse(text)) or ""
        if n > HARD_MAX_FILE_LINES or (n > MAX_FILE_LINES and "One job:" not in doc):
            over[_rel(p)] = n
    assert over == {}


def test_execute_sweep_reads_on_one_screen():
    tree = ast.parse((REPO / "orchestrator" / "sweep" / "execute.py").read_text())
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


# --- 'May import:' lines ----------------------------------------------------------------------
# Every module's docstring says what it may import, and the module keeps to it.
#
# Each module of ``orchestrator/`` and ``workloads/`` carries one line in its docstring:
#
#     May import: stats, links, orchestrator.store, numpy.
#
# Names are comma-separated and the list ends with a period; parenthesised words are comments. A
# name without a dot is a module of the same package when one exists (``stats`` in
# ``orchestrator/analysis/headline.py`` is ``orchestrator.analysis.stats``), else a top-level package (``numpy``,
# ``ray``, ``orchestrator``). A module may import what a listed name is, or what lies inside it
# (``orchestrator.store`` allows ``orchestrator.store.db``; ``orchestrator`` alone allows only its
# ``__init__``). ``nothing`` lists nothing. The standard
# library is always allowed and never listed. Every import counts, also one inside a function or
# under ``TYPE_CHECKING``: the line is the module's whole reach, so it cannot drift from the code.

PACKAGES = ("orchestrator", "workloads")
LINE = re.compile(r"May import:\s*(.*?)\.(?:\s|$)", re.S)


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


MODULES = _modules()


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def allowed_names(module: str, path: Path, docstring: str) -> set[str] | None:
    """The dotted names the docstring's line allows, or None when there is no line."""
    found = LINE.search(docstring)
    if found is None:
        return None
    text = re.sub(r"\([^)]*\)", "", found.group(1)).replace("`", "")
    names = {n.strip() for n in re.split(r"[,\s]+(?:and\s+)?", text) if n.strip()}
    names.discard("nothing")
    package = _package_of(module, path)
    return {f"{package}.{n}" if "." not in n and f"{package}.{n}" in MODULES else n for n in names}


def imported_names(module: str, path: Path, tree: ast.Module) -> set[str]:
    """Every module ``module`` imports (dotted, absolute), the standard library left out."""
    out = set()
    package = _package_of(module, path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            for a in node.names:  # `from orchestrator.analysis import stats`: the module
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base)
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    return {n for n in out if n.split(".")[0] not in stdlib}


def _covered(name: str, allowed: set[str]) -> bool:
    """A listed name allows itself and what lies inside it; ``orchestrator`` or ``workloads``
    alone allow only the package's own ``__init__`` (its version, say), not the whole tree."""
    return any(name == a or (name.startswith(a + ".") and a not in PACKAGES) for a in allowed)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_keeps_to_its_may_import_line(module):
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    allowed = allowed_names(module, path, ast.get_docstring(tree) or "")
    assert allowed is not None, f"{path.relative_to(REPO)}: no 'May import:' line in its docstring"
    unknown = {a for a in allowed if a.split(".")[0] in PACKAGES and a not in MODULES}
    assert not unknown, f"{path.relative_to(REPO)}: the line names no such module: {unknown}"
    extra = sorted(n for n in imported_names(module, path, tree) if not _covered(n, allowed))
    assert not extra, f"{path.relative_to(REPO)} imports what its 'May import:' line omits: {extra}"


def test_the_parser_reads_a_line_as_documented():
    path = REPO / "orchestrator" / "analysis" / "headline.py"
    doc = (
        "Words.\n\nMay import: stats (interval kinds), ``links``,\norchestrator.store and numpy.\n"
    )
    assert allowed_names("orchestrator.analysis.headline", path, doc) == {
        "orchestrator.analysis.stats",
        "orchestrator.analysis.links",
        "orchestrator.store",
        "numpy",
    }
    assert allowed_names("orchestrator.analysis.headline", path, "May import: nothing.") == set()
    assert allowed_names("orchestrator.analysis.headline", path, "No line here.") is None


def test_an_import_the_line_omits_is_caught():
    path = REPO / "orchestrator" / "analysis" / "headline.py"
    tree = ast.parse("def f():\n    import ray\n    from orchestrator.analysis import stats\n")
    names = imported_names("orchestrator.analysis.headline", path, tree)
    assert names == {"ray", "orchestrator.analysis.stats"}
    allowed = allowed_names("orchestrator.analysis.headline", path, "May import: stats.")
    assert [n for n in sorted(names) if not _covered(n, allowed)] == ["ray"]


def test_a_project_module_is_stood_in_through_stand_in():
    """``sys.modules`` alone misses ``from package import module`` once the real module was
    imported by an earlier test: the test passes alone and fails in the full suite."""
    offenders = {
        _rel(p): hits
        for p in sorted((REPO / "tests").rglob("*.py"))
        if p.name not in ("stand_in.py", "test_architecture.py")
        and (hits := _lines_matching(p, r"setitem\([^,]*modules,\s*[\"'](orchestrator|workloads)"))
    }
    assert offenders == {}


# --- the layout -------------------------------------------------------------------------------
MAX_ROOT_MODULES = 12
"""``orchestrator/`` itself keeps only what the whole program shares (CLI entry, errors, ui,
provenance, the embedded cluster's watchdog); every concept has its package."""

SHARED_FILE_NAMES = {
    # a concept's faces in different layers: the command, its Ray side, its rank side
    "fleet.py": {"orchestrator/commands/fleet.py"},
    "compare.py": {"orchestrator/commands/compare.py"},
    "selftest.py": {"orchestrator/commands/selftest.py"},
    "phases.py": {"orchestrator/report/phases.py", "workloads/phases.py"},
    "linkbench.py": {"orchestrator/commands/linkbench.py", "workloads/linkbench.py"},
    "__main__.py": {"orchestrator/__main__.py", "orchestrator/emulated/__main__.py"},
}


def test_the_root_keeps_only_what_the_whole_program_shares():
    root = sorted(
        p.name
        for p in (REPO / "orchestrator").glob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    )
    assert len(root) <= MAX_ROOT_MODULES, root


def test_no_two_modules_share_a_file_name_unless_one_concepts_faces():
    by_name: dict[str, list[str]] = {}
    for pkg in PACKAGES:
        for p in _py(pkg):
            if p.name != "__init__.py":
                by_name.setdefault(p.name, []).append(_rel(p))
    shared = {n: set(paths) for n, paths in by_name.items() if len(paths) > 1}
    unexplained = {n: ps for n, ps in shared.items() if not ps <= SHARED_FILE_NAMES.get(n, set())}
    assert unexplained == {}


def _import_graph() -> dict[str, set[str]]:
    graph = {}
    for module, path in MODULES.items():
        names = imported_names(module, path, ast.parse(path.read_text()))
        graph[module] = {
            n
            for n in names
            if n in MODULES and n != module and not module.startswith(n + ".")  # its packages
        }
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle():
    """Every import counts, also one inside a function: a circle is two modules that are one."""
    assert _cycles(_import_graph()) == []


def test_the_circle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
