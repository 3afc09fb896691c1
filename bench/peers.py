"""Peers measured side by side with autosched: MetaSchedule at the same trial budget,
torch for the same operator, and one timing method for every TVM kernel."""
from __future__ import annotations

import statistics
import tempfile
import time

import numpy as np

from autosched import machine_cores, size_kernel_pool

# TVM kernels timed here (and MetaSchedule's, in runners that inherit this environment)
# run on every core, as torch does and as autosched's run workers do.
size_kernel_pool()

TIMING = {"number": 10, "repeat": 5, "min_repeat_ms": 50}
# TVM's thread pool and torch's OpenMP workers keep spinning for a while after a call: a
# timing started right after the other runtime ran shares the cores with those spinning
# threads (a 512 x 768 layer norm timed 9x slower so). Every timing waits this long first.
SETTLE_S = 0.1


def random_args(task, seed: int = 0, positive=()) -> list[np.ndarray]:
    """Inputs uniform in [-1, 1) (those named in `positive` in [0.5, 1.5)), zeroed
    outputs."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(*((0.5, 1.5) if s.name in positive else (-1, 1)), s.shape)
            .astype(s.dtype) for s in task.inputs] + \
           [np.zeros(s.shape, s.dtype) for s in task.outputs]


def tvm_timer(mod, target, args: list[np.ndarray]):
    """(timer, read): `timer()` is the median seconds of one call of `mod` on tensors
    holding `args` (the same method for every tuner); `read()` is those tensors' contents
    (the outputs, once `timer` has run)."""
    import tvm

    lib = tvm.compile(mod, target=target)
    dev = tvm.cpu() if target.kind.name == "llvm" else tvm.cuda()
    tensors = [tvm.runtime.tensor(a, dev) for a in args]
    f = lib.jit() if hasattr(lib, "jit") else lib
    evaluate = f.time_evaluator("main", dev, **TIMING)

    def timer() -> float:
        time.sleep(SETTLE_S)
        return float(np.median(evaluate(*tensors).results))

    return timer, lambda: [t.numpy() for t in tensors]


def time_tvm(mod, target, args: list[np.ndarray]) -> tuple[float, list[np.ndarray]]:
    """Median seconds of one call (see `tvm_timer`) and the outputs."""
    timer, read = tvm_timer(mod, target, args)
    return timer(), read()


def metaschedule(task, target, trials: int, seed: int = 0, checkpoints=()):
    """Tune with MetaSchedule; returns (scheduled module, wall seconds, best-so-far curve
    of latencies in seconds per trial in measurement order). With `checkpoints`, the
    first item is instead {k: the best module among the first k measured records}."""
    from tvm.s_tir.meta_schedule import builder as msbuilder
    from tvm.s_tir.meta_schedule import database as msdb
    from tvm.s_tir.meta_schedule.tir_integration import compile_tir, tune_tir

    db = msdb.MemoryDatabase()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as work_dir:
        # MetaSchedule's build workers import TVM's tensor intrinsics (TVMScript parsed at
        # import), which takes minutes on a busy 2-core machine; its default 30 s build
        # timeout then fails every build. A generous timeout keeps the peer honest.
        tune_tir(task.mod, target, work_dir, max_trials_global=trials,
                 num_trials_per_iter=min(32, trials), database=db, seed=max(seed, 1),
                 builder=msbuilder.LocalBuilder(timeout_sec=600))
    wall = time.perf_counter() - start
    records = list(db.get_all_tuning_records())
    curve, best, best_rec = [], float("inf"), []
    for rec in records:
        secs = [float(x) for x in (rec.run_secs or [])]
        if secs and all(x < 1e9 for x in secs) and statistics.median(secs) < best:
            best = statistics.median(secs)
            best_rec.append((len(curve), rec))
        curve.append(best)
    if checkpoints:
        return {k: _replay(task.mod, [r for i, r in best_rec if i < k]) for k in checkpoints}, \
            wall, curve
    sch = compile_tir(db, task.mod, target)
    return (sch.mod if sch is not None else task.mod), wall, curve


def _replay(mod, improving_records):
    """The module scheduled by the last (best) of `improving_records`, or `mod`."""
    from tvm import s_tir

    if not improving_records:
        return mod
    sch = s_tir.Schedule(mod)
    improving_records[-1].trace.apply_to_schedule(sch, remove_postproc=False)
    return sch.mod


def torch_timer(fn, inputs, warmup: int = 3, repeats: int = 7, number: int = 10):
    """A function returning the median seconds per call of a torch function (a thread
    per core, as the TVM kernels get; after warm-up)."""
    import torch

    def timer() -> float:
        torch.set_num_threads(machine_cores())
        time.sleep(SETTLE_S)
        with torch.no_grad():
            for _ in range(warmup):
                fn(*inputs)
            samples = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                for _ in range(number):
                    fn(*inputs)
                samples.append((time.perf_counter() - t0) / number)
        return statistics.median(samples)

    return timer


def torch_time(fn, inputs, **timing) -> float:
    """Median seconds per call of a torch function (see `torch_timer`)."""
    return torch_timer(fn, inputs, **timing)()


