"""`autosched export-model MODEL_FILE --target T -o DIR`: the kernels that beat torch.

DIR gets the kernel library of the operators whose best recorded kernel is faster than
torch's recorded baseline and `model_ops.json`, the decision for every operator; load it
with ``torch.compile(model, backend=autosched.torch.backend(DIR))``.
"""
from __future__ import annotations

import argparse

from .options import DB_URL_HELP
from .tune_model import add_model_selection


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `export-model` command to the main CLI's subparsers."""
    p = subparsers.add_parser("export-model", help="build a model's winning kernels into a "
                              "library for autosched.torch.backend")
    add_model_selection(p)
    p.add_argument("--target", default="llvm")
    p.add_argument("--db", metavar="URL", help=DB_URL_HELP)
    p.add_argument("-o", "--output", required=True, metavar="DIR")
    return p


def run(args: argparse.Namespace) -> int:
    """Build the library, print the per-operator decisions and where they went."""
    from ..model.choice import choices_table
    from ..model.tuning import export_model

    path, choices = export_model(args.model_file, args.target, args.output, args.db,
                                 args.train)
    print(choices_table(choices))
    won = sum(1 for c in choices if c.chosen == "autosched")
    print(f"{won} of {len(choices)} operators run autosched kernels; wrote {path}")
    return 0
