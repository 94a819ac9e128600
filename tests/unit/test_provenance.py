"""Where a run's git sha comes from: the checkout's git, or the commit an installed bundle
wheel was built from (``orchestrator/_built_from.py``, written by ``scripts/bundle``); and
torch's CUDA build read without importing torch (in a subprocess: this one has torch)."""

from __future__ import annotations

import subprocess
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


def test_the_cuda_build_is_read_without_importing_torch():
    """A driver records torch's CUDA build from ``torch/version.py`` alone (importing torch costs
    it about a second): the same answer as ``torch.version.cuda``, and torch not imported."""
    code = (
        "import sys\n"
        "from orchestrator import provenance\n"
        "cuda = provenance.torch_cuda_build()\n"
        "print('imported' if 'torch' in sys.modules else 'not imported')\n"
        "import torch\n"
        "print(cuda == torch.version.cuda)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    assert out == ["not imported", "True"]
