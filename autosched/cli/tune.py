"""`autosched tune OP_FILE ...`: search for fast schedules, record them, print the table."""
from __future__ import annotations

import argparse
import sys

from ..errors import UserError
from ..results import FAILURE_KINDS
from ..measure.settings import MeasureSettings, usable_cores
from .options import DB_URL_HELP_WORK_DIR, DEFAULT_WORK_DIR, add_selection


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `tune` command to the main CLI's subparsers."""
    p = subparsers.add_parser("tune", help="search for fast schedules and record them")
    add_selection(p)
    add_tune_options(p)
    p.add_argument("--time-budget", type=float, metavar="S",
                   help="stop starting batches after S seconds of wall-clock time (the "
                        "batch running finishes and is recorded; exit code 0)")
    return p


def add_tune_options(p: argparse.ArgumentParser) -> None:
    """The options of a tuning run (`tune`, `tune-model`)."""
    p.add_argument("--target", default="llvm",
                   help="llvm | cuda | a JSON target dict | a TVM target string "
                        "('cuda -arch=sm_80') or tag ('nvidia/nvidia-h100')")
    p.add_argument("--trials", type=int, metavar="N",
                   help="the measurements this tuning run makes, shared by the tasks "
                        "(default: 64; with only --total-trials, that total): a run is one "
                        "invocation with the local and rpc runners, and the bundle "
                        "directory's whole life with bundle:DIR (each invocation builds "
                        "one round), so the same number of candidates is measured either "
                        "way")
    p.add_argument("--total-trials", type=int, metavar="N",
                   help="stop once the database holds N records (one per candidate, any "
                        "outcome) of these tasks on this target and machine, earlier runs' "
                        "included: the same command, rerun after --time-budget or a kill, "
                        "resumes and ends with N, whatever the runner. With --trials, both "
                        "limits apply")
    p.add_argument("--db", metavar="URL", help=DB_URL_HELP_WORK_DIR)
    p.add_argument("--runner", default="local",
                   help="local | rpc://HOST:PORT/KEY | bundle:DIR (build a round into DIR "
                        "for another machine to measure; rerun to record it)")
    p.add_argument("--strategy", default="evolutionary",
                   help="evolutionary (guided by the learned cost model) or random")
    p.add_argument("--cost-model", metavar="PATH",
                   help="cost model to warm-start from (`autosched cost-model train` makes one)")
    # the option's old name, kept for users' scripts: hidden, and warned about when used
    p.add_argument("--model", dest="old_model_option", metavar="PATH", help=argparse.SUPPRESS)
    p.add_argument("--no-transfer", action="store_true",
                   help="without --cost-model, do not warm-start the cost model from the "
                        "database's records of other shapes of the same workloads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--work-dir", default=DEFAULT_WORK_DIR,
                   help="the run's logs, and the database WORK_DIR/autosched.db unless "
                        "--db or $AUTOSCHED_DB names one")
    p.add_argument("--dry-run", action="store_true",
                   help="generate, limit-check and compile candidates only; nothing is run "
                        "or recorded")
    p.add_argument("--run-timeout", type=float, default=30.0, help="seconds per candidate run")
    p.add_argument("--build-timeout", type=float, default=60.0, help="seconds per build")
    p.add_argument("--build-workers", type=int, default=usable_cores(), metavar="N",
                   help="candidates compiled at once, each in its own process (default: "
                        "%(default)s, the CPUs this process may use)")
    p.add_argument("--retry-failures", action="append", default=[], metavar="KIND",
                   choices=FAILURE_KINDS,
                   help="measure again the candidates of the tuned tasks whose records "
                        "failed with KIND (repeatable; one of " + ", ".join(FAILURE_KINDS)
                        + "), first, within --trials: after fixing the environment that "
                        "failed them. Each new result replaces the failure record")
    p.add_argument("--min-repeat-ms", type=int, default=MeasureSettings.min_repeat_ms,
                   help="time each repeat of a kernel for at least this long (calls are "
                        "added until it does)")
    p.add_argument("--bundle-reference-mib", type=float,
                   default=MeasureSettings.bundle_reference_mib, metavar="MIB",
                   help="with --runner bundle:DIR: a task's reference inputs and outputs "
                        "travel as arrays up to this size; above it, their recipe and a "
                        "reference kernel, checked at a reduced shape, that the measuring "
                        "machine runs")


