"""Where the profiled steps go: the last warmup steps when there are enough, never the first."""

from __future__ import annotations

import pytest

from workloads.train import profiled_warmup_start


@pytest.mark.parametrize(
    ("warmup", "profile", "start"),
    [
        (2, 1, 1),  # the second (last) warmup step
        (5, 2, 3),  # steps 3 and 4
        (1, 1, None),  # the only warmup step is the first one: a pass after the timed steps
        (2, 2, None),  # would include the first step
        (0, 1, None),  # no warmup at all
        (3, 0, None),  # nothing to profile
    ],
)
def test_profiled_warmup_start(warmup, profile, start):
    assert profiled_warmup_start(warmup, profile) == start
