"""Ranks forked on a gloo group in a child process, no Ray: what each rank wrote, read back.

A test module that runs its ranks as ``python -m tests.integration.<module> OUT`` (its own
``__main__`` forks the ranks, each writing a JSON file of case name -> result under OUT) gets
``{case: [one result per rank]}`` from :func:`measured_by`. Used by the FSDP2 and the PowerSGD
gloo tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def measured_by(module: str, out: Path, pattern: str) -> dict[str, list[dict]]:
    """Run ``python -m module out`` (one thread per rank), then read every ``pattern`` file
    under ``out``: case name -> one result per rank, in file order."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", module, str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results: dict[str, list[dict]] = {}
    for path in sorted(out.glob(pattern)):
        for name, result in json.loads(path.read_text()).items():
            results.setdefault(name, []).append(result)
    return results
