"""Thin command line: parse, call the API, print. Exit codes: 0 ok, 1 infeasible, 2 bad input, 3 internal.

The commands are listed in COMMANDS (name, one-line help, module). The top-level parser is built from that
table alone, so `planner --help` and `planner --version` import no command module (and so no torch, OR-Tools,
scikit-learn, ...); once the command word is known, only that command's module is imported and its
`register(subparsers)` builds the full sub-parser and sets `func`.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from dataclasses import dataclass

from planner.errors import PlannerError


@dataclass(frozen=True)
class Command:
    name: str       # the command word
    help: str       # one line for `planner --help`; the module's add_parser must use the same text
    module: str     # the module whose register(subparsers) adds this command


# In the order `planner --help` lists them (alphabetical by module, as before the table existed).
COMMANDS: tuple[Command, ...] = (
    Command("batch", "plan many models / clusters / GPU counts from a sweep spec into a CSV", "planner.cli.batch"),
    Command("compare", "the portfolio vs exact vs annealing vs Megatron / rank-order / Pipette-style baselines",
            "planner.cli.compare"),
    Command("estimate", "estimate one given plan (iteration time, memory), no search", "planner.cli.estimate"),
    Command("export", "launch arguments and rank order that realise a solution", "planner.cli.export"),
    Command("fit", "fit an estimator (memory, compute, ...) on profiled samples", "planner.cli.fit"),
    Command("import", "import mpiGraph matrices, nccl-tests tables or a Megatron-LM run", "planner.cli.importers"),
    Command("network", "inspect measured networks (bandwidth snapshots)", "planner.cli.network"),
    Command("profile", "measure costs (memory, compute, network) into sample files", "planner.cli.profile"),
    Command("replan", "re-plan a solution without some nodes (failed or slow)", "planner.cli.replan"),
    Command("simulate", "simulate one plan op by op (iteration time, bubbles, memory per GPU)", "planner.cli.simulate"),
    Command("size", "largest compute-optimal (Chinchilla) model for a GPU-day budget on a cluster",
            "planner.cli.size"),
    Command("solve", "find the fastest plan that fits (config + GPU mapping)", "planner.cli.solve"),
    Command("validate", "compare predicted and measured iteration times (vTrain CSV format)", "planner.cli.validate"),
    Command("validate-memory", "MAPE of the memory estimator: held-out and extrapolation",
            "planner.cli.validate_memory"),
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The planner parser; only `command` (if it is one) gets its full sub-parser, the others a name and help."""
    parser = argparse.ArgumentParser(prog="planner", description="Plan LLM training: parallel config + GPU mapping.")
    parser.add_argument("--version", action="version", version=f"planner {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for c in COMMANDS:
        if c.name == command:
            importlib.import_module(c.module).register(sub)
        else:
            sub.add_parser(c.name, help=c.help)
    return parser


def command_word(argv: list[str]) -> str | None:
    """The command the arguments name: the first word that is not an option (the top level's take no value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def _version() -> str:
    from planner import __version__
    return __version__


EXIT_PIPE = 141      # 128 + SIGPIPE, what a shell reports for a writer whose reader closed the pipe


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return _run(argv)
    except PlannerError as e:
        kind = {2: "error", 1: "infeasible"}.get(e.exit_code, "error")
        print(f"planner: {kind}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("planner: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`planner export ... | head`): not planner's error, and not "no feasible plan" (1);
        # stdout goes to /dev/null so that the interpreter's final flush does not raise again
        for stream in (sys.stdout, sys.stderr):      # either may be the closed one (rich tables go to stderr)
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
            except (OSError, ValueError, AttributeError):      # a stream without a file descriptor (captured)
                pass
        return EXIT_PIPE
    except Exception as e:  # internal error: one line, traceback only when asked
        if os.environ.get("PLANNER_DEBUG"):
            raise
        print(f"planner: internal error: {type(e).__name__}: {e} (set PLANNER_DEBUG=1 for a traceback)",
              file=sys.stderr)
        return 3


def _run(argv: list[str]) -> int:
    parser = build_parser(command_word(argv))
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:          # argparse: usage errors are bad input
        return 2 if e.code not in (0, None) else 0
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
