"""`autosched tune-model MODEL_FILE ...`: tune every operator of a model with one budget.

The model file is the one `autosched plan` reads (make_model, make_inputs, optional
loss_fn). Its operators are found by tracing (see `autosched/model/extract.py`), tuned
as tasks weighted by how often the model calls them, and torch's own latency for each is
measured once and recorded as its baseline. The table says, per operator, which is faster.
On `--target cuda` torch is timed on the GPU: here with the local runner (a GPU machine),
or with `--runner bundle:DIR` on the machine that measures the bundle, whose baselines
the next run imports.
"""
from __future__ import annotations

import argparse
import sys

from .tune import add_tune_options, tune_config


def add_model_selection(p: argparse.ArgumentParser) -> None:
    """The model file and which step of it (`tune-model`, `export-model`)."""
    p.add_argument("model_file", help="Python file with make_model() and make_inputs() "
                   "(and optionally loss_fn(output))")
    p.add_argument("--train", action="store_true",
                   help="a training step (forward and backward operators), not inference")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `tune-model` command to the main CLI's subparsers."""
    p = subparsers.add_parser("tune-model", help="tune the operators of a PyTorch model "
                              "and measure torch's own time for each")
    add_model_selection(p)
    add_tune_options(p)
    return p


def run(args: argparse.Namespace) -> int:
    """Tune, time torch, print the per-operator table; 1 when stopped before the budget."""
    from ..db import mask_password
    from ..errors import UserError
    from ..model.choice import choices_table
    from ..model.tuning import tune_model
    from .progress import JsonLog, ProgressBar

    config = tune_config(args)
    if config.dry_run:
        raise UserError("tune-model has no --dry-run; use `autosched tune --dry-run` on an "
                        "op file")
    log = JsonLog(config.work_dir)
    result = tune_model(args.model_file, config, args.train, [ProgressBar(), log])
    ops = result.model_ops
    print(choices_table(result.choices))
    left = ", ".join(f"{n} x{c}" for n, c in ops.uncovered.most_common()) or "none"
    print(f"left to torch (no autosched workload): {left}")
    how = "imported from the bundle" if args.runner.startswith("bundle:") and \
        result.tune.target.kind == "cuda" else "measured"
    print(f"torch baselines {how}: {result.measured_baselines}   records: "
          f"{mask_password(result.tune.db_url)}   log: {log.path}")
    if result.tune.bundle:
        print(f"autosched: {result.tune.bundle}")
    if result.tune.stopped:
        print(f"autosched: stopped after {result.tune.trials} of {config.trials} trials: "
              f"{result.tune.stopped}; the records so far are saved", file=sys.stderr)
        return 1
    return 0
