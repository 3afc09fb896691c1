"""How well the cost model ranks real kernels of tasks it has not seen, cold vs transferred.

    python bench/cost_model_accuracy.py [--shapes small|large|all] [--space cpu|test-tiling]
                                        [--per-task 48] [--local 16]
    python bench/cost_model_accuracy.py --db logs/bench_vs_ms.db [--local 16]
    python bench/cost_model_accuracy.py --log bench/logs/matmul_random.jsonl [--local 16]

1. Measure `--per-task` random candidates of each matmul shape of `--shapes` (5 small,
   15 large or all 20, each held out in turn) on this machine with the
   product's measurer (isolated builds, output checks, time_evaluator); results are
   cached as JSON lines in `--cache`, so a rerun only evaluates (bench/cost_model_data.py:
   the three sources of candidates).
2. For each task in turn (held out): the candidates are split into `--local` "already
   measured" ones and a test set. Models:
   - cold:             trained on the local candidates of the held-out task only;
   - transfer:         trained on the other tasks only (zero-shot);
   - transfer+local:   the transferred model saved, loaded (`--model`) and updated
                       with the local candidates (local trees boosted on top);
   - warm start+local: the other tasks' and the local candidates learned together
                       (what `autosched tune` does with a database of other shapes);
   each with our features and with MetaSchedule's per-store group appended (+psf).
   Scores on the test set: pairwise accuracy (share of pairs ordered like the measured
   latencies, failures slowest) and top-5 ratio (true best latency of the test set /
   best latency among the model's top 5: 1.0 means the top 5 hold the best kernel).
3. Prints one table and writes `--out` (JSON).

`--remeasure CACHE` measures every candidate once more, in this later session, and adds
a "remeasured (ceiling)" row: the second session's latencies scored like a model's
against the first session's. Timing on a shared machine is not exactly repeatable
(other load, frequency, memory placement), so no model can order the test pairs
better than this.

`--db FILE` skips step 1 and holds out each task of a tuning database instead (for
example the seven operators bench/vs_metaschedule.py --db keeps): the candidates are
then the ones a search chose to measure, mostly good ones, which are harder to order
than random samples.

`--log FILE` skips step 1 too: FILE is a `db export` JSON-lines log, and every logged
candidate's result comes from the simulated measurer replaying it
(autosched/measure/simulated.py), so the benchmark builds and times nothing and gives the
same numbers on any machine. bench/logs/matmul_random.jsonl holds 560 random candidates
of three matmul shapes (see bench/README.md).

`--space test-tiling` uses the matmul tiling sketch of the test suite
(tests/support/synthetic.py); `cpu` uses the product's CPU rules.
Feature extraction time per candidate is reported as CPU time (process_time), so other
load on the machine does not inflate it.
"""
from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "bench"))  # ops, provenance

import provenance  # noqa: E402
from cost_model_data import (SHAPES, database_tasks, logged_tasks, measure_tasks,  # noqa: E402
                             remeasure, space_factory)

from autosched import load_op_file, make_task, resolve_target  # noqa: E402
from cost_model import FeatureConfig, XGBRanker, extract_features  # noqa: E402

def pairwise_accuracy(scores, lat) -> float:
    good = total = 0
    for a in range(len(lat)):
        for b in range(a + 1, len(lat)):
            if lat[a] != lat[b]:
                total += 1
                good += (scores[a] > scores[b]) == (lat[a] < lat[b])
    return good / max(total, 1)


def top5_ratio(scores, lat) -> float:
    top = np.argsort(-np.asarray(scores), kind="stable")[:5]
    picked = min(lat[i] for i in top)
    return min(lat) / picked if math.isfinite(picked) else 0.0


class Features:
    """Feature rows per (task key, candidate key), extracted once per config."""

    def __init__(self, tasks, target, make_space, data):
        self.rows: dict = {}
        self.seconds: dict = {}
        for psf in (False, True):
            cfg = FeatureConfig(per_store_feature=psf)
            spent, count = 0.0, 0
            for task in tasks:
                space = make_space(task, target)
                for cand, _ in data[task.key]:
                    mod = space.apply(cand)
                    start = time.process_time()
                    row = extract_features(task, cand, mod, cfg)
                    spent += time.process_time() - start
                    count += 1
                    self.rows[(psf, task.key, cand.key)] = np.asarray(row, np.float32)
            self.seconds[psf] = spent / count

    def matrix(self, psf, task, pairs):
        return np.stack([self.rows[(psf, task.key, c.key)] for c, _ in pairs])


def latencies(pairs) -> np.ndarray:
    return np.array([r.median if r.ok else math.inf for _, r in pairs])


