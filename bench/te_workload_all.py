"""Every workload of TVM's MetaSchedule benchmark set (`tvm.s_tir.meta_schedule.testing.
te_workload.CONFIGS`: C1D C2D C3D GMM GRP DIL DEP T2D CAP NRM SFM CBR TBG C2D_WIN_NHWC),
tuned at its real shapes for N trials each: what a MetaSchedule user tunes first.

    PYTHONPATH=. python bench/te_workload_all.py [--trials 32] [--target llvm] [--seed 0]
        [--configs C1D DEP ...] [--index 0 1 2 3] [--db URL] [--json PATH]

Each (config, shape index) is one autosched workload named after its config (so the
shapes of one config share a workload and the cost model's warm start), tuned on its own
with `--trials` measurements. A workload that cannot be made (TVM 0.27 cannot build
C2D_WIN_NHWC) is a row with its one-line reason, not the end of the run. Writes
bench/results/te_workload_<date>.json (stamped with command, commit, versions, seed)
unless `--json` names another file; prints one row per workload.
"""
from __future__ import annotations

import argparse
import inspect
import os
import sys
import tempfile
import time
from functools import partial

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))

import provenance  # noqa: E402

from autosched import TuneConfig, UserError, format_table, make_task, tune_tasks  # noqa: E402
from autosched import workload as mark_workload  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def configs() -> dict:
    """CONFIGS of TVM's te_workload: name -> (function, [positional argument tuples])."""
    from tvm.s_tir.meta_schedule.testing import te_workload

    return dict(te_workload.CONFIGS)


def instance(name: str, func, args: tuple):
    """(marked workload, its keyword arguments) for one CONFIGS shape: the positional
    tuple bound to the function's parameter names, so the task's name shows the shape."""
    kwargs = dict(inspect.signature(func).bind(*args).arguments)
    return mark_workload(name=name)(partial(func, **kwargs)), kwargs


def run_one(name: str, index: int, func, args: tuple, config: TuneConfig) -> dict:
    """Tune one CONFIGS shape; its result row (or the reason it could not be made)."""
    row = {"config": name, "index": index, "function": func.__name__, "args": list(args)}
    marked, kwargs = instance(name, func, args)
    start = time.perf_counter()
    try:
        task = make_task(marked, dict(kwargs))
    except UserError as e:
        return {**row, "error": str(e)}
    result = tune_tasks([task], config)
    state = result.tasks[0] if result.tasks else None
    row.update(task=task.name, key=task.key, flops=task.flops,
               seconds=round(time.perf_counter() - start, 1), stopped=result.stopped)
    if state is not None:
        best = state.best_latency
        row.update(trials=state.trials, failures=dict(state.failures),
                   best_latency_s=best if best != float("inf") else None,
                   gflops=round(state.best_gflops, 2))
    return row


def table(rows: list[dict]) -> str:
    body = []
    for r in rows:
        if "error" in r:
            body.append((f"{r['config']}[{r['index']}]", "-", "-", "-", r["error"][:90]))
            continue
        latency = "-" if r.get("best_latency_s") is None else f"{r['best_latency_s'] * 1e3:.4f}"
        fails = ", ".join(f"{k}={v}" for k, v in sorted(r.get("failures", {}).items()))
        body.append((f"{r['config']}[{r['index']}]", str(r.get("trials", 0)), latency,
                     f"{r.get('gflops', 0.0):.1f}", fails or r.get("stopped") or ""))
    return format_table(("workload", "trials", "best ms", "GFLOP/s", "failures"), body)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=32, help="measurements per workload")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--configs", nargs="*", default=None, help="CONFIGS names (default all)")
    ap.add_argument("--index", nargs="*", type=int, default=None,
                    help="shape indices of each config (default all)")
    ap.add_argument("--db", default=None, help="tuning database (default: a fresh one)")
    ap.add_argument("--json", default=None, help="result file (default: bench/results/"
                    "te_workload_<date>.json)")
    args = ap.parse_args(argv)
    table_of = configs()
    unknown = sorted(set(args.configs or ()) - set(table_of))
    if unknown:
        ap.error(f"unknown config {unknown[0]!r}; one of {', '.join(table_of)}")
    stamp = provenance.stamp(seed=args.seed, argv=None if argv is None else [__file__, *argv])
    print(provenance.header(stamp), flush=True)
    work = tempfile.mkdtemp(prefix="te-workload-")
    config = TuneConfig(target=args.target, trials=args.trials, seed=args.seed,
                        db_url=args.db or f"sqlite:///{work}/autosched.db", work_dir=work)
    rows = []
    for name in args.configs or list(table_of):
        func, shapes = table_of[name]
        for index, shape in enumerate(shapes):
            if args.index is None or index in args.index:
                rows.append(run_one(name, index, func, shape, config))
                print(table(rows[-1:]).splitlines()[-1], flush=True)
    print(table(rows))
    path = args.json or os.path.join(RESULTS, f"te_workload_{time.strftime('%Y-%m-%d')}.json")
    provenance.write_json(path, {"target": args.target, "trials": args.trials,
                                 "db": config.database_url, "rows": rows}, stamp)
    print(f"wrote {path}")
    # a workload that cannot be made is a finding in its row; one that was made and
    # measured nothing is a failure of the run
    return 0 if all(r.get("trials") for r in rows if "error" not in r) else 1


if __name__ == "__main__":
    sys.exit(main())
