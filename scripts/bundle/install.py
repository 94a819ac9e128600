"""Install linksweep on a node that reaches no package index, from a bundle made by
``python scripts/bundle`` (docs/offline-bundle.md is the whole procedure).

    sh install-bundle.sh VENV             # made with --system-site-packages when absent
    sh install-bundle.sh --target DIR     # a folder to put on PYTHONPATH instead

Standard library only: it runs on the node's own Python before anything is installed (PYTHON=...
picks which one; the bundle folder's copy is ``install_bundle.py``). In order:

1. every part's size and sha256 against ``manifest.json``: a part damaged or missing in the
   transfer is named before anything is unpacked;
2. the parts joined as one stream and unpacked into ``wheels/`` beside them, each wheel's sha256
   checked;
3. the destination's Python must be the one the wheels were chosen for;
4. ``pip install --no-index --find-links wheels/ linksweep==VERSION`` (and PIP_NO_INDEX=1): pip
   resolves against what the destination already has, so the image's torch is used, never
   replaced; into a folder, every wheel with ``--no-deps`` (pip's ``--target`` ignores what is
   installed, and would look for a torch the bundle does not have);
5. versions: each wheel at the manifest's version, or the target's own copy kept where it met
   every requirement; each package left out because the target has it, present;
6. ``import ray, deepspeed, duckdb, pydantic, datasets`` and ``linksweep --help``, run from a
   temporary folder so that nothing is imported from a checkout.

``manifest.json``: ``format`` (1); ``requirement`` (``linksweep==0.1.0``); ``target``
(``python``, ``abi``, ``platforms``); ``parts`` [{``file``, ``bytes``, ``sha256``}]; ``wheels``
[{``file``, ``name``, ``version``, ``bytes``, ``sha256``, ``origin``}]; ``left_out`` [{``name``,
``version``, ``reason``}]; ``built`` (when, by which pip, from which commit).

Exit 0 when every check passed, 1 when one failed, 2 on bad input (no manifest, no Python).

May import: nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

MANIFEST = "manifest.json"
PART_PREFIX = "linksweep-bundle.tar."
SMOKE_IMPORTS = ("ray", "deepspeed", "duckdb", "pydantic", "datasets")
_VERSIONS = (
    "import importlib.metadata as m, json, re\n"
    "seen = {}\n"
    "for d in m.distributions():\n"
    "    n = d.metadata['Name']\n"
    "    if n: seen.setdefault(re.sub(r'[-_.]+', '-', n).lower(), d.version)\n"
    "print(json.dumps(seen))\n"
)


class Failed(Exception):
    """A check failed; the message says which and what to do."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def part_problems(folder: Path, parts: list[dict]) -> list[str]:
    """One line per part that is missing, short, long or not the manifest's bytes."""
    problems = []
    for part in parts:
        path = folder / part["file"]
        if not path.is_file():
            problems.append(f"{part['file']}: missing")
        elif path.stat().st_size != part["bytes"]:
            size = path.stat().st_size
            problems.append(f"{part['file']}: {size} bytes, the manifest says {part['bytes']}")
        elif sha256_of(path) != part["sha256"]:
            problems.append(f"{part['file']}: sha256 differs from the manifest's")
    return problems


class JoinedParts(io.RawIOBase):
    """The parts read as one stream, in order (no joined copy on disk)."""

    def __init__(self, paths: list[Path]) -> None:
        self._paths, self._at, self._file = list(paths), 0, None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self._at < len(self._paths):
            if self._file is None:
                self._file = self._paths[self._at].open("rb")
            n = self._file.readinto(buffer)
            if n:
                return n
            self._file.close()
            self._file, self._at = None, self._at + 1
        return 0

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        super().close()