def tune_config(args: argparse.Namespace, time_budget_s: float | None = None):
    """The TuneConfig of the options `add_tune_options` added (and `tune`'s
    `--time-budget`)."""
    from ..config import TuneConfig

    trials = args.trials
    if trials is None:
        trials = 64 if args.total_trials is None else max(0, args.total_trials)
    if trials < 0:
        raise UserError(f"--trials must be >= 0, got {trials}")
    if args.min_repeat_ms < 0:
        raise UserError(f"--min-repeat-ms must be >= 0, got {args.min_repeat_ms}")
    if args.bundle_reference_mib < 0:
        raise UserError(f"--bundle-reference-mib must be >= 0, got {args.bundle_reference_mib}")
    if args.build_workers < 1:
        raise UserError(f"--build-workers must be >= 1, got {args.build_workers}")
    settings = MeasureSettings(run_timeout=args.run_timeout, build_timeout=args.build_timeout,
                               min_repeat_ms=args.min_repeat_ms,
                               build_workers=args.build_workers,
                               bundle_reference_mib=args.bundle_reference_mib)
    return TuneConfig(target=args.target, trials=trials, db_url=args.db,
                      runner=args.runner, strategy=args.strategy, seed=args.seed,
                      batch_size=args.batch_size, dry_run=args.dry_run,
                      work_dir=args.work_dir, cost_model_path=_cost_model_path(args),
                      transfer=not args.no_transfer, measure=settings,
                      retry_failures=tuple(args.retry_failures), time_budget_s=time_budget_s,
                      total_trials=args.total_trials)


def _cost_model_path(args: argparse.Namespace) -> str | None:
    """--cost-model, or its old spelling --model with one warning line on stderr ("model"
    names a PyTorch model everywhere else in the command line)."""
    if args.old_model_option is None:
        return args.cost_model
    if args.cost_model is not None:
        raise UserError("--model is the old name of --cost-model; give only --cost-model")
    print("autosched: warning: --model is now --cost-model; the old name will go",
          file=sys.stderr)
    return args.old_model_option


def run(args: argparse.Namespace) -> int:
    """Tune and print the per-task table; 1 when the run stopped before its budget."""
    from ..workload import load_tasks

    config = tune_config(args, args.time_budget)
    tasks = load_tasks(args.op_file, args.workload, args.arg, args.load_timeout)
    if config.dry_run:
        return _dry_run(tasks, config)
    from ..db import mask_password
    from ..tuner import tune_tasks
    from ..trial_budget import records_held, total_line
    from .progress import JsonLog, ProgressBar, summary_table

    log = JsonLog(config.work_dir)
    result = tune_tasks(tasks, config, [ProgressBar(time_budget_s=config.time_budget_s), log])
    print(summary_table(result))
    if result.warm_start is not None:
        print(result.warm_start.describe())
    print(f"records: {mask_password(result.db_url)}   log: {log.path}")
    if result.out_of_time:  # --time-budget: a normal end, said in one line
        print(f"autosched: {result.stopped}; the records so far are saved, rerun to "
              "continue")
    elif result.stopped:  # no RPC server left, or a fault of the machine and its remedy
        rerun = "" if "rerun" in result.stopped else ", rerun to continue"
        print(f"autosched: stopped after {result.trials} of {config.trials} trials: "
              f"{result.stopped}; the records so far are saved{rerun}", file=sys.stderr)
        return 1
    if config.total_trials is not None:
        held = records_held(result.tasks)
        print(f"autosched: {total_line(config.total_trials, held)}")
        if held >= config.total_trials:  # a bundle built nothing: its "nothing left to
            return 0                     # build" line would only repeat this one
    if result.bundle:  # a round waits in the bundle: what to run, then rerun this
        print(f"autosched: {result.bundle}")
    return 0


def _dry_run(tasks, config) -> int:
    """Generate, limit-check and compile candidates of each task; nothing is recorded."""
    from ..tuner import tune_tasks
    from .progress import DryRunLog, dry_run_table

    result = tune_tasks(tasks, config, [DryRunLog(config.trials or 64)])
    print(dry_run_table(result.dry_run))
    return 0
