"""The command line: parses arguments, calls the Python API, prints.

Exit codes: 0 success, 2 bad input (one line on stderr), 1 anything else.
Tracebacks only with --debug. Heavy modules are imported by the commands that need them,
when they run, so `autosched --help` stays instant.
"""
from __future__ import annotations

import argparse
import sys

from ..errors import InfrastructureError, UserError
from . import db, export, export_model, model, plan, report, tune, tune_model, workers

# Every command, in the order `autosched --help` lists them. Each module has
# add_parser(subparsers) -> its parser, and run(args) -> the exit code.
COMMANDS = (tune, export, tune_model, export_model, report, db, model, plan, workers)


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad input as one line and exit code 2."""

    def error(self, message):
        raise UserError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    """The `autosched` parser with every command; `args.func(args)` runs the chosen one."""
    parser = _Parser(prog="autosched", description="Tensor-program auto-scheduler on TVM")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        command.add_parser(sub).set_defaults(func=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run `autosched ARGV...` and return the exit code (argv defaults to sys.argv[1:])."""
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args) or 0)
    except UserError as e:
        if debug:
            raise
        print(f"autosched: error: {e}", file=sys.stderr)
        return 2
    except InfrastructureError as e:  # the environment's fault: cause and remedy
        if debug:
            raise
        print(f"autosched: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("autosched: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if debug:
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"autosched: internal error: {type(e).__name__}: {first} (rerun with --debug "
              "for the traceback)", file=sys.stderr)
        return 1
