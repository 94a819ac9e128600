"""``--set KEY=VALUE``: a sweep file's keys overridden on the command line, before validation.

The same file then serves more than one machine without a copy that drifts: the classic 2-GPU
sweep rehearsed on one GPU is ``--set ranks_per_gpu=2``; a shorter rehearsal adds
``--set steps=20``. ``KEY`` is a dotted path into the YAML document (``grid.strategy``,
``trace.steps``); ``VALUE`` is read as YAML (``2``, ``true``, ``[ddp, zero3]``, ``{}``), so it
means what it would in the file. A key the file lacks is added; the spec's own validation then
refuses a key that does not exist, naming the allowed ones, as it would in the file. The
overridden document is what the sweep stores (``sweeps.spec_json``), so a stored sweep says what
ran, and ``--resume`` with the same ``--set`` finds it unchanged.

Pure: a document in, a new document out.

May import: yaml.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import yaml


class OverrideError(ValueError):
    """A ``--set`` argument that cannot be applied; ``problems`` name each one."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"grid.strategy=[ddp, zero3]"`` -> (["grid", "strategy"], ["ddp", "zero3"]). Raises
    OverrideError naming the argument when it has no ``=``, an empty key part or a value that
    is not YAML."""
    key, sep, raw = text.partition("=")
    path = key.strip().split(".")
    if not sep or not all(p.strip() for p in path):
        raise OverrideError(
            [f"--set {text!r}: expected KEY=VALUE with KEY a dotted path (e.g. ranks_per_gpu=2, "
             "grid.strategy=[ddp, zero3])"]
        )  # fmt: skip
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise OverrideError([f"--set {text!r}: the value is not valid YAML: {exc}"]) from None
    return [p.strip() for p in path], value


def apply_overrides(document: Any, overrides: Sequence[str]) -> Any:
    """``document`` (a loaded sweep file) with each ``KEY=VALUE`` of ``overrides`` set, in
    order; the input is not changed. Raises OverrideError naming every argument that cannot be
    applied (no ``=``; a path through a value that is not a mapping)."""
    if not overrides:
        return document
    out = copy.deepcopy(document) if isinstance(document, dict) else document
    problems: list[str] = []
    for text in overrides:
        try:
            path, value = parse_override(text)
        except OverrideError as exc:
            problems.extend(exc.problems)
            continue
        if not isinstance(out, dict):
            problems.append(f"--set {text!r}: the sweep file is not a mapping of keys")
            continue
        node = out
        for i, part in enumerate(path[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                where = ".".join(path[: i + 1])
                problems.append(
                    f"--set {text!r}: {where} is {type(child).__name__} {child!r} in the sweep "
                    "file, not a mapping of keys; allowed: set it whole (--set "
                    f"{where}=VALUE)"
                )
                break
            node = child
        else:
            node[path[-1]] = value
    if problems:
        raise OverrideError(problems)
    return out


def describe(overrides: Sequence[str]) -> str:
    """The overrides as one would type them (``--set a=1 --set b=2``), for messages."""
    return " ".join(f"--set {o}" for o in overrides)
