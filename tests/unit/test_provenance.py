"""Where a run's git sha comes from: the checkout's git, or the commit an installed bundle
wheel was built from (``orchestrator/_built_from.py``, written by ``scripts/bundle``)."""

from __future__ import annotations

import sys
import types

from orchestrator import provenance
from tests.unit.stand_in import stand_in


def test_an_installed_bundle_reports_the_commit_it_was_built_from(monkeypatch):
    built = types.ModuleType("orchestrator._built_from")
    built.GIT_SHA, built.GIT_DIRTY = "0123abcd" * 5, False
    stand_in(monkeypatch, built)
    assert provenance.git_info() == ("0123abcd" * 5, False)


def test_a_checkout_asks_git(monkeypatch, tmp_path):
    monkeypatch.delitem(sys.modules, "orchestrator._built_from", raising=False)
    sha, _dirty = provenance.git_info()
    assert sha is None or len(sha) == 40  # a clean clone in CI has git; a tarball has none
    assert provenance.git_info(tmp_path) == (None, None)  # not a repository
