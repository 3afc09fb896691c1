"""MetaSchedule beside autosched on the same task, at the same trial count, with its best
kernel timed by OUR harness.

`tune_and_measure` builds the task the way `autosched tune` does
(`autosched.workload.load_tasks`), tunes its PrimFunc with MetaSchedule (`tune_tir`,
in-memory database, `work_dir` for its logs), takes the best schedule from the database
(`compile_tir`: the best record's trace replayed on the task's module) and measures that
module through autosched's own measurer as a module outside a search
(`MeasureInput(task, target, None, mod)`, `make_measurer(settings, "local", work_dir)`):
built by our builder, timed by our runner and its output checked against the task's
reference, exactly as our candidates are. MetaSchedule's own timings only steer its
search; the latency reported is ours.

The same code runs on llvm (here) and cuda (the device):

- cuda needs device code at build time: MetaSchedule's build workers compile through
  `autosched.measure.cuda.compiler.build_cuda` (our nvcc / NVRTC callback, inside the
  target's scope, for exactly the target's arch), given to its LocalBuilder as a build
  function; its run workers register TVM's CUDA runtime first (`ensure_cuda_runtime` as
  the pool initializer). The build function is a closure, which MetaSchedule's worker
  pool ships by value (cloudpickle), so the workers need only `autosched` importable.
- the design space: MetaSchedule's `cuda-tensorcore` rules on cuda (its tensor-core
  rule plus every plain CUDA rule; TVM 0.27 has fp16 but no bf16 mma intrinsics, so a
  bf16 task gets the plain rules), its defaults on llvm. MetaSchedule tunes for the
  task's target plus `max_threads_per_block` (`ms_target`), which its CUDA rules need.
- seen here (sm_90a, nvcc, no GPU): MetaSchedule's tensor-core candidates of
  `matmul_mp` fail to build with a TVM check (tvm_access_ptr dtype, fp16 vs fp32),
  through `build_cuda` and a plain `tvm.compile` alike; its SIMT candidates build
  (gpu_cases.metaschedule_note says so in a row).

A failure (MetaSchedule found nothing, our build or check failed) is a result with
`ok` False and the error, never an exception, so a device script goes on with the
other cases.
"""
from __future__ import annotations

import statistics
import time

INVALID_S = 1e9   # MetaSchedule records a failed candidate with run time 1e10 s


def target_spec(target):
    """A TargetSpec from "llvm", "cuda", a JSON string, or a TargetSpec as given."""
    if isinstance(target, str):
        from autosched import resolve_target

        return resolve_target(target)
    return target


def load_task(op_file: str, workload: str, arg_items=()):
    """The task `autosched tune OP_FILE --workload W --arg ...` would tune."""
    from autosched import load_tasks

    tasks = load_tasks(op_file, [workload], list(arg_items))
    if len(tasks) != 1:
        raise ValueError(f"{op_file}:{workload} {list(arg_items)} gives {len(tasks)} tasks")
    return tasks[0]


def space_kind(spec) -> str:
    """MetaSchedule's rule set for the target: `cuda-tensorcore` on cuda, else the
    target's default (`from-target`)."""
    return "cuda-tensorcore" if spec.kind == "cuda" else "from-target"


def ms_target(spec):
    """The TVM target MetaSchedule tunes for: the task's target, on cuda with
    `max_threads_per_block` (= our `max_num_threads`) added, which MetaSchedule's CUDA
    rules (AutoBind, CrossThreadReduction) require and TVM's cuda target does not set.
    Our harness builds the chosen module with the task's own target."""
    from autosched import tvm_target

    config = dict(spec.config)
    if spec.kind == "cuda":
        config.setdefault("max_threads_per_block", config.get("max_num_threads", 1024))
    return tvm_target(config)


def build_fn(kind: str, target_config: dict):
    """MetaSchedule's f_build for `kind`: what its default build does (drop the weight
    layout rewrite blocks, `tirx.build`), on cuda through `build_cuda` instead (device
    code made in the build worker). Only the cuda build imports TVM's tensor intrinsics,
    which the default build imports always (45 s in each fresh worker on a busy 2-core
    machine; nothing on llvm tensorizes). A closure on purpose: MetaSchedule's worker
    pool ships it by value."""
    def f_build(mod, target, params):
        import tvm
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

        mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
        if kind != "cuda":
            return tvm.tirx.build(mod, target)
        from search_space import import_tvm_intrinsics

        import_tvm_intrinsics()  # registers the mma / wmma intrinsics

        from autosched.measure import build_cuda

        # the runtime module, as `tirx.build` returns: an Executable would cross
        # MetaSchedule's FFI boundary as a callable, a Function without export_library
        return build_cuda(mod, target_config).executable.mod
    return f_build


def ms_builder_runner(spec, build_timeout: float = 600.0, run_timeout: float = 60.0,
                      build_workers: int | None = None):
    """MetaSchedule's LocalBuilder and LocalRunner for the target (see the module
    docstring). The generous build timeout: on cuda its workers import TVM's tensor
    intrinsics (TVMScript parsed at import), 45 s on a busy 2-core machine; a loaded
    machine must not fail MetaSchedule's builds. The caller shuts the runner's worker
    pool down (`runner.pool.shutdown()`)."""
    from tvm.s_tir.meta_schedule.builder import LocalBuilder
    from tvm.s_tir.meta_schedule.runner import LocalRunner

    init = None
    if spec.kind == "cuda":
        from autosched.measure import ensure_cuda_runtime

        init = ensure_cuda_runtime
    builder = LocalBuilder(max_workers=build_workers, timeout_sec=build_timeout,
                           f_build=build_fn(spec.kind, dict(spec.config)), initializer=init)
    runner = LocalRunner(timeout_sec=run_timeout, initializer=init)
    return builder, runner


