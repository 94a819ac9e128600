"""Other people's output that the tests read (NCCL logs, ``nvidia-smi topo -m`` matrices,
nccl-tests tables, profiler traces) lives outside the project, in ``shared/data/`` beside the
checkout (``LINKSWEEP_SHARED_DATA`` overrides where): ``captures/`` the fixtures by kind, each
folder with its ``SOURCES.md``; ``corpus/`` more captures with the parse a correct reader gives
(``expected.json``). The project keeps only what it made itself, under ``tests/data/``.

Where the folder is absent a test that needs it is skipped, saying so (``needs``); ``.ci/run``
refuses to start without it, so CI never skips them silently.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("LINKSWEEP_SHARED_DATA") or REPO.parent / "shared" / "data")
CAPTURES = SHARED_DATA / "captures"
CORPUS = SHARED_DATA / "corpus"
OWN = REPO / "tests" / "data"
"""What the project made itself (its own runs' DeepSpeed summaries, a constructed -J file)."""


def needs(folder: Path):
    """A mark that skips the test, with where it looked, when ``folder`` is absent."""
    return pytest.mark.skipif(
        not folder.is_dir(),
        reason=f"{folder} is absent: other people's captures live in shared/data beside the "
        "checkout (set LINKSWEEP_SHARED_DATA to read them elsewhere)",
    )


def path(p: Path) -> Path:
    """``p`` itself, or a skip saying it is absent (for a test that reads one capture)."""
    if not p.exists():
        pytest.skip(f"{p} is absent: other people's captures live in shared/data")
    return p


def read(p: Path) -> str:
    return path(p).read_text()


def corpus_index(folder: Path, pattern: str, expected: dict) -> list[str]:
    """What is off between a corpus folder's captures (``pattern``), its ``expected.json`` and
    the corpus ``SOURCES.md``: each capture needs an expected parse and a source row."""
    sources = (CORPUS / "SOURCES.md").read_text()
    files = sorted(p.name for p in folder.glob(pattern))
    off = [f"{n}: no expected parse" for n in files if n not in expected]
    off += [f"{n}: expected, but no such capture" for n in expected if n not in files]
    return off + [f"{n}: no row in SOURCES.md" for n in files if f"| {n} |" not in sources]
