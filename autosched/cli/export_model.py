"""`autosched export-model MODEL_FILE --target T -o DIR`: the kernels that beat torch.

DIR gets the kernel library of the operators whose best recorded kernel is faster than
torch's recorded baseline, and, called as the model calls it, faster than torch's operator
timed beside it (`--decide-on side-by-side`, the default; `records` compares the call
with torch's baseline record instead), and `model_ops.json`, the decision for every
operator; load it with ``torch.compile(model, backend=autosched.model.backend(DIR))``.
Before the library is final the whole step (the training step with --train, else
inference) compiled with the chosen kernels is timed against inductor alone, and groups
of kernels that keep it from being faster beyond noise go back to torch (`--step-check`,
on by default); what the check measured is printed and kept in `model_ops.json`.
"""
from __future__ import annotations

import argparse

from ..model.step_check import ROUNDS, min_rounds
from .options import DB_URL_HELP
from .tune_model import add_model_selection


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `export-model` command to the main CLI's subparsers."""
    p = subparsers.add_parser("export-model", help="build a model's winning kernels into a "
                              "library for autosched.model.backend")
    add_model_selection(p)
    p.add_argument("--target", default="llvm")
    p.add_argument("--db", metavar="URL", help=DB_URL_HELP)
    p.add_argument("-o", "--output", required=True, metavar="DIR")
    p.add_argument("--decide-on", choices=("side-by-side", "records"), default="side-by-side",
                   help="side-by-side: each kernel, called as the model calls it, against "
                        "torch's operator timed now, calls alternating (fair on a machine "
                        "whose speed drifts); records: the call against torch's baseline "
                        "record (when this machine is too busy to time now)")
    p.add_argument("--time-all", action="store_true",
                   help="time every task's kernel as called beside torch, not only those "
                        "whose record beats torch's baseline; the call decides for each")
    p.add_argument("--step-check", choices=("on", "off"), default="on",
                   help="on: time the whole compiled step with the chosen kernels against "
                        "inductor alone (repeats alternating) and give back to torch, one "
                        "group (a workload's kernels) at a time, those that keep it from "
                        "being faster beyond noise; off: keep the per-operator choice")
    p.add_argument("--step-rounds", type=int, default=ROUNDS, metavar="N",
                   help="alternating rounds per variant of the step check (at least "
                        f"{min_rounds()})")
    return p


def run(args: argparse.Namespace) -> int:
    """Build the library, print the per-operator decisions and where they went."""
    from ..model.choice import choices_table, read_step_check
    from ..model.step_check import report_lines
    from ..model.export import export_model

    path, choices = export_model(args.model_file, args.target, args.output, args.db,
                                 args.train, side_by_side=args.decide_on == "side-by-side",
                                 step_check=args.step_check == "on",
                                 step_rounds=args.step_rounds, time_all=args.time_all)
    check = read_step_check(args.output)
    if check is not None:
        print("\n".join(report_lines(check)))
    print(choices_table(choices))
    won = sum(1 for c in choices if c.chosen == "autosched")
    print(f"{won} of {len(choices)} operators run autosched kernels; wrote {path}")
    return 0
