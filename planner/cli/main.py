"""Thin command line: parse, call the API, print. Exit codes: 0 ok, 1 infeasible, 2 bad input, 3 internal.

Commands live in planner/commands/<name>.py, each with `register(subparsers)` that sets `func`;
they are discovered here so that adding a command touches one file.
"""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

from planner.errors import PlannerError


def build_parser() -> argparse.ArgumentParser:
    import planner.cli as pkg
    parser = argparse.ArgumentParser(prog="planner", description="Plan LLM training: parallel config + GPU mapping.")
    parser.add_argument("--version", action="version", version=f"planner {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"planner.cli.{mod.name}")
        if hasattr(module, "register"):
            module.register(sub)
    return parser


def _version() -> str:
    from planner import __version__
    return __version__


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:          # argparse: usage errors are bad input
        return 2 if e.code not in (0, None) else 0
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        rc = args.func(args)
        return int(rc or 0)
    except PlannerError as e:
        kind = {2: "error", 1: "infeasible"}.get(e.exit_code, "error")
        print(f"planner: {kind}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("planner: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # internal error: one line, traceback only when asked
        if os.environ.get("PLANNER_DEBUG"):
            raise
        print(f"planner: internal error: {type(e).__name__}: {e} (set PLANNER_DEBUG=1 for a traceback)",
              file=sys.stderr)
        return 3


def spec_arg(path: str):
    """Load a spec for a command; SpecError propagates to main()."""
    from planner.spec import load_spec
    return load_spec(path)


if __name__ == "__main__":
    sys.exit(main())
