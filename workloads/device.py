"""The rank's device: waiting for it before a clock is read.

``sync(device)`` is the one place a rank waits for its GPU: a clock read after queued CUDA work
would time the launch, not the work (on CPU every op has finished when it returns).

May import: torch.
"""

from __future__ import annotations

import torch


def sync(device: torch.device) -> None:
    """Wait until ``device`` has finished its queued work. Note: a CPU-GPU sync point, so it is
    called only around clocks and barriers, never inside a timed step."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
