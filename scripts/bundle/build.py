"""pip's side of the bundle, on the machine that reaches the index: linksweep's wheel, the sdists
built into wheels here, the stand-ins for what the target has, the resolution for the target, and
the download of every wheel it chose.

Each step is one pip command run with this interpreter (its pip must be 23 or newer: ``install
--dry-run --report`` is how the resolution is read). The pure choices (what to fetch, what was
left out) are :func:`split_report`; the rest is I/O.

May import: target, packaging.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from bundle.install import sha256_of  # the installer's own (it ships alone, stdlib only)
from bundle.target import BadInput, Target, is_stand_in, stand_in_version

BUILD_ENV = {"DS_BUILD_OPS": "0"}
"""DeepSpeed's sdist builds a pure-Python wheel with no precompiled op (its setup.py reads
DS_BUILD_OPS; 0 is already the Linux default, said here so a user's shell cannot change it):
the node JIT-builds each op where it is first used, with its own torch and CUDA."""


class BuildFailed(RuntimeError):
    """A pip step failed; the message has pip's last lines."""


def pip(args: list[str], what: str, env: dict[str, str] | None = None) -> str:
    """``python -m pip ARGS`` with this interpreter; :class:`BuildFailed` with pip's last
    lines when it fails."""
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    done = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, check=False
    )
    if done.returncode != 0:
        lines = (done.stdout + done.stderr).strip().splitlines()
        tail = "\n".join([x for x in lines if not x.startswith("WARNING:")][-25:])
        raise BuildFailed(f"{what} failed (pip exit {done.returncode}):\n{tail}")
    return done.stdout


BUILT_FROM = "orchestrator/_built_from.py"
"""Written into the wheel's copy of the tree only: the commit it was built from, for a run whose
installed linksweep has no checkout around it to ask git (a wheel's folder is site-packages)."""


def linksweep_wheel(repo: Path, dest: Path, git_sha: str | None, git_dirty: bool) -> Path:
    """linksweep's wheel, built from a copy of the checkout's files (tracked and new, as git
    lists them): setuptools reuses a ``build/`` folder, so a build in place could carry a
    module deleted since into the wheel. The copy gains :data:`BUILT_FROM`."""
    with tempfile.TemporaryDirectory(prefix="linksweep-src-") as tmp:
        src = Path(tmp) / "linksweep"
        _copy_tree(repo, src)
        (src / BUILT_FROM).write_text(
            '"""The commit this installed linksweep was built from (scripts/bundle writes it into '
            "the wheel;\na checkout has no such file: git answers there).\n\n"
            'May import: nothing.\n"""\n\n'
            f"GIT_SHA = {git_sha!r}\nGIT_DIRTY = {git_dirty!r}\n"
        )
        args = ["wheel", "--no-deps", "--quiet", "--wheel-dir", str(dest), str(src)]
        if _setuptools_here():
            args.insert(1, "--no-build-isolation")  # seconds instead of a fresh build env
        pip(args, "building linksweep's wheel")
    (found,) = sorted(dest.glob("linksweep-*.whl"))
    return found


def built_from_sdist(spec: str, dest: Path, target: Target) -> Path:
    """A wheel built here from the sdist of ``spec`` (DeepSpeed publishes only sdists).
    Refused unless pure Python: a compiled wheel fits this machine, not the target."""
    name = canonicalize_name(Requirement(spec).name)
    with tempfile.TemporaryDirectory(prefix="linksweep-sdist-") as tmp:
        args = ["wheel", "--no-deps", "--no-binary=:all:", "--quiet", "--wheel-dir", tmp, spec]
        pip(args, f"building {spec} from its sdist", env=BUILD_ENV)
        (built,) = [p for p in Path(tmp).glob("*.whl") if parse_wheel_filename(p.name)[0] == name]
        tags = parse_wheel_filename(built.name)[3]
        if any(t.platform != "any" or t.abi != "none" for t in tags):
            raise BuildFailed(
                f"{built.name}: built here with compiled code ({sorted(map(str, tags))}), "
                f"which would not run on the target (Python {target.python}, "
                f"{target.platforms[0]}): build it on a machine like the target"
            )
        dest.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy2(built, dest / built.name))


def requirement_of(wheel: Path, name: str) -> str | None:
    """The specifier with which ``wheel`` requires ``name`` (``deepspeed>=0.15``), or None."""
    for req in _requires_dist(wheel):
        parsed = Requirement(req)
        if canonicalize_name(parsed.name) == canonicalize_name(name):
            return f"{parsed.name}{parsed.specifier}"
    return None


