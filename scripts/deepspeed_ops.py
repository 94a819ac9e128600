"""Build DeepSpeed's JIT ops once, with this venv's Python and torch, into the cache the ranks
load them from (``TORCH_EXTENSIONS_DIR``, set for this venv by scripts/setup.sh).

    python scripts/deepspeed_ops.py [--missing] [NAME ...]

NAME: ``async_io`` (NVMe offload), ``cpu_adam`` (ZeRO's offloaded optimizer),
``deepspeed_shm_comm`` (DeepSpeed's collectives on CPU), or ``quickstart`` (the ones the
quickstart's sweep uses: :data:`QUICKSTART_OPS`); none: every one. ``--missing``: only
those not built yet (:func:`missing`, a file check that imports nothing). An op this machine
cannot build (async_io without libaio-dev) is skipped with the reason; nothing here fails.

Who calls it: scripts/setup.sh (every op; the quickstart's setup only the one its sweep uses),
and the checks whose tests need the rest (scripts/checks/offload.sh, selftest.sh: the suite
needs none beyond the quickstart's). Without a prebuilt op, DeepSpeed builds it inside the
first rank that needs it (async_io about 3 min on 2 cores, cpu_adam under 1 min): a sweep's
run allows for that, a test's short timeout does not.

The build runs the ``ninja`` the sweeps will run (:func:`ninja_on_path`): torch runs the first
one on ``PATH``, the ranks inherit the ``PATH`` of whoever started the sweep, and two ninja
versions do not share a build log (the system's 1.11 and the venv's 1.13 hash commands
differently), so a build by the other one is rebuilt at the first run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

OPS = {
    "async_io": ("AsyncIOBuilder", "NVMe offload (grid.offload: nvme)"),
    "cpu_adam": (
        "CPUAdamBuilder",
        "ZeRO's offloaded optimizer (DeepSpeedCPUAdam, as accelerate swaps it in)",
    ),
    "deepspeed_shm_comm": ("ShareMemCommBuilder", "DeepSpeed's collectives on CPU"),
}
QUICKSTART_OPS = ("deepspeed_shm_comm",)
"""What the quickstart's sweep uses (ZeRO-3 on CPU, no offload)."""


def missing(names=tuple(OPS), cache: str | None = None) -> list[str]:
    """The ops among ``names`` with no built library in the extensions cache (torch's layout:
    ``<cache>/<name>/<name>.so``); every one when the cache is not set."""
    cache = cache if cache is not None else os.environ.get("TORCH_EXTENSIONS_DIR")
    if not cache:
        return list(names)
    return [n for n in names if not (Path(cache) / n / f"{n}.so").is_file()]


def ninja_on_path() -> None:
    """``PATH`` as a sweep will see it: this shell's ninja, else this venv's (what an activated
    venv finds)."""
    if shutil.which("ninja") is None:
        os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"


def build(names) -> None:
    from deepspeed.accelerator import get_accelerator

    for name in names:
        cls, used_by = OPS[name]
        builder = get_accelerator().create_op_builder(cls)
        if builder is None:
            continue  # not an op of this accelerator (ShareMemCommBuilder is CPU-only)
        if not builder.is_compatible(verbose=False):
            why = ": libaio-dev missing (apt-get install libaio-dev)" if name == "async_io" else ""
            print(f"skipped DeepSpeed op {name} ({used_by}): cannot be built here{why}")
            continue
        t0 = time.monotonic()
        try:
            builder.load(verbose=False)
        except Exception as exc:  # noqa: BLE001 - a missing op costs a later build, not the caller
            print(f"skipped DeepSpeed op {name} ({used_by}): build failed: {exc}")
            continue
        print(f"DeepSpeed op {name} ({used_by}) ready: {time.monotonic() - t0:.0f} s", flush=True)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", metavar="NAME", help=f"one of {', '.join(OPS)}")
    p.add_argument("--missing", action="store_true", help="only the ops not built yet")
    args = p.parse_args(argv)
    names = [op for n in args.names for op in (QUICKSTART_OPS if n == "quickstart" else [n])]
    unknown = [n for n in names if n not in OPS]
    if unknown:
        p.error(f"NAME: {', '.join(unknown)} unknown; allowed: {', '.join(OPS)}, quickstart")
    names = names or list(OPS)
    if args.missing:
        names = missing(names)
    if names:
        ninja_on_path()
        build(names)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
