"""Fixtures for the measurement tests: small real tasks, hand-scheduled modules and
deliberately broken kernels with the matmul task's signature (A, B -> C, 32x32 fp32)."""
from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
N = 32  # every hand-written kernel below is for the 32x32x32 matmul task

# Short limits so that a hang costs seconds; generous enough for a loaded 2-core machine.
FAST = dict(number=2, repeat=3, min_repeat_ms=0, warmup=1, build_workers=2,
            build_timeout=10.0, run_timeout=6.0)


def make_task(op_file: str, workload: str | None = None, **args):
    from autosched.workload import load_tasks

    items = [f"{k}={v}" for k, v in args.items()]
    names = [workload] if workload else None
    return load_tasks(str(EXAMPLES / op_file), names, arg_items=items)[0]


@pytest.fixture(scope="session")
def task_of():
    """task_of("matmul.py", [workload], M=8, ...) -> Task from an example op file."""
    return make_task


@pytest.fixture(scope="session")
def settings():
    from autosched.measure import MeasureSettings

    return MeasureSettings(**FAST)


@pytest.fixture(scope="session")
def matmul_task():
    return make_task("matmul.py", M=N, N=N, K=N)


@pytest.fixture(scope="session")
def inp(target):
    """inp(task, mod) -> MeasureInput."""
    from autosched.measure import MeasureInput

    return lambda task, mod: MeasureInput(task, target, None, mod)


@pytest.fixture(scope="session")
def kernels(matmul_task):
    """Modules with the 32^3 matmul's signature: good ones and broken ones."""
    from autosched.measure.builder import TEST_FAULT_ATTR

    from support.kernels import broken_kernels, rfactor_matmul, vectorized_matmul

    mods = broken_kernels(N)
    mods["plain"] = matmul_task.mod
    mods["vectorized"] = vectorized_matmul(matmul_task)
    mods["rfactor"] = rfactor_matmul(matmul_task)
    mods["build_hang"] = matmul_task.mod.with_attr(TEST_FAULT_ATTR, "sleep:600")
    mods["build_crash"] = matmul_task.mod.with_attr(TEST_FAULT_ATTR, "crash")
    return SimpleNamespace(**mods)


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.fixture(scope="session")
def is_alive():
    return alive


@pytest.fixture(scope="session")
def child_env():
    """Environment for a child interpreter that imports this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env
