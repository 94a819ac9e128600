"""PLACEHOLDER: this feature's command-line options, their checks and its observers
(``orchestrator.commands.observers``).

May import: nothing (the standard library only).
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """None yet."""


def problems(args: argparse.Namespace) -> list[str]:
    return []


def observers(args: argparse.Namespace, **context) -> list:
    return []