def evaluate(tasks, data, feats, n_local: int, seed: int, again: dict | None = None) -> list[dict]:
    rows = []
    for held in tasks:
        pairs = list(data[held.key])
        random.Random(seed).shuffle(pairs)
        local, test = pairs[:n_local], pairs[n_local:]
        lat = latencies(test)
        if again is not None:  # the second session "predicts" the first
            scores = [-again[(held.key, c.key)] for c, _ in test]
            rows.append({"task": held.name, "model": "remeasured (ceiling)",
                         "pairwise": pairwise_accuracy(scores, lat),
                         "top5": top5_ratio(scores, lat)})
        for psf in (False, True):
            cfg = FeatureConfig(per_store_feature=psf)
            models = {}
            cold = XGBRanker(features=cfg, seed=seed)
            cold.add_group(held.key, feats.matrix(psf, held, local), latencies(local))
            cold.fit()
            models["cold"] = cold
            def on_others(model):
                for other in tasks:
                    if other is not held:
                        model.add_group(other.key, feats.matrix(psf, other, data[other.key]),
                                        latencies(data[other.key]))
                return model

            transfer = on_others(XGBRanker(features=cfg, seed=seed).for_transfer())
            transfer.fit()
            models["transfer"] = transfer
            with tempfile.TemporaryDirectory() as tmp:  # --model: save, load, boost on top
                transfer.save(os.path.join(tmp, "transfer.json"))
                both = XGBRanker(seed=seed).load(os.path.join(tmp, "transfer.json"))
            both.add_group(held.key, feats.matrix(psf, held, local), latencies(local))
            both.fit()
            models["transfer+local"] = both
            # the automatic warm start: the others' records and the local ones learned together
            joint = on_others(XGBRanker(features=cfg, seed=seed).for_transfer())
            joint.add_group(held.key, feats.matrix(psf, held, local), latencies(local))
            joint.fit()
            models["warm start+local"] = joint
            x = feats.matrix(psf, held, test)
            for name, model in models.items():
                scores = model.predict_features(x)
                rows.append({"task": held.name, "model": name + ("+psf" if psf else ""),
                             "pairwise": pairwise_accuracy(scores, lat),
                             "top5": top5_ratio(scores, lat)})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", choices=("cpu", "test-tiling"), default="cpu")
    ap.add_argument("--shapes", choices=sorted(SHAPES), default="small")
    ap.add_argument("--per-task", type=int, default=48)
    ap.add_argument("--local", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", help="measured candidates (JSON lines; default: "
                    "logs/bench_cost_model_records[_SHAPES].jsonl)")
    ap.add_argument("--out", default="logs/bench_cost_model.json")
    ap.add_argument("--db", help="SQLite file of tuning records: hold out each of its tasks")
    ap.add_argument("--log", help="`db export` JSON-lines log replayed by the simulated "
                    "measurer: hold out each of its tasks")
    ap.add_argument("--remeasure", metavar="CACHE",
                    help="measure the same candidates again into CACHE (JSON lines) and "
                    "report how well that second session orders the first: the ceiling")
    args = ap.parse_args()
    stamp = provenance.stamp(seed=args.seed)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    target = resolve_target("llvm")
    if args.cache is None:
        suffix = "" if args.shapes == "small" else f"_{args.shapes}"
        args.cache = f"logs/bench_cost_model_records{suffix}.jsonl"
    make_space = space_factory(args.space)
    if args.log:
        tasks, data = logged_tasks(args.log, target)
    elif args.db:
        tasks, data = database_tasks(args.db)
    else:
        wdef = load_op_file(str(ROOT / "examples" / "matmul.py"))["matmul"]
        tasks = [make_task(wdef, {"M": m, "N": n, "K": k, "dtype": "float32"})
                 for m, n, k in SHAPES[args.shapes]]
        data = measure_tasks(tasks, target, make_space, args.per_task, args.cache, args.seed)
    feats = Features(tasks, target, make_space, data)
    again = remeasure(tasks, target, make_space, data, args.remeasure) \
        if args.remeasure else None
    rows = evaluate(tasks, data, feats, args.local, args.seed, again)
    summary = {}
    for name in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == name]
        summary[name] = {"pairwise": statistics.mean(r["pairwise"] for r in mine),
                         "top5": statistics.mean(r["top5"] for r in mine)}
        print(f"{name:22s} pairwise {summary[name]['pairwise']:.3f}   "
              f"top-5 ratio {summary[name]['top5']:.3f}")
    print(f"feature extraction (CPU ms per candidate): ours {1e3 * feats.seconds[False]:.2f}, "
          f"ours+psf {1e3 * feats.seconds[True]:.2f}")
    failures = sum(1 for t in tasks for _, r in data[t.key] if not r.ok)
    provenance.write_json(args.out, {
        "space": args.space, "shapes": None if args.db or args.log else args.shapes,
        "db": args.db, "log": args.log,
        "tasks": [t.name for t in tasks], "per_task": args.per_task, "local": args.local,
        "failures": failures, "feature_ms": {k: 1e3 * v for k, v in feats.seconds.items()},
        "summary": summary, "rows": rows}, stamp)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
