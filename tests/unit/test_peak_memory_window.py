"""Peak memory is the timed steps' own, for every strategy: reset at the first timed step and read
after the last (``workloads/train.py``). Before, DeepSpeed ZeRO-1/2 reset the peak in their
start-up (``runtime/utils.empty_cache``) while DDP and FSDP2 did not, and the peak was read after
the traced steps and a profiled pass. Here a stand-in strategy on CPU allocates 240 MB in its
first warmup step and 360 MB in a profiled pass after the timed steps, and nothing in the timed
steps: the recorded peak RSS must include neither (real ``run_training``, real ``/proc``)."""

from __future__ import annotations

import itertools
import types

import pytest
import torch

from workloads import train
from workloads.contract import RunConfig

MB = 1_000_000


def _touch(n_bytes: int) -> None:
    block = torch.ones(n_bytes // 4, dtype=torch.float32)  # written: resident, then freed
    assert float(block[-1]) == 1.0
    del block


class _Strategy:
    non_final_bytes = None
    step_collectives = ()

    def __init__(self) -> None:
        self.micro = 0

    def micro_step(self, batch, boundary):
        if self.micro == 0:
            _touch(240 * MB)  # the first warmup step's one-off work
        self.micro += 1
        return torch.tensor(1.0)

    def optimizer_step(self) -> None:
        pass

    def profile_start(self) -> None:
        _touch(360 * MB)  # the profiled pass after the timed steps

    def profile_stop(self):
        return ()

    def effective_config(self):
        return None

    def swap_files(self) -> int:
        return 0

    def teardown(self) -> None:
        pass


@pytest.mark.skipif(not train.os.path.exists("/proc/self/clear_refs"), reason="Linux /proc")
def test_the_peak_is_the_timed_steps_not_warmup_nor_the_profiled_pass(monkeypatch):
    data = itertools.repeat(torch.zeros(1, 4, dtype=torch.long))
    text = types.SimpleNamespace(description="stand-in")
    monkeypatch.setattr(train, "_model_and_data", lambda *a: (text, "t", data, None, 1))
    monkeypatch.setattr(train, "_probed_strategy", lambda *a: _Strategy())
    cfg = RunConfig(
        run_id="peak", strategy="ddp", grad_accum=1, bucket_mb=None, offload="none",
        model="gpt2-tiny", dataset="builtin", precision="fp32", seq_len=4, micro_batch_size=1,
        steps=2, warmup_steps=1, seed=0, lr=1e-3, profile_steps=1, pg_timeout_s=60.0,
    )  # fmt: skip
    before = _rss_bytes()  # what this process holds now (its earlier peak may be higher)
    rec = train.run_training(cfg, 0, 2, torch.device("cpu"))  # world 2: a profiled pass
    phases = [p.phase for p in rec.phases]
    assert phases.index("timed_steps") < phases.index("profiled_pass")  # after the timed steps
    assert rec.peak_mem_bytes < before + 150 * MB  # neither 240 MB nor 360 MB is in it


def _rss_bytes() -> int:
    with open("/proc/self/clear_refs", "w") as f:  # this test's own start: peak = now
        f.write("5")
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
