"""Every benchmark in bench/ still runs (what nothing runs, rots): for each ``bench/bench_*.py``,
found by glob so a new script is checked without touching this file, ``python bench/X.py
--smoke --json OUT`` exits 0 and its JSON holds every key its ``FIGURES`` names, not None.

Here, in the suite: the convention's reader (:func:`smoke_figures`, also used by the test that
runs a bench on the session's shared emulated cluster: the link model's). The smoke run of every
other script is a check outside the suite, ``tests/checks/test_bench.py`` (``bash
scripts/checks.sh bench``, which ``.ci/run`` runs after the suite): each starts its own embedded
Ray (bench_drift its own emulated cluster) and together they took about 6 minutes of the suite
on 2 cores.

The convention (top of bench/README.md): ``--smoke`` runs the whole script on tiny sizes (seconds
to a minute or two on 2 cores); ``--json OUT`` writes the figures; a module-level ``FIGURES``
tuple names their keys as dotted paths (a step through a list applies to every element), each
key's last part named in the module docstring; exit code 77 = skipped (the smoke mode needs
something this machine lacks, e.g. root), the reason on stderr. ``FIGURES`` is read with ``ast``:
nothing heavy is imported here. Each script starts its own embedded Ray in its own processes,
so no session cluster is used (nor may be: a process keeps one Ray connection).
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((REPO / "bench").glob("bench_*.py"))
SMOKE_TIMEOUT_S = 600
"""Per script; the slowest smoke mode takes ~1-2 min on 2 shared cores (more the first time
DeepSpeed JIT-builds its CPU communication op on a machine)."""
SKIPPED = 77
"""Exit code of a smoke mode that cannot run here (e.g. needs root): the test skips."""

pytestmark = pytest.mark.slow


def read_figures(path: Path) -> tuple[tuple[str, ...], str]:
    """(FIGURES, module docstring) of a script, without importing it."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "FIGURES" for t in targets):
            return tuple(ast.literal_eval(node.value)), ast.get_docstring(tree) or ""
    raise AssertionError(f"{path.name}: no module-level FIGURES = (...) (see bench/README.md)")


def values_at(doc, path: list[str]) -> list:
    """The values at a dotted path; a list on the way fans out to every element."""
    if not path:
        return [doc]
    if isinstance(doc, list):
        if not doc:
            raise KeyError("an empty list")
        return [v for item in doc for v in values_at(item, path)]
    if not isinstance(doc, dict) or path[0] not in doc:
        raise KeyError(path[0])
    return values_at(doc[path[0]], path[1:])


def smoke_env() -> dict[str, str]:
    """The scripts' env: this one, less a Ray address (each starts its own embedded Ray). PATH
    is kept: DeepSpeed JIT-builds its CPU communication op with the ``ninja`` on PATH, and
    scripts/setup.sh prebuilt it with this shell's ninja (another ninja version rebuilds it)."""
    env = dict(os.environ, RAY_DISABLE_USAGE_STATS="1", TOKENIZERS_PARALLELISM="false")
    env.pop("RAY_ADDRESS", None)
    return env


def _run(script: Path, out: Path, extra: tuple[str, ...] = ()) -> tuple[int, str]:
    env = smoke_env()
    proc = subprocess.Popen(
        [sys.executable, str(script), "--smoke", "--json", str(out), *extra],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # on a timeout, its Ray and ranks go with it
    )
    try:
        output, _ = proc.communicate(timeout=SMOKE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"{script.name} --smoke ran past {SMOKE_TIMEOUT_S} s:\n{output[-4000:]}")
    return proc.returncode, output


def test_the_glob_finds_the_benchmarks():
    assert {"bench_overhead", "bench_scale", "bench_zero"} <= {p.stem for p in SCRIPTS}


SMOKED_ELSEWHERE = {
    "bench_link_model": "tests/integration/test_link_model_emulated.py asserts on its smoke JSON",
}
"""Scripts whose smoke run another test makes (through ``smoke_figures``): run once, not twice."""


def smoke_figures(script: Path, tmp_path: Path, *extra: str) -> dict:
    """Run ``script --smoke --json`` (and ``extra`` arguments); check exit 0 and every
    ``FIGURES`` key present and not None; return the JSON. Skips the test on exit 77."""
    figures, doc = read_figures(script)
    assert figures and all(isinstance(f, str) for f in figures), "FIGURES: a tuple of keys"
    undocumented = [f for f in figures if f.split(".")[-1] not in doc]
    assert undocumented == [], f"{script.name}: FIGURES not named in its docstring"
    out = tmp_path / "figures.json"
    rc, output = _run(script, out, extra)
    if rc == SKIPPED:
        pytest.skip(f"{script.name} --smoke skipped: {output.strip().splitlines()[-1:]}")
    assert rc == 0, f"{script.name} --smoke exited {rc}:\n{output[-4000:]}"
    assert out.exists(), f"{script.name} --smoke wrote no JSON:\n{output[-4000:]}"
    written = json.loads(out.read_text())
    problems = []
    for key in figures:
        try:
            found = values_at(written, key.split("."))
        except KeyError as exc:
            problems.append(f"{key}: missing ({exc})")
            continue
        if any(v is None for v in found):
            problems.append(f"{key}: None")
    assert problems == [], f"{script.name}: {problems}\n{output[-3000:]}"
    return written