def unpack(folder: Path, parts: list[dict], dest: Path) -> list[Path]:
    """The parts' wheels into ``dest``; only plain ``wheels/<file>`` members are accepted."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    stream = io.BufferedReader(JoinedParts([folder / p["file"] for p in parts]), 1 << 20)
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            head, _, name = member.name.partition("/")
            if head != "wheels" or not member.isfile() or not name or "/" in name or name[0] == ".":
                raise Failed(f"unexpected member {member.name!r} in the bundle's tar")
            source = tar.extractfile(member)
            with (dest / name).open("wb") as f:
                while chunk := source.read(1 << 20):
                    f.write(chunk)
            out.append(dest / name)
    return out


def wheel_problems(wheels: list[dict], found: list[Path]) -> list[str]:
    by_name = {p.name: p for p in found}
    problems = [f"{w['file']}: not in the parts" for w in wheels if w["file"] not in by_name]
    problems += [
        f"{w['file']}: sha256 differs from the manifest's"
        for w in wheels
        if w["file"] in by_name and sha256_of(by_name[w["file"]]) != w["sha256"]
    ]
    return problems


def compare_versions(manifest: dict, seen: dict[str, str]) -> tuple[list, list, list]:
    """(installed, kept, problems) from the destination's ``{canonical name: version}``.
    installed: (name, version) at the manifest's version; kept: (name, theirs, ours) where the
    destination had its own copy, which pip keeps when it meets every requirement."""
    installed, kept, problems = [], [], []
    for w in manifest["wheels"]:
        have = seen.get(canonical(w["name"]))
        if have is None:
            problems.append(f"{w['name']} {w['version']}: not installed")
        elif have == w["version"]:
            installed.append((w["name"], have))
        else:
            kept.append((w["name"], have, w["version"]))
    for gone in manifest["left_out"]:
        have = seen.get(canonical(gone["name"]))
        if have is None:
            problems.append(
                f"{gone['name']}: left out of the bundle because the target has it, but the "
                "destination does not (a venv made without --system-site-packages?)"
            )
    return installed, kept, problems


def _run(cmd: list[str], env: dict, what: str, show: bool = False) -> str:
    with tempfile.TemporaryDirectory(prefix="linksweep-check-") as cwd:
        done = subprocess.run(
            cmd, cwd=cwd, env=env, check=False, text=True, capture_output=not show
        )
    if done.returncode != 0:
        tail = "" if show else "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise Failed(f"{what}: exit {done.returncode}\n{tail}".rstrip())
    return "" if show else done.stdout


def _destination(args: argparse.Namespace) -> tuple[list[str], list[str], dict]:
    """(python, linksweep command, environment) for the destination, a venv made if absent."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PIP_NO_INDEX"] = "1"  # and --no-index: the install never asks a registry
    if args.target:
        folder = Path(args.target).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        env["PYTHONPATH"] = str(folder)
        return [args.python or sys.executable], ["-m", "orchestrator"], env
    venv = Path(args.venv).resolve()
    python = venv / "bin" / "python"
    if not venv.exists():
        print(f"creating {venv} (--system-site-packages: it sees the image's torch)")
        maker = args.python or sys.executable
        cmd = [maker, "-m", "venv", "--system-site-packages", str(venv)]
        _run(cmd, env, "python -m venv (Debian: apt install python3-venv)")
        _see_parent_venv(maker, str(python), env)
    if not python.exists():
        raise Failed(f"{venv} has no bin/python; allowed: a venv, or a path that does not exist")
    return [str(python)], [str(venv / "bin" / "linksweep")], env


_SITE = (
    "import json, site, sys; "
    "print(json.dumps([sys.prefix != sys.base_prefix, site.getsitepackages()]))"
)
PARENT_PTH = "linksweep-parent-venv.pth"


def parent_pth(in_venv: bool, parent_sites: list[str], own_sites: list[str]) -> str:
    """The .pth text that lets a new venv see the packages of the venv that made it; empty where
    the maker is no venv. ``--system-site-packages`` reaches the *base* interpreter's packages:
    a venv made by ``/opt/torch/.venv/bin/python3`` (the GPU image here) would not see that
    venv's torch. A .pth's folders come after the venv's own, so what the bundle installs wins."""
    if not in_venv:
        return ""
    return "".join(f"{d}\n" for d in parent_sites if d not in own_sites)


