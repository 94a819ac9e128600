"""The command line's commands, one module per command.

Each module defines ``add_parser(sub)``, its arguments (defined once, here and nowhere else), and
``main(args) -> int``, the command itself, returning an exit code of ``orchestrator.errors``.
``orchestrator/cli.py`` builds the parser from them and dispatches; ``python -m
orchestrator.emulated`` reuses ``cluster``'s arguments.

May import: nothing (the standard library only).
"""
