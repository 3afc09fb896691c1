"""Arguments that several commands share, defined once so they read the same everywhere."""
from __future__ import annotations

import argparse

DB_URL_HELP = "sqlite:///PATH (default logs/autosched.db) or postgresql://USER@HOST:PORT/DB"


def add_selection(parser: argparse.ArgumentParser) -> None:
    """The op file and which of its workloads, with which parameters (`tune`, `export`)."""
    parser.add_argument("op_file", help="Python file with @autosched.workload functions")
    parser.add_argument("--workload", action="append", metavar="NAME",
                        help="workload to select (repeatable; default: all in the file)")
    parser.add_argument("--arg", action="append", metavar="K=V",
                        help="override a workload parameter (repeat a key for shape variants)")