def record_times(records) -> list[float | None]:
    """Median run seconds of each MetaSchedule tuning record in order; None for a
    failed candidate (no times, or MetaSchedule's 1e10 s marker)."""
    out = []
    for rec in records:
        secs = [float(x) for x in (rec.run_secs or [])]
        out.append(statistics.median(secs) if secs and all(x < INVALID_S for x in secs)
                   else None)
    return out


def tune_metaschedule(task, spec, trials: int, work_dir: str, seed: int = 1,
                      per_iter: int | None = None, build_timeout: float = 600.0,
                      build_workers: int | None = None, cost_model: str = "xgb") -> dict:
    """Tune `task` with MetaSchedule for `trials` trials; returns the best module (None
    when no candidate ran), MetaSchedule's own best latency and per-record times, its
    rule set and tuning wall time. `cost_model`: MetaSchedule's ("xgb", its default,
    needs xgboost; "random" ranks nothing and is no fair peer)."""
    from tvm.s_tir.meta_schedule import database as msdb
    from tvm.s_tir.meta_schedule.space_generator import PostOrderApply
    from tvm.s_tir.meta_schedule.tir_integration import compile_tir, tune_tir

    tvm_target = ms_target(spec)
    kind = space_kind(spec)
    if kind == "cuda-tensorcore":  # its tensor-core rule names the registered intrinsics
        from search_space import import_tvm_intrinsics

        import_tvm_intrinsics()
    builder, runner = ms_builder_runner(spec, build_timeout, build_workers=build_workers)
    db = msdb.MemoryDatabase()
    start = time.perf_counter()
    try:
        tune_tir(task.mod, tvm_target, work_dir, max_trials_global=trials,
                 num_trials_per_iter=per_iter or min(64, trials), database=db,
                 seed=max(int(seed), 1), builder=builder, runner=runner,
                 cost_model=cost_model,
                 space=PostOrderApply(sch_rules=kind, postprocs=kind, mutator_probs=kind))
    finally:  # its run worker would keep its CUDA context while ours measure
        runner.pool.shutdown()
    wall = time.perf_counter() - start
    times = record_times(db.get_all_tuning_records())
    ok_times = [t for t in times if t is not None]
    sch = compile_tir(db, task.mod, tvm_target) if ok_times else None
    return {"mod": None if sch is None else sch.mod, "wall_s": wall, "space": kind,
            "record_times": times, "ms_best_s": min(ok_times) if ok_times else None,
            "trace": None if sch is None else str(sch.trace)}


def measure_module(task, spec, mod, work_dir: str, settings=None):
    """Our harness on one module outside a search: build, run, check against the task's
    reference; the MeasureResult. `work_dir` holds the reference (shared with a tuning
    run's work dir, it is not computed again)."""
    from autosched.measure import MeasureInput, MeasureSettings, make_measurer

    with make_measurer(settings or MeasureSettings(), "local", work_dir) as measurer:
        return measurer.measure([MeasureInput(task, spec, None, mod)])[0]


def tune_and_measure(op_file: str, workload: str, arg_items=(), target="llvm",
                     trials: int = 64, work_dir: str = "logs/metaschedule",
                     measure_work_dir: str | None = None, seed: int = 1, settings=None,
                     per_iter: int | None = None, build_timeout: float = 600.0,
                     build_workers: int | None = None, cost_model: str = "xgb") -> dict:
    """MetaSchedule on the task of `op_file`/`workload`/`arg_items` (as `autosched
    tune` builds it) for `trials` trials, its best module measured by our harness.

    Returns a JSON-able dict: task name and key, target kind, trials asked, recorded
    (records in MetaSchedule's database), measured (records that ran) and failed, the
    best latency by our harness (`latency_s`, the median of its repeats, and
    `latencies_s`), MetaSchedule's own best (`ms_best_s`, for reference), `ok` with
    `error` ("stage: message") otherwise, tuning wall time, and the whole call's."""
    t0 = time.perf_counter()
    out = {"op_file": op_file, "workload": workload, "args": list(arg_items),
           "trials_asked": trials, "trials_recorded": 0, "trials_measured": 0,
           "trials_failed": 0, "latency_s": None, "latencies_s": [], "ms_best_s": None,
           "ok": False, "error": None, "tuning_wall_s": None, "space": None,
           "cost_model": cost_model}
    stage = "load"
    try:
        task = load_task(op_file, workload, arg_items)
        spec = target_spec(target)
        out.update(task=task.name, task_key=task.key, target=spec.kind, flops=task.flops)
        stage = "tune"
        tuned = tune_metaschedule(task, spec, trials, work_dir, seed, per_iter,
                                  build_timeout, build_workers, cost_model)
        times = tuned["record_times"]
        measured = sum(t is not None for t in times)
        out.update(trials_recorded=len(times), trials_measured=measured,
                   trials_failed=len(times) - measured, ms_best_s=tuned["ms_best_s"],
                   tuning_wall_s=tuned["wall_s"], space=tuned["space"],
                   trace=tuned["trace"])
        if tuned["mod"] is None:
            out["error"] = "tune: MetaSchedule measured no working candidate"
            return out
        stage = "measure"
        result = measure_module(task, spec, tuned["mod"], measure_work_dir or work_dir,
                                settings)
        if result.ok:
            out.update(ok=True, latency_s=result.median, latencies_s=list(result.latencies))
        else:
            out["error"] = f"measure: {result.error_kind}: {result.error_msg[:500]}"
    except Exception as e:  # a result for the device script, which goes on
        out["error"] = f"{stage}: {type(e).__name__}: {str(e).strip()[:500]}"
    finally:
        out["wall_s"] = time.perf_counter() - t0
    return out