def _see_parent_venv(maker: str, python: str, env: dict) -> None:
    in_venv, parent_sites = json.loads(_run([maker, "-c", _SITE], env, "reading site folders"))
    _, own_sites = json.loads(_run([python, "-c", _SITE], env, "reading the venv's folders"))
    if text := parent_pth(in_venv, parent_sites, own_sites):
        Path(own_sites[0], PARENT_PTH).write_text(text)
        print(f"{maker} is itself a venv: its packages are seen through {PARENT_PTH}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("venv", nargs="?", help="the venv to install into (made if absent)")
    p.add_argument("--target", help="a folder to install into instead of a venv")
    p.add_argument(
        "--bundle", default=str(Path(__file__).resolve().parent), help="the parts' folder"
    )
    p.add_argument(
        "--python", help="the interpreter for a new venv or --target (default: this one)"
    )
    args = p.parse_args(argv)
    if bool(args.venv) == bool(args.target):
        p.error("give a VENV or --target DIR (one of them)")
    folder = Path(args.bundle).resolve()
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        print(f"error: {folder / MANIFEST}: {exc}", file=sys.stderr)
        return 2
    try:
        return _install(args, folder, manifest)
    except Failed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _install(args: argparse.Namespace, folder: Path, manifest: dict) -> int:
    if problems := part_problems(folder, manifest["parts"]):
        raise Failed("parts damaged or missing; copy them again:\n  " + "\n  ".join(problems))
    print(f"parts: {len(manifest['parts'])} verified (sha256)")
    found = unpack(folder, manifest["parts"], folder / "wheels")
    if problems := wheel_problems(manifest["wheels"], found):
        raise Failed("wheels:\n  " + "\n  ".join(problems))
    python, linksweep, env = _destination(args)
    want = manifest["target"]["python"]
    got = _run([*python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], env, "python")
    if got.strip() != want:
        raise Failed(f"{python[0]} is Python {got.strip()}; the bundle's wheels are for {want}")
    pip = [*python, "-m", "pip", "install", "--quiet", "--no-index", "--disable-pip-version-check"]
    if args.target:  # --upgrade: pip --target skips what the folder has, even if older
        files = [str(folder / "wheels" / w["file"]) for w in manifest["wheels"]]
        _run([*pip, "--no-deps", "--upgrade", "--target", args.target, *files], env, "pip", True)
    else:
        pip_venv = [*pip, "--find-links", str(folder / "wheels"), manifest["requirement"]]
        _run(pip_venv, env, "pip install (its message above names what is missing)", show=True)
        # a linksweep of the same version already there (an earlier bundle) is replaced: pip
        # would call it satisfied and keep the old code
        ours = [w["file"] for w in manifest["wheels"] if w["name"] == "linksweep"]
        again = [
            *pip,
            "--no-deps",
            "--force-reinstall",
            *(str(folder / "wheels" / f) for f in ours),
        ]
        _run(again, env, "pip install linksweep", show=True)
    seen = json.loads(_run([*python, "-c", _VERSIONS], env, "reading installed versions"))
    installed, kept, problems = compare_versions(manifest, seen)
    if problems:
        raise Failed("versions:\n  " + "\n  ".join(problems))
    _run([*python, "-c", "import " + ", ".join(SMOKE_IMPORTS)], env, "imports")
    help_cmd = [*python, *linksweep, "--help"] if args.target else [*linksweep, "--help"]
    _run(help_cmd, env, "linksweep --help")
    _report(args, python[0], manifest, installed, kept)
    return 0


def _report(args, python: str, manifest: dict, installed: list, kept: list) -> None:
    where = args.target or args.venv
    print(f"installed from the bundle into {where} ({len(installed)} packages):")
    print("  " + ", ".join(f"{n} {v}" for n, v in installed))
    if kept:
        print("kept the destination's own (they meet every requirement):")
        print("  " + ", ".join(f"{n} {theirs} (bundle: {ours})" for n, theirs, ours in kept))
    if manifest["left_out"]:
        print("left out of the bundle, the target has them:")
        print("  " + ", ".join(f"{g['name']} {g['version']}" for g in manifest["left_out"]))
    print(f"checks passed: import {', '.join(SMOKE_IMPORTS)}; linksweep --help")
    run = f"{where}/bin/linksweep"
    if args.target:
        run = f"PYTHONPATH={args.target} {python} -m orchestrator"
    print(f"next: {run} selftest --dry-run")


if __name__ == "__main__":
    sys.exit(main())
