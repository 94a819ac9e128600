"""The fork server's lazy preload never ends the server: a name whose import raises anything
(not only ImportError, which multiprocessing's own preload skips) is skipped and reported."""

from __future__ import annotations

import sys

from workloads.launcher import LAZY_PRELOAD, PRELOAD, import_quietly


def test_a_name_that_raises_anything_is_skipped_and_the_rest_imported(tmp_path, monkeypatch):
    (tmp_path / "ls_boom.py").write_text("raise RuntimeError('built for CUDA 12.4')\n")
    (tmp_path / "ls_fine.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    skipped = import_quietly(["ls_boom", "ls_absent_module", "ls_fine"])
    assert skipped == {
        "ls_boom": "RuntimeError: built for CUDA 12.4",
        "ls_absent_module": "ModuleNotFoundError: No module named 'ls_absent_module'",
    }
    assert sys.modules["ls_fine"].VALUE == 1
    for name in ("ls_boom", "ls_fine"):
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_multiprocessing_preloads_only_modules_that_cannot_raise():
    """What multiprocessing imports itself: the base (its optional imports guarded inside) and
    the quiet loader; every lazy name goes through import_quietly."""
    assert PRELOAD == ["workloads.forkserver_preload", "workloads.forkserver_lazy"]
    assert not set(LAZY_PRELOAD) & set(PRELOAD)
