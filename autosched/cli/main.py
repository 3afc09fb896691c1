"""The command line: parses arguments, calls the Python API, prints.

Exit codes: 0 success, 2 bad input (one line on stderr), 1 anything else.
Tracebacks only with --debug. Heavy modules are imported by the subcommands that need them.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from ..errors import UserError

# Subcommands implemented in their own modules: each has add_parser(subparsers) and run(args).
SUBCOMMAND_MODULES = ("autosched.cli.db", "autosched.cli.model", "autosched.cli.plan",
                      "autosched.cli.workers")


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad input as one line and exit code 2."""

    def error(self, message):
        raise UserError(f"{self.prog}: {message}")


def _add_selection(p) -> None:
    p.add_argument("op_file", help="Python file with @autosched.workload functions")
    p.add_argument("--workload", action="append", metavar="NAME",
                   help="workload to select (repeatable; default: all in the file)")
    p.add_argument("--arg", action="append", metavar="K=V",
                   help="override a workload parameter (repeat a key for shape variants)")


def _add_tune(sub) -> None:
    p = sub.add_parser("tune", help="search for fast schedules and record them")
    _add_selection(p)
    p.add_argument("--target", default="llvm", help="llvm | cuda | JSON target dict")
    p.add_argument("--trials", type=int, default=64, help="new measurements for the whole run")
    p.add_argument("--db", metavar="URL", help="sqlite:///PATH (default logs/autosched.db) "
                   "or postgresql://USER@HOST:PORT/DB")
    p.add_argument("--runner", default="local", help="local | rpc://HOST:PORT/KEY")
    p.add_argument("--strategy", default="evolutionary",
                   help="evolutionary (guided by the learned cost model) or random")
    p.add_argument("--model", metavar="PATH", help="cost model to warm-start from")
    p.add_argument("--no-transfer", action="store_true",
                   help="without --model, do not warm-start the cost model from the "
                        "database's records of other shapes of the same workloads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--work-dir", default="logs", help="logs and the default database")
    p.add_argument("--dry-run", action="store_true",
                   help="generate, limit-check and compile candidates only; nothing is run "
                        "or recorded")
    p.add_argument("--run-timeout", type=float, default=30.0, help="seconds per candidate run")
    p.add_argument("--build-timeout", type=float, default=60.0, help="seconds per build")
    p.set_defaults(func=_run_tune)


def _add_export(sub) -> None:
    p = sub.add_parser("export", help="build the best recorded kernels into a library")
    _add_selection(p)
    p.add_argument("--target", default="llvm")
    p.add_argument("--db", metavar="URL")
    p.add_argument("-o", "--output", required=True, metavar="DIR")
    p.set_defaults(func=_run_export)


def _add_report(sub) -> None:
    p = sub.add_parser("report", help="per-task table and tuning curves from the database")
    p.add_argument("--db", metavar="URL")
    p.add_argument("-o", "--output", default="logs/report", metavar="DIR",
                   help="where the tuning-curve PNGs go")
    p.add_argument("--no-plots", action="store_true")
    p.set_defaults(func=_run_report)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="autosched", description="Tensor-program auto-scheduler on TVM")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_tune(sub)
    _add_export(sub)
    _add_report(sub)
    for name in SUBCOMMAND_MODULES:
        module = importlib.import_module(name)
        module.add_parser(sub).set_defaults(func=module.run)
    return parser


def _run_tune(args) -> int:
    from ..config import TuneConfig
    from ..measure.settings import MeasureSettings
    from ..workload import load_tasks

    if args.trials < 0:
        raise UserError(f"--trials must be >= 0, got {args.trials}")
    tasks = load_tasks(args.op_file, args.workload, args.arg)
    settings = MeasureSettings(run_timeout=args.run_timeout, build_timeout=args.build_timeout)
    config = TuneConfig(target=args.target, trials=args.trials, db_url=args.db,
                        runner=args.runner, strategy=args.strategy, seed=args.seed,
                        batch_size=args.batch_size, dry_run=args.dry_run,
                        work_dir=args.work_dir, model_path=args.model,
                        transfer=not args.no_transfer, measure=settings)
    if config.dry_run:
        return _dry_run(tasks, config)
    from .progress import JsonLog, ProgressBar, summary_table
    from ..tuner import tune_tasks

    log = JsonLog(config.work_dir)
    result = tune_tasks(tasks, config, [ProgressBar(), log])
    print(summary_table(result))
    if result.warm_start is not None:
        print(result.warm_start.describe())
    from ..db import mask_password

    print(f"records: {mask_password(result.db_url)}   log: {log.path}")
    if result.stopped:
        print(f"autosched: stopped after {result.trials} of {config.trials} trials: "
              f"{result.stopped}; the records so far are saved, rerun to continue",
              file=sys.stderr)
        return 1
    return 0


def _dry_run(tasks, config) -> int:
    from ..dry_run import dry_run_task
    from .tables import format_table
    from ..target import resolve_target

    target = resolve_target(config.target)
    rows = []
    count = config.trials or 64
    for task in tasks:
        print(f"dry run: {task.name}: {count} candidates on {target.kind} "
              f"({target.config.get('arch') or target.config.get('mcpu')})", file=sys.stderr)
        r = dry_run_task(task, target, count, config.seed)
        rows.append((task.name, r.generated, r.passed_check, r.compiled,
                     f"{100 * r.compile_rate:.0f}%", f"{r.seconds:.1f}s"))
        for msg in r.first_errors:
            print(f"  {msg}", file=sys.stderr)
    print(format_table(("task", "generated", "passed limits", "compiled", "rate", "time"), rows))
    return 0


def _run_export(args) -> int:
    from ..exporting import export

    path = export(args.op_file, args.target, args.output, args.db, args.workload, args.arg)
    print(f"wrote {path}")
    return 0


def _run_report(args) -> int:
    from ..db import DEFAULT_DB_URL, open_database
    from .report import plot_curves, summarize, table

    db = open_database(args.db or DEFAULT_DB_URL)
    try:
        summaries = summarize(db)
    finally:
        db.close()
    if not summaries:
        print("no records")
        return 0
    print(table(summaries))
    if not args.no_plots:
        for path in plot_curves(summaries, args.output):
            print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args) or 0)
    except UserError as e:
        if debug:
            raise
        print(f"autosched: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("autosched: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if debug:
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"autosched: internal error: {type(e).__name__}: {first} (rerun with --debug "
              "for the traceback)", file=sys.stderr)
        return 1
