"""Arguments that several commands share, defined once so they read the same everywhere."""
from __future__ import annotations

import argparse

DB_URL_HELP = "sqlite:///PATH (default logs/autosched.db) or postgresql://USER@HOST:PORT/DB"


def seconds(text: str) -> float:
    """argparse type: a number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def add_selection(parser: argparse.ArgumentParser) -> None:
    """The op file and which of its workloads, with which parameters (`tune`, `export`)."""
    parser.add_argument("op_file", help="Python file with @autosched.workload functions")
    parser.add_argument("--workload", action="append", metavar="NAME",
                        help="workload to select (repeatable; default: all in the file)")
    parser.add_argument("--arg", action="append", metavar="K=V",
                        help="override a workload parameter (repeat a key for shape variants)")
    parser.add_argument("--load-timeout", type=seconds, default=60.0, metavar="SECONDS",
                        help="stop if the op file, or a workload building its tensors, takes "
                             "longer than this (0: no limit)")
