"""`autosched export OP_FILE --target T [--hardware KEY_OR_NAME] -o DIR`: the best
recorded kernels as a library. Without --hardware, this machine's records, or those of
the one other machine that measured a task (said in one line on stderr)."""
from __future__ import annotations

import argparse

from .options import DB_URL_HELP, add_selection


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `export` command to the main CLI's subparsers."""
    p = subparsers.add_parser("export", help="build the best recorded kernels into a library")
    add_selection(p)
    p.add_argument("--target", default="llvm")
    p.add_argument("--db", metavar="URL", help=DB_URL_HELP)
    p.add_argument("--hardware", metavar="KEY_OR_NAME",
                   help="use the records of this machine: a hardware key (or its first "
                        "characters) or the GPU / CPU name, as `autosched db stats` shows "
                        "them (default: this machine, else the one other that has records)")
    p.add_argument("-o", "--output", required=True, metavar="DIR")
    return p


def run(args: argparse.Namespace) -> int:
    """Build the library and print where it went."""
    from ..exporting import export

    path = export(args.op_file, args.target, args.output, args.db, args.workload, args.arg,
                  args.load_timeout, args.hardware)
    print(f"wrote {path}")
    return 0
