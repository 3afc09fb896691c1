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


@pytest.fixture(scope="session")
def cuda_emulator():
    """The CPU emulator of generated CUDA kernels (tests/support/cuda_emulator.py)."""
    import shutil

    if shutil.which("g++") is None:
        pytest.skip("the CUDA emulator needs g++")
    from support import cuda_emulator

    return cuda_emulator


@pytest.fixture(scope="session")
def small_tasks():
    """The example workloads at shapes small enough to emulate on the CPU."""
    from autosched.workload import load_tasks

    shapes = {
        "matmul.py": ["M=64", "N=32", "K=48"],
        "conv2d.py": ["N=1", "C=8", "H=10", "W=12", "F=8"],
        "softmax.py": ["M=8", "N=200"],
        "dense_gelu.py": ["M=16", "N=64", "K=32"],
        "batch_matmul.py": ["B=2", "M=16", "N=32", "K=16"],
    }
    out = {}
    for f, args in shapes.items():
        for t in load_tasks(os.path.join(EXAMPLES, f), arg_items=args):
            out[t.workload] = t
    return out


@pytest.fixture(scope="session")
def reference():
    """`reference(task, inputs)`: the task's outputs (name -> array) computed by its
    unscheduled function built for the CPU (llvm)."""
    import numpy as np
    import tvm

    def run(task, inputs: dict) -> dict:
        lib = tvm.compile(task.mod, target="llvm").jit()
        dev = tvm.cpu()
        args = [tvm.runtime.tensor(inputs[s.name], dev) for s in task.inputs]
        outs = [tvm.runtime.tensor(np.zeros(s.shape, s.dtype), dev) for s in task.outputs]
        lib["main"](*args, *outs)
        return {s.name: o.numpy() for s, o in zip(task.outputs, outs)}

    return run
