"""Every process group times out at the run's timeout; the wrapper alone: ``new_groups_inherit_timeout`` gives a ``new_group`` call
without a timeout the run's, keeps an explicit one, and undoes itself. The real DeepSpeed groups
in a real 2-rank gloo run: tests/integration/test_ds_group_timeout.py."""

from __future__ import annotations

import datetime
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")

from workloads.strategies import new_groups_inherit_timeout  # noqa: E402


def fake_dist():
    calls = []

    def new_group(ranks=None, timeout=None, backend=None):
        calls.append((ranks, timeout))
        return len(calls)

    return SimpleNamespace(new_group=new_group), calls


def test_missing_timeout_gets_the_runs_and_explicit_ones_stay():
    dist, calls = fake_dist()
    original = dist.new_group
    explicit = datetime.timedelta(seconds=5)
    with new_groups_inherit_timeout(660.0, module=dist):
        dist.new_group([0, 1])  # DeepSpeed's call: ranks only
        dist.new_group(ranks=[0])
        dist.new_group([0], explicit)
        dist.new_group([1], timeout=explicit)
    assert calls == [
        ([0, 1], datetime.timedelta(seconds=660)),
        ([0], datetime.timedelta(seconds=660)),
        ([0], explicit),
        ([1], explicit),
    ]
    assert dist.new_group is original  # undone


def test_undone_when_the_block_raises():
    dist, _ = fake_dist()
    original = dist.new_group
    with pytest.raises(RuntimeError), new_groups_inherit_timeout(1.0, module=dist):
        raise RuntimeError("deepspeed.initialize failed")
    assert dist.new_group is original


def test_default_target_is_what_deepspeed_calls():
    """DeepSpeed's TorchBackend.new_group calls ``torch.distributed.new_group`` by attribute at
    call time, so patching that attribute reaches it."""
    import inspect

    import torch.distributed as tdist
    from deepspeed.comm.torch import TorchBackend

    assert "torch.distributed.new_group(ranks)" in inspect.getsource(TorchBackend.new_group)
    original = tdist.new_group
    with new_groups_inherit_timeout(1.0):
        assert tdist.new_group is not original
    assert tdist.new_group is original
