"""What the target node is and what it already has: pure functions over the command line's words.

A target is a CPython version and the pip platform tags its wheels may carry. What it has is
``name==version`` pairs: ``--have torch==2.11.0`` or a file of them (``python -m pip list
--format=freeze`` on the node prints exactly that, also for packages a conda or editable install
put there, where ``pip freeze`` prints ``name @ url`` without a version).

A package the target has is handed to pip's resolver as a *stand-in*: a wheel with that name, a
version marked as ours (:func:`stand_in_version`) and no dependencies. The resolver then checks
linksweep's requirements against the target's version, and never descends into what the target's
torch needs (its CUDA wheels are GBs, and the image has them already).

May import: packaging.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

STAND_IN_LABEL = "have"
"""Local version label of a stand-in. No index hosts local versions, and a label of our own keeps
a stand-in apart from a real wheel of the same local version (``torch 2.13.0+cpu`` lies in a
find-links folder on some machines): pip would take the real one, whose tags are more specific."""

# Legacy manylinux names and the glibc they stand for (PEP 513, 571, 599).
_LEGACY = {"manylinux1": 5, "manylinux2010": 12, "manylinux2014": 17}
_PEP600 = re.compile(r"^manylinux_2_(\d+)_([a-z0-9_]+)$")
_LEGACY_TAG = re.compile(r"^(manylinux1|manylinux2010|manylinux2014)_([a-z0-9_]+)$")
_PYTHON = re.compile(r"^3\.(\d{1,2})$")
_HAVE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*===?\s*([^\s;#]+)$")
DEFAULT_PLATFORM = "manylinux_2_28_x86_64"
"""glibc 2.28 and newer, x86_64: what CUDA 12/13 builds of torch need (their wheels are
``manylinux_2_28``), so a node that runs such a torch runs every wheel this admits."""


class BadInput(ValueError):
    """A command-line value the builder cannot use; the message names it and what is allowed."""


@dataclass(frozen=True)
class Target:
    """The interpreter and platform the wheels must install on."""

    python: str
    """``MAJOR.MINOR`` of the node's CPython, e.g. ``3.12``."""
    platforms: tuple[str, ...]
    """Every pip platform tag a wheel may carry (:func:`expand_platforms`), newest first."""

    @property
    def abi(self) -> str:
        """``cp312`` for 3.12; pip adds ``abi3`` and ``none`` itself (packaging.tags)."""
        return "cp" + self.python.replace(".", "")

    def pip_args(self) -> list[str]:
        """The options that make pip choose wheels for the target, not for this machine."""
        args = ["--only-binary=:all:", "--implementation", "cp"]
        args += ["--python-version", self.python, "--abi", self.abi]
        for tag in self.platforms:
            args += ["--platform", tag]
        return args

    def key(self) -> str:
        """A folder name for this target's downloads: a cache shared by targets would hand
        one target's wheel to another whose tags differ."""
        return f"cp{self.python.replace('.', '')}-{self.platforms[0]}"


def parse_python(text: str) -> str:
    """``3.12`` as given, or :class:`BadInput`."""
    if not _PYTHON.match(text.strip()):
        raise BadInput(f"--python {text!r}; allowed: a CPython 3 MAJOR.MINOR such as 3.12")
    return text.strip()


def expand_platforms(platforms: list[str]) -> tuple[str, ...]:
    """Every tag a wheel for these platforms may carry, each given tag's newest first.

    pip takes ``--platform`` literally (pip/_internal/utils/compatibility_tags.py expands only
    the legacy names, ``manylinux2014`` to 2010 and 1): ``manylinux_2_28_x86_64`` alone would
    refuse the many wheels tagged ``manylinux2014_x86_64``, though a glibc 2.28 system runs every
    older manylinux wheel. Other tags (``musllinux_1_2_x86_64``) pass through as given. One
    architecture only: pip picks one wheel per package, which could not serve two."""
    if not platforms:
        platforms = [DEFAULT_PLATFORM]
    out: list[str] = []
    arches: set[str] = set()
    for tag in platforms:
        tag = tag.strip()
        new, old = _PEP600.match(tag), _LEGACY_TAG.match(tag)
        if new:
            glibc, arch = int(new.group(1)), new.group(2)
        elif old:
            glibc, arch = _LEGACY[old.group(1)], old.group(2)
        elif tag and " " not in tag and "/" not in tag:
            out.append(tag)
            continue
        else:
            raise BadInput(
                f"--platform {tag!r}; allowed: a pip platform tag such as {DEFAULT_PLATFORM}"
            )
        arches.add(arch)
        for minor in range(glibc, 4, -1):
            out.append(f"manylinux_2_{minor}_{arch}")
            out += [f"{name}_{arch}" for name, at in _LEGACY.items() if at == minor]
    if len(arches) > 1:
        raise BadInput(
            f"--platform: tags of several architectures ({', '.join(sorted(arches))}); "
            "allowed: one architecture per bundle (build one bundle per architecture)"
        )
    return tuple(dict.fromkeys(out))


def parse_have(lines: list[str], source: str) -> dict[str, str]:
    """``{canonical name: version}`` from ``name==version`` lines (blank lines and ``#``
    comments skipped); :class:`BadInput` naming the source and line for anything else."""
    have: dict[str, str] = {}
    for number, raw in enumerate(lines, start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        found = _HAVE.match(line)
        where = f"{source} line {number}" if source != "--have" else "--have"
        if found is None:
            hint = " (pip freeze printed a URL: use `python -m pip list --format=freeze`)"
            raise BadInput(
                f"{where}: {raw.strip()!r}; allowed: NAME==VERSION, as "
                "`python -m pip list --format=freeze` prints it"
                + (hint if " @ " in line or line.startswith("-e") else "")
            )
        name, version = canonicalize_name(found.group(1)), found.group(2)
        try:
            Version(version)
        except InvalidVersion:
            raise BadInput(
                f"{where}: version {version!r} of {name} is not a PEP 440 version"
            ) from None
        if have.get(name, version) != version:
            raise BadInput(f"{where}: {name} given twice, as {have[name]} and {version}")
        have[name] = version
    return have


def stand_in_version(version: str) -> str:
    """The stand-in's version: the target's, with our local label (``2.11.0+have``,
    ``2.11.0+cu130.have``). Requirements ignore local labels (PEP 440), so the stand-in
    satisfies exactly what the target's own version does."""
    sep = "." if "+" in version else "+"
    return f"{version}{sep}{STAND_IN_LABEL}"


def is_stand_in(name: str, version: str, have: dict[str, str]) -> bool:
    """Whether the resolver's ``name version`` is one of our stand-ins for ``have``."""
    wanted = have.get(canonicalize_name(name))
    return wanted is not None and str(Version(version)) == str(Version(stand_in_version(wanted)))
