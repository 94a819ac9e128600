"""Every benchmark in bench/ still runs: each ``bench/bench_*.py --smoke`` (the convention: the
top of ``tests/integration/test_bench_smoke.py``), except the ones a suite test runs on the
session's shared emulated cluster. A check outside the suite (``bash scripts/checks.sh bench``;
``.ci/run`` runs it after the suite): each script starts its own embedded Ray, together about 5
minutes on 2 cores.
"""

from __future__ import annotations

import pytest

from tests.integration.test_bench_smoke import SCRIPTS, SMOKED_ELSEWHERE, smoke_figures


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_smoke_mode_writes_every_figure(script, tmp_path):
    if script.stem in SMOKED_ELSEWHERE:
        pytest.skip(SMOKED_ELSEWHERE[script.stem])
    smoke_figures(script, tmp_path)
