"""Where bench/cost_model_accuracy.py's held-out candidates come from: random samples of
matmul shapes measured on this machine (cached as JSON lines, so a rerun measures only
what is missing), the records of a tuning database, or a `db export` log replayed by the
simulated measurer. Each source returns {task key: [(candidate, result), ...]}."""
from __future__ import annotations

import json
import math
import os
import random
import sys
from pathlib import Path

from autosched import MeasureResult, load_op_file
from autosched.measure import MeasureInput, MeasureSettings
from search_space import Candidate, SearchSpace, generate_space

ROOT = Path(__file__).resolve().parents[1]

SHAPES = {
    # ~40 us kernels: parallel-launch overhead is a large share, candidates differ by a few %
    "small": [(128, 128, 128), (256, 128, 64), (64, 256, 128), (192, 96, 128), (128, 64, 256)],
    # 1-5 ms kernels, the sizes of transformer layers' matmuls
    "large": [(512, 512, 256), (256, 512, 512), (384, 384, 384), (512, 256, 384),
              (256, 384, 512), (384, 512, 256), (512, 384, 512), (256, 256, 768),
              (768, 256, 256), (320, 448, 384), (448, 320, 256), (256, 768, 256),
              (640, 384, 256), (384, 640, 320), (512, 512, 512)],
}
SHAPES["all"] = SHAPES["small"] + SHAPES["large"]  # each held out, trained on the other 19


def space_factory(kind: str):
    if kind == "cpu":
        return generate_space
    sys.path.insert(0, str(ROOT / "tests"))
    from support import synthetic

    return lambda task, target: SearchSpace(task, target, synthetic.TilingRules())


def _read_cache(cache: str) -> dict:
    done: dict[str, list] = {}
    if os.path.exists(cache):
        for line in open(cache):
            row = json.loads(line)
            done.setdefault(row["task"], []).append(
                (Candidate.from_json(row["candidate"]), MeasureResult.from_json(row["result"])))
    return done


def _measure_into(measurer, cache_file, task, target, pairs, have: list, total: int) -> None:
    """Measure (candidate, module) pairs of `task` in batches, appending to `have` and
    to the cache file as they finish."""
    todo = [MeasureInput(task, target, cand, mod) for cand, mod in pairs]
    for lo in range(0, len(todo), 16):
        batch = todo[lo:lo + 16]
        for inp, res in zip(batch, measurer.measure(batch)):
            have.append((inp.candidate, res))
            cache_file.write(json.dumps({"task": task.key, "candidate": inp.candidate.to_json(),
                                         "result": res.to_json()}) + "\n")
        cache_file.flush()
        print(f"  {task.name}: {len(have)}/{total} measured", file=sys.stderr)


def _measurer():
    from autosched.measure import make_measurer

    settings = MeasureSettings(number=3, repeat=3, min_repeat_ms=10, build_workers=2)
    return make_measurer(settings, "local")


def measure_tasks(tasks, target, make_space, per_task: int, cache: str, seed: int) -> dict:
    """task key -> list of (candidate, result); measures only what the cache lacks."""
    done = _read_cache(cache)
    with _measurer() as measurer, open(cache, "a") as out:
        for task in tasks:
            have = done.setdefault(task.key, [])
            space, rng = make_space(task, target), random.Random(seed)
            seen = {c.key for c, _ in have}
            todo = []
            while len(have) + len(todo) < per_task:
                cand, mod = space.sample(rng)
                if cand.key not in seen:
                    seen.add(cand.key)
                    todo.append((cand, mod))
            _measure_into(measurer, out, task, target, todo, have, per_task)
    return done


def remeasure(tasks, target, make_space, data: dict, cache: str) -> dict:
    """The same candidates measured again in a later session (into their own cache):
    {(task key, candidate key): latency}. How often two sessions order a pair alike is
    the most any model can score against one session's measurements."""
    done = _read_cache(cache)
    with _measurer() as measurer, open(cache, "a") as out:
        for task in tasks:
            have = done.setdefault(task.key, [])
            seen = {c.key for c, _ in have}
            space = make_space(task, target)
            todo = [(c, space.apply(c)) for c, _ in data[task.key] if c.key not in seen]
            _measure_into(measurer, out, task, target, todo, have, len(data[task.key]))
    return {(key, c.key): (r.median if r.ok else math.inf)
            for key, pairs in done.items() for c, r in pairs}


def database_tasks(path: str):
    """(tasks, {task key: [(candidate, result), ...]}) of this machine's llvm records."""
    from ops import database_groups

    if not os.path.exists(path):
        raise SystemExit(f"--db {path}: not found")
    from cost_model import TransferReport

    report = TransferReport()
    groups = [g for g in database_groups(f"sqlite:///{os.path.abspath(path)}", report)
              if len(g[2]) >= 2]
    if len(groups) < 2:
        raise SystemExit(f"--db {path}: {len(groups)} task(s) with usable records (need 2; "
                         f"skipped: {report.skipped_records or 'none'})")
    return [g[0] for g in groups], {g[0].key: g[2] for g in groups}


def logged_tasks(path: str, target):
    """(tasks, {task key: [(candidate, result), ...]}) of a `db export` log, each result
    answered by the simulated measurer (nothing is built or run)."""
    from ops import op_files

    from autosched import rebuild_task
    from autosched.db import read_records
    from autosched.measure import SimulatedMeasurer

    records = read_records(path)
    measurer = SimulatedMeasurer(records)
    defs = {}
    for op_file in op_files():
        for name, wdef in load_op_file(op_file).items():
            defs.setdefault(name, wdef)
    tasks, data = [], {}
    for rec in records:
        if rec.task_key in data or rec.workload not in defs:
            continue
        task = rebuild_task(defs[rec.workload], dict(rec.args), rec.task_key)
        if task is None:
            raise SystemExit(f"--log {path}: {rec.workload}{rec.args} no longer builds "
                             "the task its records were measured on")
        cands = [Candidate.from_json(c) for c in
                 {r.candidate_key: r.candidate for r in records if r.task_key == task.key}
                 .values()]
        inputs = [MeasureInput(task, target, c, None) for c in cands]
        tasks.append(task)
        data[task.key] = list(zip(cands, measurer.measure(inputs)))
    if len(tasks) < 2:
        raise SystemExit(f"--log {path}: {len(tasks)} task(s); holding out needs 2")
    return tasks, data
