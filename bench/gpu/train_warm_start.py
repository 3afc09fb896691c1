"""Train the shipped warm-start cost model of a CUDA family from GPU logs.

    python bench/gpu/train_warm_start.py bench/gpu/logs/<run>.jsonl [...] \
        -o autosched/cost_models/cuda_sm_90.json [--hold-out WORKLOAD_OR_TASK_KEY]...

The logs are `autosched db export` files measured on a GPU (bench/gpu/logs/README.md).
The model is the XGBoost ranker with the transfer settings, trained on every CUDA record
whose workload the op files define (`--op-file`, default: examples/) under this TVM and
search-space version (`autosched.shipped_models.train_shipped`). Its sidecar
(`cuda_sm_90.meta.json`) says what it was trained on: the arch family, the tasks (key,
workload, arguments, records), the record count, the logs (path, SHA-256, machines,
hosts, dates), what was held out, and this command's provenance.

`--hold-out` leaves a workload (every shape) or one task (its key, 8+ characters) out:
a benchmark of the warm start on a task must train without it. The model shipped in
autosched/cost_models/ is trained on everything real (a tuned task among its tasks is
real data of that task; the tuner says so). Synthetic records are refused; with
`--synthetic-ok` (tests) the model may be written anywhere but the package's folder.
Bad input is one line on stderr and exit 2.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "bench"))

import provenance  # noqa: E402

from autosched import PACKAGE_DIR, UserError, model_name, train_shipped  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("logs", nargs="+", metavar="LOG", help="`autosched db export` file")
    p.add_argument("-o", "--output", required=True, metavar="PATH",
                   help="model file: autosched/cost_models/cuda_<family>.json to ship it")
    p.add_argument("--op-file", action="append", metavar="PATH",
                   help="op file or folder of them defining the logged workloads "
                        "(repeatable; default: examples/)")
    p.add_argument("--hold-out", action="append", default=[], metavar="WORKLOAD_OR_KEY",
                   help="leave this workload (all shapes) or task key out (repeatable)")
    p.add_argument("--rounds", type=int, help="boosting rounds (default: the transfer "
                   "setting)")
    p.add_argument("--synthetic-ok", action="store_true",
                   help="train on synthetic records (tests; never into the package)")
    return p.parse_args(argv)


def op_files(items: list[str] | None) -> list[str]:
    """The files given, a folder's .py files that define workloads (the examples hold
    scripts too)."""
    files = []
    for item in items or [str(ROOT / "examples")]:
        if os.path.isdir(item):
            files += sorted(p for p in (os.path.join(item, f) for f in os.listdir(item)
                                        if f.endswith(".py"))
                            if "@autosched.workload" in Path(p).read_text())
        elif os.path.isfile(item):
            files.append(item)
        else:
            raise UserError(f"--op-file: not found: {item}")
    return files


def main(argv=None) -> int:
    args = parse_args(argv)
    stamp = provenance.stamp(seed=None, argv=None if argv is None else [__file__, *argv])
    try:
        if not args.output.endswith(".json"):
            raise UserError(f"-o: the model file must end in .json, got {args.output!r}")
        if args.rounds is not None and args.rounds < 1:
            raise UserError(f"--rounds must be >= 1, got {args.rounds}")
        into_package = os.path.dirname(os.path.abspath(args.output)) == PACKAGE_DIR
        if into_package and args.synthetic_ok:
            raise UserError(f"-o {args.output}: a model of synthetic records is never "
                            "shipped; write it elsewhere")
        model, meta = train_shipped(args.logs, op_files(args.op_file), args.hold_out,
                                    args.rounds, args.synthetic_ok)
        expected = model_name("cuda", meta["family"])
        if into_package and os.path.basename(args.output) != expected:
            raise UserError(f"-o {args.output}: the tuner looks for {expected} for "
                            f"{meta['family']}")
    except UserError as e:
        print(f"train_warm_start: {e}", file=sys.stderr)
        return 2
    meta["trained_by"] = stamp
    model.summary = dict(model.summary, shipped=meta)
    model.save(args.output)
    print(f"trained the {meta['family']} model on {meta['records']} records of "
          f"{len(meta['tasks'])} tasks from {len(meta['logs'])} log(s)"
          + (f", holding out {', '.join(meta['held_out'])}" if meta["held_out"] else ""))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
