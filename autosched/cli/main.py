"""The command line: parses arguments, calls the Python API, prints.

Exit codes: 0 success, 2 bad input (one line on stderr), 1 anything else, 130 interrupted.
Tracebacks only with --debug. Heavy modules are imported by the commands that need them,
when they run, so `autosched --help` and `autosched --version` stay instant.
"""
from __future__ import annotations

import argparse
import copy
import logging
import os
import platform
import sys
from collections.abc import Mapping
from importlib import metadata

from ..errors import InfrastructureError, UserError
from . import (cost_model, db, export, export_model, plan, report, tune, tune_model,
               workers)
from .options import DB_ENV, DEFAULT_WORK_DIR, database_url

# Every command, in the order `autosched --help` lists them. Each module has
# add_parser(subparsers) -> its parser, and run(args) -> the exit code.
COMMANDS = (tune, export, tune_model, export_model, report, db, cost_model, plan, workers)

LOG_LEVELS = ("debug", "info", "warning", "error")

EPILOG = f"""\
options -v, --log-level and --debug work before or after the command.

database: every command uses --db URL, else ${DB_ENV}, else
sqlite:///WORK_DIR/autosched.db (WORK_DIR: tune's --work-dir, default {DEFAULT_WORK_DIR}).

exit codes:
  0    success
  1    failure: a run stopped before its budget, a fault of the machine, an internal error
  2    bad input: one line on stderr saying what to fix
  130  interrupted (Ctrl-C)
"""


class _DefaultsFormatter(argparse.HelpFormatter):
    """Help that ends each option taking a value with its default, where it has one
    worth saying (not None or empty) and the help does not already state it."""

    def add_argument(self, action):
        default = action.default
        wanted = (action.option_strings and action.nargs != 0  # flags have no value
                  and default not in (None, argparse.SUPPRESS, [])
                  and action.help is not argparse.SUPPRESS
                  and "default" not in (action.help or "").lower())
        if wanted:  # a copy: the parser's own action stays as the command defined it
            action = copy.copy(action)
            action.help = f"{action.help or ''} (default: %(default)s)".lstrip()
        super().add_argument(action)


class _TopFormatter(argparse.RawDescriptionHelpFormatter, _DefaultsFormatter):
    """The top-level help: the epilog keeps its lines (the exit-code table)."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad input as one line and exit code 2, shows defaults in
    help, and takes the logging and --debug options in every (sub)command (`top`: the
    `autosched` parser itself, which lists them and holds their defaults)."""

    def __init__(self, *args, top: bool = False, formatter_class=_DefaultsFormatter,
                 **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)
        if self.add_help:  # not a parent parser (those only lend their options)
            _add_global_options(self, top)

    def error(self, message):
        command = self.prog.partition(" ")[2]  # "autosched db stats" -> "db stats"
        if command:
            raise UserError(f"{command}: {message} (see `autosched {command} --help`)")
        raise UserError(f"{message} (see `autosched --help`)")


def _add_global_options(parser: argparse.ArgumentParser, top: bool) -> None:
    # A command accepts them too, defaulting to nothing so the top level's value stays.
    def shown(default, text):
        return {"default": default, "help": text} if top else {
            "default": argparse.SUPPRESS, "help": argparse.SUPPRESS}

    parser.add_argument("--debug", action="store_true", **shown(False, "show tracebacks"))
    parser.add_argument("-v", "--verbose", action="count",
                        **shown(0, "log more: -v info, -vv debug"))
    parser.add_argument("--log-level", type=str.lower, choices=LOG_LEVELS, metavar="LEVEL",
                        **shown(None, "level of the library's log messages on stderr: "
                                f"{', '.join(LOG_LEVELS)} (default: warning; -v: info)"))


def build_parser() -> argparse.ArgumentParser:
    """The `autosched` parser with every command; `args.func(args)` runs the chosen one."""
    parser = _Parser(prog="autosched", description="Tensor-program auto-scheduler on TVM",
                     epilog=EPILOG, formatter_class=_TopFormatter, top=True)
    parser.add_argument("--version", action="store_true",
                        help="print the versions a bug report needs and exit")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    shown = []
    for command in COMMANDS:
        p = command.add_parser(sub)
        p.set_defaults(func=command.run)
        shown.append(p.prog.rpartition(" ")[2])
    # `{tune,export,...}` names the commands, not the old spellings kept for scripts
    sub.metavar = "{" + ",".join(shown) + "}"
    return parser


def version_text() -> str:
    """autosched, its libraries and the versions of the search space and cost-model
    features, one per line: what a bug report needs. Reads installed metadata rather
    than importing TVM, torch or xgboost, so it works (and is instant) without them."""
    from cost_model import FEATURE_VERSION
    from search_space import SPACE_VERSION

    from ..versions import AUTOSCHED_VERSION

    def dist(*names: str) -> str:
        for name in names:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        return "not installed"

    lines = [("autosched", AUTOSCHED_VERSION), ("tvm", dist("apache-tvm")),
             ("tvm-ffi", dist("apache-tvm-ffi")), ("torch", dist("torch")),
             ("xgboost", dist("xgboost-cpu", "xgboost")),
             ("search space", SPACE_VERSION), ("cost-model features", FEATURE_VERSION),
             ("python", f"{platform.python_version()} ({platform.system()} "
                        f"{platform.machine()})")]
    return "\n".join(f"{name}: {value}" for name, value in lines)


def configure_logging(verbose: int, level: str | None):
    """Send the `autosched` loggers' messages at `level` (else info with -v, debug with
    -vv) to stderr, one line each; returns what undoes it, or None where nothing was
    asked (Python's default stays: warnings and errors on stderr)."""
    if level is None and not verbose:
        return None
    name = level or ("debug" if verbose >= 2 else "info")
    logger = logging.getLogger("autosched")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("autosched: %(levelname)s: %(name)s: %(message)s"))
    before = logger.level
    logger.addHandler(handler)
    logger.setLevel(name.upper())

    def undo():
        logger.removeHandler(handler)
        logger.setLevel(before)

    return undo


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run `autosched ARGV...` and return the exit code (argv defaults to sys.argv[1:],
    environ, where $AUTOSCHED_DB is read, to os.environ)."""
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.version:
            print(version_text())
            return 0
        if args.command is None:
            parser.print_help()
            return 0
        undo = configure_logging(args.verbose, args.log_level)
        try:
            if "db" in vars(args):  # every command that has --db: the one resolution
                args.db = database_url(args.db, vars(args).get("work_dir"),
                                       os.environ if environ is None else environ)
            return int(args.func(args) or 0)
        finally:
            if undo is not None:
                undo()
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
