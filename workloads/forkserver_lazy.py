"""Imported once by the launcher's fork server after ``forkserver_preload``: what a run would
import lazily (``workloads.launcher.LAZY_PRELOAD``), each name skipped whatever its import raises,
so a broken optional package never ends the fork server (``launcher.import_quietly``).

May import: launcher.
"""

from __future__ import annotations

from workloads.launcher import LAZY_PRELOAD, import_quietly

SKIPPED = import_quietly(LAZY_PRELOAD)
"""The names this fork server could not import, with what they raised."""
