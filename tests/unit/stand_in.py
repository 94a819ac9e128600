"""A stand-in for one of the project's modules, seen by every form of import.

``monkeypatch.setitem(sys.modules, "a.b.c", fake)`` alone is not enough: once the real
``a.b.c`` has been imported (by an earlier test in the same session), ``from a.b import c``
reads the attribute ``c`` of package ``a.b`` and gets the real module back. A test that
passes alone then fails in the full suite. ``stand_in`` replaces both.
"""

import importlib
import sys
import types


def stand_in(monkeypatch, fake: types.ModuleType) -> types.ModuleType:
    """Install ``fake`` as the module it is named after; undone when the test ends."""
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    parent, _, leaf = fake.__name__.rpartition(".")
    if parent:
        monkeypatch.setattr(importlib.import_module(parent), leaf, fake, raising=False)
    return fake
