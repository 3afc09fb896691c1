"""The SYNTHETIC GPU log (tests/data/synthetic_gpu_sm90a.jsonl, made by
tests/data/make_synthetic_gpu_log.py: real sm_90a candidates, made-up results) and a
search strategy that proposes only what a log holds, so a tuning run on a CUDA space,
far larger than any log, replays without a miss."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
LOG = str(ROOT / "tests" / "data" / "synthetic_gpu_sm90a.jsonl")
# (workload, args) of the log's tasks, in the op files of examples/
TASKS = [("mixed_precision.py", "matmul_mp", ["M=128", "N=128", "K=128"]),
         ("mixed_precision.py", "matmul_mp", ["M=256", "N=128", "K=128"]),
         ("matmul.py", "matmul", ["M=128", "N=128", "K=128"])]


def log_target(path: str = LOG) -> str:
    """The target config the log was made for, as the --target JSON text."""
    with open(path) as f:
        return json.loads(f.readline())["target_key"]


def load_task(index: int):
    """Task `index` of TASKS, built from its example op file."""
    from autosched.workload import load_tasks

    op_file, workload, args = TASKS[index]
    return load_tasks(str(ROOT / "examples" / op_file), [workload], args)[0]


class LoggedCandidates:
    """A SearchStrategy over the candidates `measurer` (a SimulatedMeasurer) holds for
    the task: a seeded shuffle, ranked by `cost_model` once it is trained; it learns
    from every batch when it has one."""

    def __init__(self, measurer, cost_model=None):
        self.measurer = measurer
        self.cost_model = cost_model

    def seed_candidates(self, candidates) -> None:
        return None

    def propose(self, space, n, exclude, rng: random.Random):
        cands = [c for c in self.measurer.candidates(space.task.key) if c.key not in exclude]
        rng.shuffle(cands)
        mods = [space.apply(c) for c in cands]
        if self.cost_model is not None and self.cost_model.trained and cands:
            order = np.argsort(-self.cost_model.predict(space.task, cands, mods), kind="stable")
            cands, mods = [cands[i] for i in order], [mods[i] for i in order]
        return list(zip(cands, mods))[:n]

    def update(self, space, candidates, mods, results) -> None:
        if self.cost_model is not None:
            self.cost_model.update(space.task, candidates, mods, results)
