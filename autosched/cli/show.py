"""`autosched db show RECORD_ID [--db URL] --op-file F [--tir|--cuda|--sass]`: a tuned
kernel as text, the way MetaSchedule users print `sch.mod` and Triton users
`kernel.asm`: its schedule in TVMScript (the default), the CUDA source or the SASS.

The text goes to standard output alone (it can be piped to a file: the TVMScript
parses back); one line on standard error says which record it is. The work is
`autosched.kernel_source`; this module parses and prints.
"""
from __future__ import annotations

import argparse
import sys

from ..errors import InfrastructureError, UserError

VIEWS = ("tir", "cuda", "sass")


def add_parser(subparsers, parents: list) -> argparse.ArgumentParser:
    """Add `show` to the `db` command's subparsers (`parents` give it --db)."""
    p = subparsers.add_parser("show", parents=parents, help="a record's kernel: its "
                              "TVMScript, CUDA source or SASS")
    p.add_argument("record_id", type=int, metavar="RECORD_ID",
                   help="the record's id (the RECORD column of `autosched db best`)")
    p.add_argument("--op-file", metavar="FILE", help="the op file that defines the "
                   "record's workload (the database keeps its name, not its definition)")
    views = p.add_mutually_exclusive_group()
    views.add_argument("--tir", dest="view", action="store_const", const="tir",
                       help="the scheduled TIR as TVMScript (the default)")
    views.add_argument("--cuda", dest="view", action="store_const", const="cuda",
                       help="the CUDA source TVM generates instead of the default TIR "
                       "(cuda records; needs nvcc)")
    views.add_argument("--sass", dest="view", action="store_const", const="sass",
                       help="the SASS nvcc makes of it instead of the default TIR "
                       "(cuda records; needs nvcc and cuobjdump)")
    p.set_defaults(view="tir")
    return p


def run(db, args: argparse.Namespace) -> int:
    """Print the view of record `args.record_id` of the open database `db`."""
    import json

    from ..kernel_source import check_showable, find_record, kernel_source

    record = find_record(db, args.record_id)
    check_showable(record)
    kind = json.loads(record.target_key).get("kind")
    if args.view != "tir" and kind != "cuda":
        raise UserError(f"record {record.id} is for {kind}: --{args.view} shows CUDA "
                        "records only (--tir shows any)")
    if not args.op_file:
        raise UserError(f"db show needs --op-file: record {record.id} is of workload "
                        f"{record.workload!r}, whose definition the database does not "
                        "keep; pass the op file that defines it")
    source = kernel_source(record, args.op_file, cuda=args.view != "tir",
                           sass=args.view == "sass")
    text = {"tir": source.tir, "cuda": source.cuda, "sass": source.sass}[args.view]
    if text is None:  # only --sass can come back empty: say why
        _no_sass(source.build)
    print(f"record {record.id}: {source.task} on {kind}, sketch {source.sketch}, "
          f"{record.latency * 1e3:.4g} ms", file=sys.stderr)
    print(text.rstrip("\n"))
    return 0


def _no_sass(build: dict | None) -> None:
    from ..measure.cuda import sass

    if build is not None and build.get("binary") != "fatbin":
        raise InfrastructureError(f"SASS is read from nvcc's fatbin; this machine compiled "
                                  f"with {build.get('compiler')} (a {build.get('binary')})",
                                  "put nvcc on PATH, then rerun")
    sass.cuobjdump()  # raises the InfrastructureError that says what to install
    raise RuntimeError("cuobjdump found no SASS in the build's fatbin")
