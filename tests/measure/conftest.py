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
def examples_dir():
    return EXAMPLES


@pytest.fixture(scope="session")
def target():
    from autosched.target import resolve_target

    return resolve_target("llvm")


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


def _vectorized_matmul(task):
    from tvm import s_tir

    sch = s_tir.Schedule(task.mod)
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    jo, ji = sch.split(j, [None, 8])
    sch.reorder(i, jo, k, ji)
    sch.vectorize(ji)
    sch.parallel(i)
    return sch.mod


def _rfactor_matmul(task):
    from tvm import s_tir

    sch = s_tir.Schedule(task.mod)
    _, _, k = sch.get_loops(sch.get_sblock("C"))
    _, ki = sch.split(k, [None, 4])
    sch.rfactor(ki, 0)  # a different summation order: within tolerance, not bit-equal
    return sch.mod


def _broken_kernels():
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def plus_one(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
                 C: T.Buffer((N, N), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for i, j in T.grid(N, N):
            C[i, j] = T.float32(1)  # computes A @ B + 1
            for k in range(N):
                C[i, j] = C[i, j] + A[i, k] * B[k, j]

    @T.prim_func
    def zeros(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
              C: T.Buffer((N, N), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for i, j in T.grid(N, N):
            C[i, j] = T.float32(0)

    @T.prim_func
    def half_written(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
                     C: T.Buffer((N, N), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for i, j in T.grid(N // 2, N):  # forgets the lower half of C
            C[i, j] = T.float32(0)
            for k in range(N):
                C[i, j] = C[i, j] + A[i, k] * B[k, j]

    @T.prim_func
    def clobbers_input(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
                       C: T.Buffer((N, N), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for i, j in T.grid(N, N):
            C[i, j] = T.float32(0)
            for k in range(N):
                C[i, j] = C[i, j] + A[i, k] * B[k, j]
        for i in range(N):
            B[i, i] = T.float32(7)  # scratch space in an input: wrong in real use

    @T.prim_func
    def hang(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
             C: T.Buffer((N, N), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        n: T.int32 = 0
        while n >= 0:  # n stays in [0, 7): never terminates
            n = (n + 1) % 7
            C[0, 0] = T.Cast("float32", n)

    @T.prim_func
    def wild_store(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
                   C: T.Buffer((N, N), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        far = T.decl_buffer((T.int64(1099511627776),), "float32", data=C.data)
        for i in range(N):  # 4 TiB past C: unmapped, no bounds checks -> SIGSEGV
            far[T.int64(1099511627776) - T.int64(1024) * T.int64(i) - T.int64(1)] = A[0, i]

    @T.prim_func
    def raise_segv(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
                   C: T.Buffer((N, N), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        T.evaluate(T.call_extern("int32", "raise", 11))  # libc raise(SIGSEGV)

    @T.prim_func
    def missing_symbol(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
                       C: T.Buffer((N, N), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        T.evaluate(T.call_extern("int32", "autosched_test_no_such_symbol", 1))

    @T.prim_func
    def gpu_threads_on_cpu(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"),
                           C: T.Buffer((N, N), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for i in T.thread_binding(N, thread="threadIdx.x"):  # llvm cannot compile this
            for j in range(N):
                C[i, j] = A[i, j]

    funcs = dict(plus_one=plus_one, zeros=zeros, half_written=half_written,
                 clobbers_input=clobbers_input, hang=hang, wild_store=wild_store,
                 raise_segv=raise_segv, missing_symbol=missing_symbol,
                 compile_error=gpu_threads_on_cpu)
    return {name: tvm.IRModule({"main": f}) for name, f in funcs.items()}


@pytest.fixture(scope="session")
def kernels(matmul_task):
    """Modules with the 32^3 matmul's signature: good ones and broken ones."""
    from autosched.measure.builder import TEST_FAULT_ATTR

    mods = _broken_kernels()
    mods["plain"] = matmul_task.mod
    mods["vectorized"] = _vectorized_matmul(matmul_task)
    mods["rfactor"] = _rfactor_matmul(matmul_task)
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
