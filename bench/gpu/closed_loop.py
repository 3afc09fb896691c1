"""The closed-loop GPU run: `autosched tune --target cuda` on the GPU machine itself, side
by side with torch's kernel for the same computation and with MetaSchedule at the same
trial count, its records exported for the repository.

Two device calls (see bench/gpu/README.md, "The closed-loop run"):

    python bench/gpu/stage.py unpack-compiler                 # call 1, carry: stage1
    python bench/gpu/closed_loop.py --out $OUT                 # call 2, carry: stage2

Call 2 assembles the staged tuner (`stage.staged_env`) and re-executes itself under it,
then, within `--budget-s`:

1. the device's peaks (a large bf16 GEMM, a device-to-device copy) and its facts;
2. each case of `gpu_cases.py`: `autosched tune --target cuda` with the local runner
   (builds on every core, the cost model learning after each batch) into a database
   kept in `bench/gpu/run/` (ignored: a rerun on the still-warm machine resumes it),
   `--time-budget` its share (a case stopped by it says so in its row), then torch's
   kernel for exactly that computation (`fair_peers`), and `$OUT/gpu_records.jsonl`
   re-exported;
3. MetaSchedule on the cases `--metaschedule` names, same trials, timed by our harness;
4. `bench/runtime_plans.py --device cuda` (our plans against hand-written checkpointing).

`$OUT/closed_loop.json` is rewritten after every step, so a call stopped at its limit
returns what it measured. Without a GPU, `--rehearse` runs the same steps on this CPU
at small shapes and a few trials (target llvm, peers timed on the CPU), which is how the
script is checked before it meets a GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(HERE.parent)]        # gpu_cases, stage; then provenance

from bounded import run_bounded  # noqa: E402
from stage import STAGED  # noqa: E402

RUN_DIR = HERE / "run"                               # ignored: the run's database, logs


class Run:
    """The report of one run, written to `out/closed_loop.json` after every step."""

    def __init__(self, out: Path, stamp: dict, header: dict):
        self.out = out
        self.stamp = stamp
        self.report = dict(header, steps={})

    def step(self, name: str, fn, *args, **kwargs) -> dict:
        start = time.monotonic()
        try:
            row = fn(*args, **kwargs)
        except Exception as e:  # one step's failure is its row; the others still run
            row = {"error": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc()[-3000:]}
        row["step_seconds"] = round(time.monotonic() - start, 1)
        self.report["steps"][name] = row
        self.write()
        print(f"{name}: {row['step_seconds']:.0f} s"
              + (f"  ERROR {row['error']}" if "error" in row else ""), flush=True)
        return row

    def write(self) -> None:
        import provenance

        provenance.write_json(self.out / "closed_loop.json", self.report, self.stamp)


def export_records(db_url: str, out: Path) -> dict:
    """Every record of the run as JSON lines (`autosched db export`) into OUT."""
    path = out / "gpu_records.jsonl"
    res = run_bounded([sys.executable, "-m", "autosched.cli", "db", "export", "--db", db_url,
                       "-o", str(path)], 120, RUN_DIR / "export.log")
    res["records"] = sum(1 for _ in open(path)) if path.exists() else 0
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget-s", type=float, default=470.0,
                    help="seconds for the whole run, shared by the cases' suggested budgets")
    ap.add_argument("--cases", help="comma-separated case names of gpu_cases.py (default: all)")
    ap.add_argument("--metaschedule", help="cases MetaSchedule tunes with the same trials "
                    "(default: those gpu_cases.py marks; '' for none)")
    ap.add_argument("--trials-scale", type=float, default=1.0,
                    help="multiply every case's trials (a rerun with what time is left)")
    ap.add_argument("--build-workers", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                    help="every core but one, which the run worker keeps: a host thread "
                         "held up between its timing events would count in the kernel's time")
    ap.add_argument("--batch-size", type=int,
                    help="candidates a batch (default: two chunks of the build workers, "
                         "so the second builds while the first runs)")
    ap.add_argument("--no-runtime-plans", action="store_true")
    ap.add_argument("--rehearse", action="store_true",
                    help="no GPU: the same steps on this CPU, small shapes, few trials")
    ap.add_argument("--metaschedule-case", help=argparse.SUPPRESS)   # the child of a step
    args = ap.parse_args(argv)
    if os.environ.get(STAGED) != "1" and not args.rehearse:
        import stage

        return stage.reexec_staged(__file__, "closed loop", argv)
    if args.metaschedule_case:
        return metaschedule_child(args)
    return run(args)


def chosen_cases(args) -> tuple[list, list]:
    """The cases to tune and those MetaSchedule tunes too, trials scaled."""
    import dataclasses

    import gpu_cases

    every = gpu_cases.rehearsal_cases() if args.rehearse else gpu_cases.CASES
    names = [c.name for c in every]
    wanted = args.cases.split(",") if args.cases else names
    if unknown := sorted(set(wanted) - set(names)):
        raise SystemExit(f"closed loop: unknown case(s) {unknown}; known: {names}")
    cases = [dataclasses.replace(c, trials=max(1, round(c.trials * args.trials_scale)))
             for c in every if c.name in wanted]
    if args.metaschedule is None:
        meta = [c for c in cases if c.metaschedule]
    else:
        meta = [c for c in cases if c.name in args.metaschedule.split(",")]
    return cases, meta


def run(args) -> int:
    import fair_peers
    import provenance
    from closed_loop_report import budget_shares, summary_lines, table

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    RUN_DIR.mkdir(exist_ok=True)
    cases, meta = chosen_cases(args)
    target = "llvm" if args.rehearse else "cuda"
    db_url = f"sqlite:///{RUN_DIR / ('rehearsal.db' if args.rehearse else 'gpu.db')}"
    stamp = provenance.stamp(seed=0, argv=[__file__, *(sys.argv[1:])])
    stamp["staged_commit"] = staged_commit()
    run_ = Run(out, stamp, {"target": target, "budget_s": args.budget_s,
                            "cases": [c.name for c in cases],
                            "metaschedule": [c.name for c in meta]})
    started = time.monotonic()
    if not args.rehearse:
        peak = run_.step("device_peak", gpu_step, fair_peers.device_peak)
        if "error" in peak:
            print("closed loop: no usable GPU here; run it on the GPU machine, or --rehearse")
            return 3
    weights = {f"tune/{c.name}": c.budget_s for c in cases}
    weights.update({f"metaschedule/{c.name}": c.metaschedule_s or c.budget_s for c in meta})
    if not args.no_runtime_plans:
        weights["runtime_plans"] = 60.0
    left = args.budget_s - (time.monotonic() - started) - 5.0 * len(cases)  # peers
    shares = budget_shares(left, weights)
    for case in cases:
        row = run_.step(f"tune/{case.name}", tune_case, case, target,
                        shares[f"tune/{case.name}"], db_url, args)
        run_.step(f"peer/{case.name}", peer_step, case, row, args.rehearse)
        run_.step("export", export_records, db_url, out)
    for case in meta:
        run_.step(f"metaschedule/{case.name}", metaschedule_step, case, target,
                  shares[f"metaschedule/{case.name}"], args.rehearse)
    if not args.no_runtime_plans:
        run_.step("runtime_plans", runtime_plans, out, shares["runtime_plans"],
                  args.rehearse)
    rows = table(run_.report["steps"], cases)
    run_.report.update(rows=rows, summary=fair_peers.summary(rows))
    run_.write()
    for line in summary_lines(rows, run_.report["summary"]):
        print(line)
    return 0


def staged_commit() -> str | None:
    """The commit the stage was packed from (the device's copy of the tree has no .git)."""
    import stage

    manifest = ROOT / stage.STAGE2 / stage.MANIFEST
    try:
        return json.loads(manifest.read_text()).get("commit")
    except (OSError, ValueError):
        return None


def gpu_step(fn, *args) -> dict:
    """A step on the GPU in this process; the memory torch cached is given back after,
    so the tuning runs that follow have the whole device."""
    import torch

    try:
        return fn(*args)
    finally:
        torch.cuda.empty_cache()


def tune_case(case, target: str, seconds: float, db_url: str, args) -> dict:
    """`autosched tune` for one case within `seconds`; the case's records from the db."""
    from autosched.db import open_database
    from closed_loop_report import best_of_records, cut_note
    from metaschedule_side import load_task

    cmd = [sys.executable, "-m", "autosched.cli", "tune", case.op_file,
           "--workload", case.workload, *sum((["--arg", a] for a in case.arg_items()), []),
           "--target", target, "--trials", str(case.trials), "--db", db_url,
           "--work-dir", str(RUN_DIR), "--seed", "0", "--time-budget", f"{seconds:.0f}",
           "--build-workers", str(args.build_workers),
           "--batch-size", str(args.batch_size or 2 * args.build_workers)]
    # the budget stops the search between batches; the limit stops a batch that hangs
    row = {"tune": run_bounded(cmd, seconds + 90, RUN_DIR / f"{case.name}.log"),
           "trials_asked": case.trials, "time_budget_s": round(seconds)}
    row["cut"] = cut_note(row["tune"]["output_tail"]) or (
        f"killed at the {seconds + 90:.0f} s limit" if row["tune"]["killed_at_limit"]
        else None)
    task = load_task(str(ROOT / case.op_file), case.workload, case.arg_items())
    with open_database(db_url) as db:
        row.update(best_of_records(db.records(task_key=task.key)))
    row["task_key"] = task.key
    return row


def peer_step(case, tuned: dict, rehearse: bool) -> dict:
    """torch's kernel for the case (CUDA events, L2 flushed, do_bench beside), and the
    row that puts it beside our best."""
    import fair_peers

    peer = fair_peers.cpu_peer(case) if rehearse else gpu_step(fair_peers.measure_peer, case)
    row = fair_peers.build_row(case, tuned.get("best_s"), peer,
                               notes=[tuned["cut"]] if tuned.get("cut") else ())
    return {"peer": peer, "row": row}


def metaschedule_step(case, target: str, seconds: float, rehearse: bool) -> dict:
    """MetaSchedule on the case in a child process, stopped at `seconds` (its own loop
    has no time limit), its best timed by our harness (metaschedule_side.py)."""
    path = RUN_DIR / f"metaschedule_{case.name}.json"
    path.unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--metaschedule-case", case.name, "--out", str(path),
           "--cases", case.name] + (["--rehearse"] if rehearse else [])
    row = run_bounded(cmd, seconds, RUN_DIR / f"metaschedule_{case.name}.log")
    if path.exists():
        row["result"] = json.loads(path.read_text())
    else:
        row["result"] = {"ok": False, "error": "stopped at its time share before a result"
                         if row["killed_at_limit"] else "no result written"}
    return row


def metaschedule_child(args) -> int:
    """--metaschedule-case: MetaSchedule on one case, the result as JSON at --out."""
    import metaschedule_side

    (case,) = [c for c in chosen_cases(args)[0] if c.name == args.metaschedule_case]
    result = metaschedule_side.tune_and_measure(
        case.op_file, case.workload, case.arg_items(), "llvm" if args.rehearse else "cuda",
        case.trials, str(RUN_DIR / "metaschedule" / case.name), measure_work_dir=str(RUN_DIR))
    Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    return 0


def runtime_plans(out: Path, seconds: float, rehearse: bool) -> dict:
    """bench/runtime_plans.py on the device (never rerun there since its torch fix)."""
    name = "runtime_plans_rehearsal" if rehearse else "runtime_plans_cuda"
    path = out / f"{name}.json"
    cmd = [sys.executable, "bench/runtime_plans.py", "--device",
           "cpu" if rehearse else "cuda", "--clock", "wall", "--json", str(path)]
    row = run_bounded(cmd, seconds, out / f"{name}.log")
    if path.exists():
        row["result"] = json.loads(path.read_text())
    return row


if __name__ == "__main__":
    sys.exit(main())
