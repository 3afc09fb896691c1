"""`autosched export OP_FILE --target T -o DIR`: the best recorded kernels as a library."""
from __future__ import annotations

import argparse

from .options import add_selection


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `export` command to the main CLI's subparsers."""
    p = subparsers.add_parser("export", help="build the best recorded kernels into a library")
    add_selection(p)
    p.add_argument("--target", default="llvm")
    p.add_argument("--db", metavar="URL")
    p.add_argument("-o", "--output", required=True, metavar="DIR")
    return p


def run(args: argparse.Namespace) -> int:
    """Build the library and print where it went."""
    from ..exporting import export

    path = export(args.op_file, args.target, args.output, args.db, args.workload, args.arg,
                  args.load_timeout)
    print(f"wrote {path}")
    return 0
