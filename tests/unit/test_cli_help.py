"""The command line explains itself: every option's help gives its default, the top-level
epilog gives the workflow and the views, `run --help` the exit codes, `--version` the version;
`query`'s table never wraps or abbreviates numbers."""

from __future__ import annotations

import argparse

import pytest

from orchestrator import __version__
from orchestrator.cli import build_parser, main
from orchestrator.ui import fmt_cell, format_table


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"linksweep {__version__}"


def test_every_option_says_its_default():
    bare = []
    for name, sub in _subparsers(build_parser()).items():
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            text = action.help or ""
            if not text:
                bare.append(f"{name} {action.dest}")
            elif action.option_strings and not ("default" in text or "required" in text):
                bare.append(f"{name} {action.option_strings[0]}: {text}")
    assert bare == []


def test_epilog_has_workflow_views_and_exit_codes(capsys):
    parser = build_parser()
    top = parser.format_help()
    for text in ("linksweep run", "linksweep report", "linksweep query", "variant_summary",
                 "link_sensitivity", "link_overview", "interval_kind", "docs/schema.md"):  # fmt: skip
        assert text in top
    run_help = _subparsers(parser)["run"].format_help()
    flat = " ".join(run_help.split())
    for code in ("0 ", "1 ", "2 ", "130"):
        assert f"\n  {code}" in run_help
    assert "default: ./results.duckdb" in flat
    query_help = " ".join(_subparsers(parser)["query"].format_help().split())
    assert "link_sensitivity" in query_help and "default: table" in query_help
    cluster = " ".join(_subparsers(parser)["cluster"].format_help().split())
    assert "status" in cluster and "check" in cluster and "slow=500mbit" in cluster


def test_query_table_prints_numbers_in_full_on_one_line():
    rows = [("zero3", 8, 216530000.0, 0.000001234, None), ("ddp", 1, 13530000.0, 0.25, "x")]
    lines = format_table(["strategy", "ga", "comm_bytes", "t", "note"], rows)
    text = "\n".join(lines)
    assert "216530000" in text and "13530000" in text and "0.000001234" in text
    assert "e+" not in text and "e-" not in text and "…" not in text
    assert len(lines) == 2 + len(rows) + 1  # header, rule, one line per row, count
    assert fmt_cell(1.353e7) == "13530000" and fmt_cell(None) == "" and fmt_cell(True) == "True"


def test_run_summary_rounds_to_significant_digits_without_e_notation():
    assert fmt_cell(0.2348249207502704, 4) == "0.2348"
    assert fmt_cell(13530000.0, 4) == "13530000"
    assert fmt_cell(216530123.0, 4) == "216500000"
    assert fmt_cell(0.000012345, 4) == "0.00001234"


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """Every ``--option`` of a command, nested subcommands' included (``baseline set``)."""
    out = {o for a in parser._actions for o in a.option_strings if o.startswith("--")}
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for nested in a.choices.values():
                out |= _options(nested)
    return out - {"--help"}


def test_the_readme_command_list_is_the_parsers():
    """README's command block lists every command with every option the parser has, and no
    option it lacks: a hand copy of --help that nothing checked had drifted (fleet's --seed,
    cluster's --state-dir, report's --baseline were missing)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = text[text.index("\n## Commands") :]
    block = block[block.index("```") + 3 :]
    block = block[: block.index("```")]
    shown: dict[str, set[str]] = {}
    for line in block.splitlines():
        if line.startswith("linksweep "):
            words = line.split("#")[0].split()
            shown.setdefault(words[1], set()).update(re.findall(r"--[a-z][a-z-]*", " ".join(words)))
    commands = _subparsers(build_parser())
    assert sorted(set(shown) - {"--version"}) == sorted(commands)
    wrong = {
        name: (sorted(_options(sub) - shown[name]), sorted(shown[name] - _options(sub)))
        for name, sub in commands.items()
        if _options(sub) != shown[name]
    }
    assert wrong == {}  # command: (options the README lacks, options the parser lacks)
