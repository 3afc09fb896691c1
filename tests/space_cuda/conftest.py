"""Fixtures for the CUDA search-space tests: the cuda target (sm_90 without a GPU) and
the example operators' tasks."""
from __future__ import annotations

import os
import random

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
OP_FILES = ("matmul.py", "conv2d.py", "softmax.py", "dense_gelu.py", "batch_matmul.py")


@pytest.fixture(scope="session")
def cuda_target():
    from autosched.target import resolve_target

    return resolve_target("cuda")


@pytest.fixture(scope="session")
def tasks():
    """Every workload of the example op files at its default shape, by name."""
    from autosched.workload import load_tasks

    out = {}
    for f in OP_FILES:
        for t in load_tasks(os.path.join(EXAMPLES, f)):
            out[t.workload] = t
    return out


@pytest.fixture(scope="session")
def space_of(tasks, cuda_target):
    from search_space import generate_space

    cache = {}

    def get(workload: str):
        if workload not in cache:
            cache[workload] = generate_space(tasks[workload], cuda_target)
        return cache[workload]

    return get


def _distinct_samples(space, n: int, seed: int = 0, sketch: str | None = None) -> list:
    rng, seen, out = random.Random(seed), set(), []
    for _ in range(n * 8):
        if len(out) == n:
            break
        cand, mod = space.sample(rng, sketch=sketch)
        if cand not in seen:
            seen.add(cand)
            out.append((cand, mod))
    return out


@pytest.fixture(scope="session")
def distinct_samples():
    """`distinct_samples(space, n, seed=0, sketch=None)`: up to `n` distinct
    (candidate, module) samples (the decision-free default counts once)."""
    return _distinct_samples
