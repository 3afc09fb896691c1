"""The fuzz corpus at scale: random tensor expressions (tests/fuzz/te_gen.py, one program
per seed) tuned on llvm and dry-run for CUDA, counting what fails and how much faster the
tuned kernels are than the unscheduled build.

    python bench/fuzz_corpus.py [--programs 200] [--trials 16] [--seed 0]
                                [--cuda-candidates 2] [--out bench/results/fuzz_corpus_DATE.json]

Per program (`fuzz(seed=S)` for S = seed .. seed + programs - 1): `tune_tasks` on llvm,
`--chunk` programs a run with a fresh database and `--trials` trials a program (the task
scheduler shares the run's budget out; a run that raises is redone one program at a
time), then `dry_run_task` on cuda (nvcc, no GPU) for `--cuda-candidates` candidates. A program fails, by kind, when tuning raises (an
internal error, counted by its line), when a record is `wrong_answer`, when nothing was
measured, or when the CUDA dry run raises; candidates that fail their build or limit
check are counted too, but are the space's findings, not failures of the program.

The speedup of a program is the latency of its default candidate (on llvm: the plain
build of the unscheduled computation, measured in the same run) over the best measured
latency; the geomean runs over the programs with both.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
import traceback
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))

import provenance  # noqa: E402

from autosched import (TuneConfig, UserError, dry_run_task, load_tasks,  # noqa: E402
                       open_database, resolve_target, tune_tasks)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "te_gen.py")


def _line(e: BaseException) -> str:
    text = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return f"{type(e).__name__}: {text[-1].strip() if text else ''}"


def tune_rows(tasks, trials: int, seed: int, scratch: str) -> list[dict]:
    """The llvm runs of `tasks`: all in one `tune_tasks` call (one set of workers; the
    run's budget is `trials` a program, shared out by the task scheduler), or, when that
    call raises, each program alone (so an internal error is charged to its program)."""
    rows = _tune(tasks, trials, seed, scratch, "chunk")
    if "error" not in rows[0] or len(tasks) == 1:
        return rows
    return [_tune([t], trials, seed, scratch, "alone")[0] for t in tasks]


def _tune(tasks, trials: int, seed: int, scratch: str, run: str) -> list[dict]:
    """Per task: records by outcome, default and best latency (or the run's error)."""
    url = f"sqlite:///{scratch}/{tasks[0].key}-{run}.db"
    config = TuneConfig(trials=trials * len(tasks), db_url=url, work_dir=scratch, seed=seed,
                        batch_size=min(8, trials))
    try:
        tune_tasks(tasks, config)
    except UserError as e:
        return [{"error": f"user error: {e}", "run": run} for _ in tasks]
    except Exception as e:  # noqa: BLE001 - an internal error is what the corpus hunts
        return [{"error": f"internal error: {_line(e)}", "run": run,
                 "traceback": traceback.format_exc()[-1500:]} for _ in tasks]
    with open_database(url) as db:
        return [_row(db.records(task_key=task.key), run) for task in tasks]


def _row(records, run: str) -> dict:
    ok = [r for r in records if r.ok]
    default = [r for r in ok if r.candidate["sketch"] == "default"]
    best = min(ok, key=lambda r: r.latency) if ok else None
    return {"run": run, "outcomes": dict(Counter(r.result.error_kind or "ok" for r in records)),
            "wrong_answer": [r.result.error_msg[:300] for r in records
                             if r.result.error_kind == "wrong_answer"][:3],
            "default_s": default[0].latency if default else None,
            "best_s": best.latency if best else None,
            "best_sketch": best.candidate["sketch"] if best else None}


def cuda_row(task, count: int, seed: int) -> dict:
    """One program's CUDA dry run: candidates generated, compiled, failures by line."""
    try:
        report = dry_run_task(task, resolve_target("cuda"), count, seed)
    except Exception as e:  # noqa: BLE001
        return {"error": f"internal error: {_line(e)}",
                "traceback": traceback.format_exc()[-1500:]}
    return {"generated": report.generated, "compiled": report.compiled,
            "failures": dict(report.messages)}


def failures_of(row: dict) -> list[str]:
    """The kinds by which one program failed (none: it passed)."""
    kinds = []
    if "error" in row["llvm"]:
        kinds.append("llvm " + row["llvm"]["error"].split(":")[0])
    elif row["llvm"]["outcomes"].get("wrong_answer"):
        kinds.append("wrong_answer")
    elif row["llvm"]["best_s"] is None:
        kinds.append("nothing measured")
    if "error" in row.get("cuda", {}):
        kinds.append("cuda " + row["cuda"]["error"].split(":")[0])
    return kinds


def summary(rows: list[dict]) -> dict:
    kinds, internal = Counter(), Counter()
    speedups = []
    for row in rows:
        kinds.update(failures_of(row))
        for side in ("llvm", "cuda"):
            err = row.get(side, {}).get("error", "")
            if err.startswith("internal error"):
                internal[f"{side}: {err}"] += 1
        llvm = row["llvm"]
        if llvm.get("default_s") and llvm.get("best_s"):
            speedups.append(llvm["default_s"] / llvm["best_s"])
    geomean = math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None
    return {"programs": len(rows), "failed": sum(1 for r in rows if failures_of(r)),
            "failures_by_kind": dict(kinds), "internal_errors": dict(internal),
            "speedup_programs": len(speedups), "geomean_speedup": geomean,
            "speedup_over": "the default candidate: the plain llvm build of the "
                            "unscheduled computation, measured in the same run"}


def _progress(row: dict) -> str:
    llvm, cuda = row["llvm"], row.get("cuda", {})
    speed = (f"{llvm['default_s'] / llvm['best_s']:.2f}x ({llvm['best_sketch']})"
             if llvm.get("default_s") and llvm.get("best_s") else "-")
    return (f"{row['program']:<16} llvm {llvm.get('error') or llvm['outcomes']}  speedup "
            f"{speed}  cuda {cuda.get('error') or cuda}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=200)
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0, help="first program's seed; the tuner's")
    ap.add_argument("--chunk", type=int, default=8, help="programs tuned in one run")
    ap.add_argument("--cuda-candidates", type=int, default=2, help="0: no CUDA dry run")
    ap.add_argument("--out", default=os.path.join(
        ROOT, "bench", "results", f"fuzz_corpus_{time.strftime('%Y%m%d')}.json"))
    args = ap.parse_args(argv)
    stamp = provenance.stamp(seed=args.seed, argv=None if argv is None else [__file__, *argv])
    print(provenance.header(stamp), flush=True)
    seeds = list(range(args.seed, args.seed + args.programs))
    rows = []
    with tempfile.TemporaryDirectory(prefix="fuzz-corpus-") as scratch:
        for first in range(0, len(seeds), args.chunk):
            start = time.perf_counter()
            tasks = load_tasks(CORPUS, arg_items=[f"seed={s}" for s in
                                                  seeds[first:first + args.chunk]])
            chunk = [{"program": t.name, "flops": t.flops, "llvm": llvm}
                     for t, llvm in zip(tasks, tune_rows(tasks, args.trials, args.seed,
                                                         scratch))]
            for task, row in zip(tasks, chunk):
                if args.cuda_candidates:
                    row["cuda"] = cuda_row(task, args.cuda_candidates, args.seed)
                print(_progress(row), flush=True)
            rows += chunk
            print(f"-- {len(rows)} programs, chunk {time.perf_counter() - start:.0f}s",
                  flush=True)
    result = summary(rows)
    print(result, flush=True)
    provenance.write_json(args.out, {"summary": result, "rows": rows}, stamp)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
