"""Context providers: each returns one dict or value describing where a result came from.

May import: torch.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("torch", "ray", "deepspeed", "transformers", "datasets", "duckdb", "nvidia-ml-py")


def git_info(cwd: Path = REPO) -> tuple[str | None, bool | None]:
    """(sha, dirty) of the checkout linksweep runs from; (None, None) outside git. An installed
    bundle wheel (``scripts/bundle``) carries the commit it was built from in
    ``orchestrator/_built_from.py``: its folder is site-packages, where git would answer for
    whatever repository the venv sits in, or not at all."""
    if cwd == REPO:
        try:  # by name, not an import statement: the module exists only in a bundle's wheel
            built = importlib.import_module("orchestrator._built_from")
            return built.GIT_SHA, built.GIT_DIRTY
        except ImportError:
            pass
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
        if sha.returncode != 0:
            return None, None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return sha.stdout.strip(), bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


def versions() -> dict[str, str | None]:
    """Versions of python and the packages that shape a result; CUDA/NCCL where torch has them."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for pkg in PACKAGES:
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = None
    try:
        out["cuda"] = torch_cuda_build()
        if out["cuda"] and gpu_device_files():  # a CUDA torch where a GPU may be: ask torch
            import torch

            if torch.cuda.is_available():
                out["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
    except Exception:  # noqa: BLE001 - provenance must never fail a sweep
        pass
    return out


def torch_cuda_build() -> str | None:
    """``torch.version.cuda`` without importing torch: its ``version.py`` is a file of constants
    (importing torch costs a driver about a second, for one string; it is imported only where
    it has a GPU to ask about). None without torch, or for a CPU build."""
    spec = importlib.util.find_spec("torch")  # finds the package, imports nothing of it
    if spec is None or spec.origin is None:
        return None
    if "torch" in sys.modules:  # already imported here: its answer
        return sys.modules["torch"].version.cuda
    path = Path(spec.origin).with_name("version.py")
    loaded = importlib.util.spec_from_file_location("_linksweep_torch_version", path)
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module.cuda


def gpu_device_files() -> bool:
    """An NVIDIA device file exists: a GPU may be present (without one, ``torch.cuda`` would
    find none, and no NCCL version is recorded)."""
    return any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/nvidia0"))


def context() -> dict:
    """Where and when a measurement was taken: date, CPU count, git sha and dirty flag, versions."""
    import datetime as dt
    import os

    sha, dirty = git_info()
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "git_sha": sha,
        "git_dirty": dirty,
        "versions": versions(),
    }
