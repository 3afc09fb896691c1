"""`autosched cost-model train`: a cost model from a tuning database, for warm starts.

    autosched cost-model train --db URL --op-file ops.py [--op-file more.py] -o model.json

Records name their workload and arguments, not the computation, so the op files that
define the workloads are given with --op-file (repeatable; a directory means every
.py file in it). Records of workloads found in none of them, of another target kind
or of another TVM / search-space version are skipped and counted.
The model is written as `model.json` (XGBoost JSON) plus `model.meta.json`.

The command was once `autosched model`; "model" now means only a PyTorch model
(`tune-model`, `autosched.model`), and the old spelling still works, hidden from help,
with one warning line on stderr, for the scripts that use it.
"""
from __future__ import annotations

import argparse
import os
import sys

from ..errors import UserError
from .options import DB_URL_HELP


OLD_NAME = "model"
RENAMED = "`autosched model` is now `autosched cost-model`; the old name will go"


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `cost-model` command (and `cost-model train`) to the main CLI's
    subparsers, and its old name `model` without a help row (see the module's docstring)."""
    p = subparsers.add_parser("cost-model", help="train cost models (warm starts for tune)")
    _add_train(p)
    old = subparsers.add_parser(OLD_NAME)  # no help=: argparse lists no row for it
    _add_train(old)
    old.set_defaults(func=run, renamed=RENAMED)
    return p


def _add_train(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="cost_model_command", required=True, metavar="{train}",
                           parser_class=type(p))
    t = sub.add_parser("train", help="train a cost model from database records")
    t.add_argument("--db", metavar="URL", help=DB_URL_HELP)
    t.add_argument("--op-file", action="append", required=True, metavar="PATH",
                   help="op file (or directory of op files) defining the recorded workloads")
    t.add_argument("--target", default="llvm", choices=("llvm", "cuda"),
                   help="train on records of this target kind")
    t.add_argument("--rounds", type=int, help="boosting rounds (default: the ranker's "
                   "setting for many tasks' records)")
    t.add_argument("-o", "--output", required=True, metavar="PATH", help="model file (.json)")


def _op_files(items: list[str]) -> list[str]:
    files = []
    for item in items:
        if os.path.isdir(item):
            files += sorted(os.path.join(item, f) for f in os.listdir(item) if f.endswith(".py"))
        elif os.path.isfile(item):
            files.append(item)
        else:
            raise UserError(f"--op-file: not found: {item}")
    if not files:
        raise UserError("--op-file: no .py files found")
    return files


def run(args: argparse.Namespace) -> int:
    """Train and save; prints what went in. Exit 0, or 2 (UserError) on bad input."""
    from ..training_data import train_model

    if "renamed" in vars(args):
        print(f"autosched: warning: {args.renamed}", file=sys.stderr)
    if not args.output.endswith(".json"):
        raise UserError(f"-o: the model file must end in .json, got {args.output!r}")
    if args.rounds is not None and args.rounds < 1:
        raise UserError(f"--rounds must be >= 1, got {args.rounds}")
    model, report = train_model(args.db, _op_files(args.op_file), args.target, args.rounds)
    model.save(args.output)
    print(f"trained on {report.rows} candidates of {report.groups} task groups "
          f"({report.failures} failures, {report.skipped_candidates} candidates no longer "
          f"replay); skipped records: {report.skipped_records or 'none'}", file=sys.stderr)
    print(f"wrote {args.output}")
    return 0
