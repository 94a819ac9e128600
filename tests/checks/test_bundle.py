"""The offline bundle end to end, as an air-gapped node meets it (docs/offline-bundle.md): a check
outside the suite (``scripts/checks.sh bundle``, run by ``.ci/run`` after the suite), since it
downloads the image's wheels and the bundle's (about 1.3 GB) the first time on a machine: the
suite's pure pieces are in ``tests/integration/test_offline_bundle.py``.

A fresh venv without system site-packages gets the "image" (torch, transformers, pyarrow,
nvidia-ml-py, ninja and their dependencies, from local wheels) first; the bundle is built for
this Python against that venv's ``pip list``, split into 20 MiB parts, moved, and installed with
PIP_NO_INDEX=1 and a proxy that answers nothing, so any attempt to reach a registry fails; then
``linksweep selftest --dry-run`` runs from the venv.

The build step may use the registries. Its downloads (and the image's wheels) are kept in
``~/.cache/linksweep-bundle-test`` (LINKSWEEP_BUNDLE_TEST_CACHE), keyed by target and versions:
a warm run resolves again (seconds) but downloads nothing. So is the image itself: a venv with
only the image's wheels installed, made once and copied for each run (``_image_venv``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest

from tests.integration.test_offline_bundle import REPO, parts

CACHE = Path(
    os.environ.get("LINKSWEEP_BUNDLE_TEST_CACHE", Path.home() / ".cache" / "linksweep-bundle-test")
)
IMAGE = ("torch", "transformers", "pyarrow", "nvidia-ml-py", "ninja")
"""What the node image brings (the versions this checkout's venv has); the rest is the bundle's."""
NO_NETWORK = {"http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"}
"""Port 9 (discard) answers nothing here: a request for a registry fails instead of passing."""


def _run(cmd: list[str], what: str, env: dict | None = None, cwd: Path | None = None) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    assert done.returncode == 0, f"{what}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _offline_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")}
    # PIP_NO_COMPILE: byte-compiling torch's files is most of an install's time on 2 cores
    return env | NO_NETWORK | {"PIP_NO_INDEX": "1", "PIP_NO_COMPILE": "1"} | extra


def _image_wheels() -> tuple[Path, list[str]]:
    """The image's wheels in the cache (downloaded once: the build step may use registries)."""
    pins = [f"{name}=={metadata.version(name)}" for name in IMAGE]
    folder = CACHE / ("image-" + hashlib.sha256(" ".join(pins).encode()).hexdigest()[:12])
    if not (folder / ".complete").exists():
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(folder), *pins]
        _run(cmd, "downloading the image's wheels")
        (folder / ".complete").write_text("\n".join(pins) + "\n")
    return folder, pins


def _image_venv(node: Path) -> list[str]:
    """``node``: a venv without system site-packages holding the image, and nothing else; the
    image's pins. The image is installed offline from its wheels into a venv kept in the cache
    (once per image and Python: ~30 s on 2 cores, most of it unpacking torch), which is copied
    to ``node`` (~2 s). A copied venv is the venv: ``bin/python`` is a link to the same
    interpreter, ``pyvenv.cfg`` the same file, and everything here runs ``bin/python -m ...``
    (the install script too), never a script whose first line names the cached copy."""
    image, pins = _image_wheels()
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    pristine = image / f"venv-py{version}"
    if not (pristine / ".complete").exists():
        building = image / f"venv-py{version}.{os.getpid()}"  # a rename makes it whole at once
        shutil.rmtree(building, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(building)], "python -m venv")
        py = str(building / "bin" / "python")
        install = [py, "-m", "pip", "install", "--quiet", "--no-index", "--find-links", str(image)]
        _run([*install, *pins], "installing the image", env=_offline_env())
        (building / ".complete").write_text("\n".join(pins) + "\n")
        shutil.rmtree(pristine, ignore_errors=True)
        building.rename(pristine)
    shutil.copytree(pristine, node, symlinks=True, ignore=shutil.ignore_patterns(".complete"))
    return pins


@pytest.mark.slow
def test_the_bundle_installs_offline_and_selftest_plans_from_it(tmp_path):
    t0 = time.monotonic()
    timings = {}
    node = tmp_path / "node"
    _image_venv(node)
    py = str(node / "bin" / "python")
    have = tmp_path / "have.txt"
    have.write_text(_run([py, "-m", "pip", "list", "--format=freeze"], "pip list"))
    timings["image"] = time.monotonic() - t0

    built = tmp_path / "built"
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    cmd = [sys.executable, str(REPO / "scripts" / "bundle"), "--python", python]
    cmd += ["--have-file", str(have), "--out", str(built), "--part-mib", "20"]
    print(_run([*cmd, "--cache", str(CACHE / "wheels")], "building the bundle"))
    timings["build"] = time.monotonic() - t0 - timings["image"]

    manifest = json.loads((built / "manifest.json").read_text())
    names = {w["name"] for w in manifest["wheels"]}
    assert {"linksweep", "deepspeed", "ray", "duckdb", "datasets"} <= names
    assert not names & {"torch", "transformers", "pyarrow", "sympy"}
    assert not [n for n in names if n.startswith("nvidia-")]
    assert {g["name"]: g["version"] for g in manifest["left_out"]}["torch"] == metadata.version(
        "torch"
    )
    assert len(manifest["parts"]) >= 2
    assert all(p["bytes"] <= 20 * parts.MIB for p in manifest["parts"])
    (deepspeed,) = [w for w in manifest["wheels"] if w["name"] == "deepspeed"]
    assert deepspeed["file"].endswith("-py3-none-any.whl")

    moved = tmp_path / "on-the-node" / "bundle"  # the copy step: the folder, nothing else
    moved.parent.mkdir()
    built.rename(moved)
    env = _offline_env(PYTHON=py)
    out = _run(["sh", str(moved / "install-bundle.sh"), str(node)], "install", env, tmp_path)
    print(out)
    assert "checks passed: import ray, deepspeed, duckdb, pydantic, datasets" in out
    timings["install"] = time.monotonic() - t0 - timings["image"] - timings["build"]

    code = "import orchestrator._built_from as b; print(b.__file__); print(b.GIT_SHA)"
    where, sha = _run([py, "-c", code], "import", env, tmp_path).split()
    assert where.startswith(str(node)), where  # the venv's linksweep, not this checkout
    assert sha == manifest["built"]["git_sha"]
    linksweep = str(node / "bin" / "linksweep")
    plan = _run([linksweep, "selftest", "--dry-run"], "linksweep selftest --dry-run", env, tmp_path)
    assert "selftest plan" in plan and "checks:" in plan, plan
    timings["dry_run"] = time.monotonic() - t0 - sum(timings.values())
    size = sum(p["bytes"] for p in manifest["parts"])
    print(
        f"bundle {size / 1e6:.1f} MB in {len(manifest['parts'])} parts of at most 20 MiB; "
        + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
    )
    shutil.rmtree(node)  # ~1.5 GB and the bundle twice over: not left for pytest's retention
    shutil.rmtree(moved)