def stand_ins(have: dict[str, str], dest: Path) -> None:
    """One metadata-only wheel per package the target has (target.py says why)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name, version in have.items():
        ver = stand_in_version(version)
        dist = f"{name.replace('-', '_')}-{ver}"
        info = f"{dist}.dist-info"
        with zipfile.ZipFile(dest / f"{dist}-py3-none-any.whl", "w") as whl:
            whl.writestr(
                f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n"
            )
            whl.writestr(
                f"{info}/WHEEL",
                "Wheel-Version: 1.0\nGenerator: linksweep-bundle\nRoot-Is-Purelib: true\n"
                "Tag: py3-none-any\n",
            )
            whl.writestr(f"{info}/RECORD", "")


def resolve(
    target: Target, requirement: str, find_links: list[Path], pins: list[str], work: Path
) -> dict:
    """pip's resolution of ``requirement`` for the target, as its ``--report`` JSON. Nothing is
    installed (``--dry-run``); wheels are read through the index's metadata files where it has
    them (PEP 658), so resolving costs seconds, not the download."""
    constraints = work / "constraints.txt"
    constraints.write_text("".join(f"{p}\n" for p in pins))
    report = work / "report.json"
    args = ["install", "--dry-run", "--ignore-installed", "--report", str(report)]
    args += ["--target", str(work / "never-written"), *target.pip_args()]
    for folder in find_links:
        args += ["--find-links", str(folder)]
    try:
        pip([*args, "--constraint", str(constraints), requirement], "resolving for the target")
    except BuildFailed as exc:
        raise BuildFailed(
            f"{exc}\n(a version ending in +have is the target's own: when pip says it is too "
            "old, leave that package out of --have/--have-file, and the bundle ships a newer "
            "one into the venv; or loosen a --pin)"
        ) from None
    return json.loads(report.read_text())


def split_report(
    report: dict, have: dict[str, str], own: set[str]
) -> tuple[list[dict], list[dict]]:
    """(wheels to ship, packages left out because the target has them), from pip's report.
    A wheel: name, version, file (the name pip saves it under), sha256 (None when the index
    gave none), own (True for a file of ours, named in ``own``: linksweep, a wheel built here)."""
    ship, left_out = [], []
    for item in report["install"]:
        meta, info = item["metadata"], item["download_info"]
        name, version = canonicalize_name(meta["name"]), meta["version"]
        if is_stand_in(name, version, have):
            left_out.append({"name": name, "version": have[name], "reason": "the target has it"})
            continue
        url = urlparse(info["url"])
        hashes = info.get("archive_info", {}).get("hashes", {})
        ship.append(
            {
                "name": name,
                "version": version,
                "file": unquote(Path(url.path).name),
                "sha256": hashes.get("sha256"),
                "own": unquote(Path(url.path).name) in own,
            }
        )
    return sorted(ship, key=lambda w: w["name"]), sorted(left_out, key=lambda w: w["name"])


def fetch(target: Target, wanted: list[dict], cache: Path) -> dict[str, Path]:
    """Every wanted wheel in ``cache`` (one folder per target), downloaded unless a file with
    the right sha256 is there already; returns file name -> path."""
    cache.mkdir(parents=True, exist_ok=True)
    missing = [w for w in wanted if not _good(cache / w["file"], w["sha256"])]
    if missing:
        args = ["download", "--no-deps", "--quiet", "--dest", str(cache), *target.pip_args()]
        pip([*args, *(f"{w['name']}=={w['version']}" for w in missing)], "downloading wheels")
    paths = {}
    for w in wanted:
        path = cache / w["file"]
        if not _good(path, w["sha256"]):
            raise BuildFailed(f"{w['file']}: not downloaded, or its sha256 is not the index's")
        paths[w["file"]] = path
    return paths


def _good(path: Path, sha256: str | None) -> bool:
    return path.is_file() and (sha256 is None or sha256_of(path) == sha256)


def _requires_dist(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as whl:
        (meta,) = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
        return Parser().parsestr(whl.read(meta).decode()).get_all("Requires-Dist") or []


def _setuptools_here() -> bool:
    """Whether this interpreter can build linksweep without an isolated build environment
    (pyproject.toml's build-system asks setuptools>=77)."""
    try:  # read, not imported: importing setuptools after pip trips its distutils check
        return int(metadata.version("setuptools").split(".")[0]) >= 77
    except metadata.PackageNotFoundError:
        return False


def _copy_tree(repo: Path, dest: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=False,
    )
    if listed.returncode != 0:  # a tree without git (an archive): all but the usual litter
        litter = shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__")
        shutil.copytree(repo, dest, ignore=litter)
        return
    for rel in filter(None, listed.stdout.decode().split("\0")):
        src = repo / rel
        if src.is_file():  # a tracked file deleted in the work tree is not in the build
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def check_pip() -> None:
    """:class:`BadInput` unless this interpreter's pip can ``install --dry-run --report``."""
    try:
        version = metadata.version("pip")
    except metadata.PackageNotFoundError:
        raise BadInput(
            f"{sys.executable} has no pip; allowed: an interpreter with pip 23 or newer"
        ) from None
    if int(version.split(".")[0]) < 23:
        raise BadInput(
            f"pip {version} in {sys.executable}; allowed: pip 23 or newer "
            "(`python -m pip install -U pip`)"
        )
