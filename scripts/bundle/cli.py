"""``python scripts/bundle``: build the offline bundle for a node that reaches no package index.

    python scripts/bundle --python 3.12 --have-file have.txt --out bundle/ [--part-mib 60]

``have.txt`` is ``python -m pip list --format=freeze`` run on the node (or give the packages one
by one: ``--have torch==2.11.0 --have transformers==4.57.1 ...``). The bundle holds linksweep's
wheel and every wheel it needs for that Python and platform, except what the node has (and what
only those need: torch's CUDA wheels never travel); ``--build deepspeed`` (the default) names the
packages published only as sdists, built into pure-Python wheels here. The output folder holds
the parts, ``manifest.json`` and the installer (``install-bundle.sh``), nothing else: copy it
whole. Downloads are kept in ``--cache`` (one folder per target) for the next build.

May import: build, parts, target, install, packaging.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from bundle import build, parts
from bundle.install import MANIFEST
from bundle.target import BadInput, Target, expand_platforms, parse_have, parse_python

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = Path.home() / ".cache" / "linksweep-bundle"
KEY = ("ray", "deepspeed", "duckdb", "pydantic", "datasets", "transformers", "linksweep")
"""Shown in the summary: pip may take an older one to fit what the target has (ray 2.52 for a
target whose packaging is older than ray 2.60 accepts); ``--pin`` holds one."""
DEFAULT_PART_MIB = 60
"""A 64 MiB transfer with room for the installer, the manifest and the checkout (git archive of
HEAD, ~1 MB gzipped) beside one part."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python scripts/bundle", description=__doc__.split("\n\n")[0])
    p.add_argument("--python", required=True, help="the node's CPython MAJOR.MINOR, e.g. 3.12")
    p.add_argument(
        "--platform",
        action="append",
        default=[],
        help="a pip platform tag of the node, repeatable (default manylinux_2_28_x86_64; "
        "each manylinux tag admits the older ones too)",
    )
    p.add_argument("--have", action="append", default=[], help="NAME==VERSION the node has")
    p.add_argument("--have-file", help="the node's `python -m pip list --format=freeze`")
    p.add_argument(
        "--build",
        action="append",
        help="a package with no wheel, built here from its sdist (default: deepspeed); "
        "NAME or a requirement such as deepspeed==0.19.8",
    )
    p.add_argument(
        "--pin",
        action="append",
        default=[],
        help="a version to hold to, repeatable (ray==2.60.0: the Ray of the cluster to join; "
        "pip may otherwise choose an older one to fit what the target has)",
    )
    p.add_argument("--out", required=True, help="the folder to write the bundle into")
    p.add_argument("--part-mib", type=float, default=DEFAULT_PART_MIB, help="most MiB per part")
    p.add_argument("--cache", default=str(DEFAULT_CACHE), help="downloaded wheels, kept")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        target = Target(parse_python(args.python), expand_platforms(args.platform))
        have = parse_have(args.have, "--have")
        if args.have_file:
            lines = Path(args.have_file).read_text().splitlines()
            have = {**parse_have(lines, args.have_file), **have}
        if not args.part_mib > 0:
            raise BadInput(f"--part-mib {args.part_mib}; allowed: a number of MiB above 0")
        build.check_pip()
        out = Path(args.out)
        parts.clear_old_bundle(out, parts.bundle_names())
    except (BadInput, FileExistsError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        manifest = make(target, have, args.build or ["deepspeed"], out, args)
    except (build.BuildFailed, BadInput, InvalidRequirement) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(summary(manifest, out))
    return 0


def make(target: Target, have: dict[str, str], sdists: list[str], out: Path, args) -> dict:
    with tempfile.TemporaryDirectory(prefix="linksweep-bundle-") as tmp:
        work = Path(tmp)
        own = work / "own"
        built_from = _git()
        ours = build.linksweep_wheel(REPO, own, built_from["git_sha"], built_from["git_dirty"])
        pins, built = [], []
        have = {n: v for n, v in have.items() if n != "linksweep"}  # the one being installed
        for spec in sdists:
            req = Requirement(spec)
            name = canonicalize_name(req.name)
            if name in have:
                continue  # the target has it: left out like any other
            asked = spec if req.specifier else build.requirement_of(ours, name) or spec
            wheel = build.built_from_sdist(asked, own, target)
            version = wheel.name.split("-")[1]
            pins.append(f"{name}=={version}")
            built.append({"name": name, "version": version, "how": _how(name)})
        build.stand_ins(have, work / "have")
        pins += [f"{n}=={build.stand_in_version(v)}" for n, v in have.items()]
        pins += [str(Requirement(p)) for p in args.pin]
        requirement = f"linksweep=={ours.name.split('-')[1]}"
        report = build.resolve(target, requirement, [own, work / "have"], pins, work)
        own_files = {p.name for p in own.glob("*.whl")}
        ship, left_out = build.split_report(report, have, own_files)
        paths = {w["file"]: own / w["file"] for w in ship if w["own"]}
        wanted = [w for w in ship if not w["own"]]
        paths |= build.fetch(target, wanted, Path(args.cache) / target.key())
        part_list = parts.write_parts(paths, out, int(args.part_mib * parts.MIB))
        manifest = {
            "format": 1,
            "requirement": requirement,
            "target": {"python": target.python, "abi": target.abi, "platforms": target.platforms},
            "parts": part_list,
            "wheels": [_wheel_entry(w, paths[w["file"]], built) for w in ship],
            "left_out": left_out,
            "built": _built(built) | built_from,
        }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    shutil.copy2(SCRIPTS / "install-bundle.sh", out / "install-bundle.sh")
    shutil.copy2(SCRIPTS / "bundle" / "install.py", out / "install_bundle.py")
    return manifest


def _how(name: str) -> str:
    if name == "deepspeed":
        return "sdist built here with DS_BUILD_OPS=0: no precompiled op; the node JIT-builds each"
    return "sdist built here (pure Python)"


def _wheel_entry(w: dict, path: Path, built: list[dict]) -> dict:
    origin = "index"
    if w["name"] == "linksweep":
        origin = "this checkout"
    elif any(b["name"] == w["name"] for b in built):
        origin = "built here from its sdist"
    sha = w["sha256"] or build.sha256_of(path)
    return {"file": w["file"], "name": w["name"], "version": w["version"],
            "bytes": path.stat().st_size, "sha256": sha, "origin": origin}  # fmt: skip


def _git() -> dict:
    def git(*a: str) -> str:
        done = subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    sha = git("rev-parse", "HEAD") or None
    return {"git_sha": sha, "git_dirty": bool(sha and git("status", "--porcelain", "-uno"))}


def _built(sdists: list[dict]) -> dict:
    return {
        "at_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "pip": metadata.version("pip"),
        "from_sdist": sdists,
    }


def summary(manifest: dict, out: Path) -> str:
    total = sum(p["bytes"] for p in manifest["parts"])
    biggest = max(p["bytes"] for p in manifest["parts"])
    lines = [
        f"bundle: {out} ({manifest['requirement']}, Python {manifest['target']['python']}, "
        f"{manifest['target']['platforms'][0]})",
        f"  {len(manifest['wheels'])} wheels, {total / 1e6:.1f} MB in {len(manifest['parts'])} "
        f"parts (largest {biggest / parts.MIB:.1f} MiB)",
        "  "
        + ", ".join(f"{w['name']} {w['version']}" for w in manifest["wheels"] if w["name"] in KEY),
        "  left out, the target has them: "
        + (", ".join(f"{g['name']} {g['version']}" for g in manifest["left_out"]) or "none"),
        f"  install on the node: sh {out}/install-bundle.sh VENV  (docs/offline-bundle.md)",
    ]
    return "\n".join(lines)
