"""Context providers: each returns one dict or value describing where a result came from.

May import: torch.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import platform
import subprocess
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
        import torch

        out["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            out["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
    except Exception:  # noqa: BLE001 - provenance must never fail a sweep
        pass
    return out


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
