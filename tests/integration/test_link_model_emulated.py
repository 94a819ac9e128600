"""The link model end to end (root only), through ``bench/bench_link_model.py --smoke``: 2
nodes of the session's shared emulated cluster (tests/integration/conftest.py; the bench's
``--address``, its other nodes excluded) with three tc-shaped links (s500, r1g, r2g), DDP and ZeRO-3 at
grad_accum 1, spread placement, the link microbenchmark on; the bench writes the ``link_model``
and ``link_model_check`` rows to its JSON. The bench's smoke run is made here, once, and checked
both ways: every figure it documents is written (the bench convention, ``test_bench_smoke``,
which skips this script), and the link model holds what it must on any machine.

For every variant whose runs all succeeded: it is fitted on every link, its exposure lies inside
its own 95% interval, every link is left out once, the two outer links (by predicted
communication time) say they were extrapolated and the middle one that it was not, ``covered``
says whether the measured step time lies inside the prediction's interval, and what the model
promises holds where its assumption does (the step grows with the communication time the
microbenchmark priced): the inner and the faster left-out links inside their intervals, the
slower one above its lower bound. No point is held to a factor: from two links 2x apart a
line's slope is their noise over a short base (a loaded machine once made the slowest link's
prediction +950%; docs/link-model.md), and on this CPU stand-in the microbenchmark once ranked
r2g below r1g, so that no line through two links predicted the third. Three links are the
fewest that allow this: a line needs two points, and a left-out link needs two others.

The model's two measured claims (every left-out link within 15%; ZeRO-3's exposure at
grad_accum 8 above DDP's) are not decided here: neither holds reliably on the shared 2-core CPU
stand-in (docs/link-model.md has the tally of runs and why). ``bench/bench_link_model.py``
without ``--smoke`` runs the full-size sweep (four links, grad_accum 1 and 8) and prints both
verdicts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import SHARED_LINKS
from tests.integration.test_bench_smoke import smoke_figures

# alone (tests/lanes.py): the exposure is fitted from slowdowns across three links
pytestmark = pytest.mark.alone

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_link_model.py"
LINK_NAMES = ["s500", "r1g", "r2g"]  # the bench's SMOKE_LINKS: a factor of 2 apart


@pytest.mark.root
@pytest.mark.slow
def test_link_model_on_three_emulated_links(tmp_path, emulated_cluster):
    """Every variant fitted on every link, its interval around its estimate, every link left out
    once and predicted within a factor of two."""
    assert {"s500=500mbit", "r1g=1gbit", "r2g=2gbit"} <= set(SHARED_LINKS)  # SMOKE_LINKS
    address, state = emulated_cluster.address, str(emulated_cluster.state_dir)
    out = smoke_figures(BENCH, tmp_path, "--address", address, "--state-dir", state)
    assert sorted(link["name"] for link in out["links"]) == sorted(LINK_NAMES)
    model = {(m["strategy"], m["grad_accum"]): m for m in out["link_model"]}
    checks = out["link_model_check"]
    for m in model.values():
        print(f"{m['strategy']} ga={m['grad_accum']} exposure {m['exposure']:.3f} "
              f"[{m['exposure_ci_low']:.3f}, {m['exposure_ci_high']:.3f}] {m['quality']}")  # fmt: skip
    for c in checks:
        print(f"left out {c['strategy']} ga={c['grad_accum']} {c['link']}: {c['rel_error']:+.1%} "
              f"x{c['extrapolation']:.2f} covered {c['covered']}")  # fmt: skip
    assert set(model) == {("ddp", 1), ("zero3", 1)}
    complete = {k for k, m in model.items() if m["n_excluded"] == 0}
    assert complete, "every variant had a failed run"
    for key in complete:
        m = model[key]
        assert m["n_links"] == len(LINK_NAMES) and m["compute_s"] > 0, m
        assert m["exposure_ci_low"] <= m["exposure"] <= m["exposure_ci_high"], m
        assert 0 <= m["exposure"] < 3, m  # 0: the fit clamped a slope the links reversed
        left_out = sorted(c["link"] for c in checks if (c["strategy"], c["grad_accum"]) == key)
        assert left_out == sorted(LINK_NAMES)
    for key in complete:
        by_comm = sorted((c for c in checks if (c["strategy"], c["grad_accum"]) == key),
                         key=lambda c: c["predicted_comm_s"])  # fmt: skip
        # How far each prediction extrapolates follows the links' communication times.
        assert [c["extrapolation"] == 1.0 for c in by_comm] == [False, True, False], by_comm
        for c in by_comm:
            assert c["covered"] == (
                c["predicted_step_ci_low_s"]
                <= c["measured_step_s"]
                <= c["predicted_step_ci_high_s"]
            ), c
        # The promise: where the step grows with the communication time the microbenchmark
        # priced (the model's assumption), the inner and the faster left-out links lie inside
        # their intervals (monotonicity alone bounds them), and the slower one above its lower
        # bound (its upper bound also assumes the step exposes at most its extra bytes' time).
        # Where it does not grow so, the check says so (covered false) and nothing is asserted:
        # on the CPU stand-in the microbenchmark once ranked r2g below r1g.
        steps = [c["measured_step_s"] for c in by_comm]
        if steps == sorted(steps):
            assert by_comm[0]["covered"] and by_comm[1]["covered"], by_comm
            assert by_comm[2]["measured_step_s"] >= by_comm[2]["predicted_step_ci_low_s"], by_comm
