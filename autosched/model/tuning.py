"""`tune-model`: a model file -> its tasks tuned, with torch's baseline of each.

    tune_model(path, config, train)      extract, tune all tasks with one budget (the task
                                         scheduler weighs each by its count; on the CPU
                                         each candidate timed as the model calls it), and
                                         time torch once per task as its baseline record

`export-model`, the library of the kernels that win, is `export.py`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from search_space import SPACE_VERSION

from ..errors import UserError
from ..versions import current_versions


@dataclass
class ModelTuneResult:
    model_ops: object     # ModelOps
    tune: object          # TuneResult
    choices: list         # OpChoice per task
    measured_baselines: int


def is_bundle(runner: str) -> bool:
    return runner.startswith("bundle:")


def check_cuda_baselines(target, runner: str) -> None:
    """UserError where torch's baselines of a CUDA target cannot be timed: the local
    runner needs a GPU that torch sees here; a bundle times them on its GPU machine."""
    from .baseline import no_gpu_reason

    if target.kind != "cuda" or is_bundle(runner):
        return
    why = no_gpu_reason() if runner == "local" else "an RPC runner times no torch baseline"
    if why is not None:
        raise UserError(f"tune-model --target cuda times torch's baselines with the "
                        f"kernels, and {why}; build a round for the GPU machine with "
                        "--runner bundle:DIR")


def measure_baselines(model_ops, tasks, db, target, versions, settings) -> int:
    """Time torch on every task that has no baseline here yet (on the GPU for a CUDA
    target, `baseline.time_torch_cuda`); returns how many."""
    from .baseline import (baseline_threads, lookup, random_inputs, record_baseline,
                           time_torch, time_torch_cuda, twin_call)

    gpu = target.kind == "cuda"
    threads, measured = baseline_threads(target), 0
    for op, task in zip(model_ops.ops, tasks):
        if lookup(db, task, target, versions, threads) is not None:
            continue
        inputs = random_inputs([(s.shape, s.dtype) for s in task.inputs],
                               "cuda" if gpu else "cpu")
        call = twin_call(op.workload, dict(op.params))
        latencies = (time_torch_cuda([call], inputs, settings)[0] if gpu
                     else time_torch(call, inputs, settings, threads))
        record_baseline(db, task, target, versions, latencies, threads, settings.to_json())
        measured += 1
    return measured


def tune_model(path: str, config, train: bool = False, callbacks=()) -> ModelTuneResult:
    """Tune every operator of the model file at `path` with `config.trials` in all.
    Torch is timed first, while no tuning worker runs beside it; on a CUDA target with
    `--runner bundle:DIR` the bundle's round carries torch's timing instead
    (`_tune_with_bundle`)."""
    from ..db import open_database
    from .modelfile import load_model_file
    from ..target import resolve_target
    from ..tuner import tune_tasks
    from .choice import recorded_choices
    from .extract import extract, model_tasks

    target = resolve_target(config.target)
    check_cuda_baselines(target, config.runner)  # before the model is traced
    model_ops = extract(load_model_file(path), train)
    tasks = model_tasks(model_ops)
    versions = current_versions(SPACE_VERSION)
    if target.kind == "cuda" and is_bundle(config.runner):
        return _tune_with_bundle(model_ops, tasks, target, versions, config, callbacks)
    with open_database(config.database_url) as db:
        measured = measure_baselines(model_ops, tasks, db, target, versions, config.measure)
    result = tune_tasks(tasks, as_called(config, target), callbacks,
                        weights=[op.count for op in model_ops.ops])
    with open_database(config.database_url) as db:
        choices = recorded_choices(model_ops, tasks, db, target, versions)
    return ModelTuneResult(model_ops, result, choices, measured)


TWIN_FACTORY = "autosched.model.baseline:twin_call"


def as_called(config, target):
    """`config` with its CPU candidates timed as the model calls them: in a torch
    process, on its kernel pool, each call after torch's own operator for the task
    (`MeasureSettings.beside`), so a model's records hold inside the model. The local
    runner does it on the CPU; a GPU kernel (no thread pool to share) and a remote
    machine (no torch there) are timed alone."""
    if target.kind != "llvm" or config.runner != "local":
        return config
    return replace(config, measure=replace(config.measure, beside=TWIN_FACTORY))


def _tune_with_bundle(model_ops, tasks, target, versions, config, callbacks):
    """Tune through a bundle: import the baselines its GPU machine timed, put a baseline
    job for every task still without one into the round this run writes, tune."""
    from ..db import open_database
    from ..measure.factory import make_measurer
    from ..tuner import tune_tasks
    from ..results import MeasureResult
    from .choice import recorded_choices
    from .baseline import lookup, record_baseline

    measurer = make_measurer(config.measure, config.runner, config.work_dir)
    try:
        measurer.check_run(tasks, target, versions)  # another command's bundle: refused
        there = target.measured_on(measurer.hardware(target))
        by_key = {t.key: t for t in tasks}
        imported = 0  # the newest result of a task first: one baseline each
        with open_database(config.database_url) as db:
            for r in sorted(measurer.runner.baseline_results(), key=lambda r: -r["round"]):
                task, res = by_key.get(r["task_key"]), MeasureResult.from_json(r["result"])
                if task is None or not res.ok or lookup(db, task, there, versions, 0):
                    continue
                record_baseline(db, task, there, versions, res.latencies, 0,
                                r["settings"], r["runtime"].get("torch"),
                                {"host": r["host"], "user": r["user"], "time": r["time"]})
                imported += 1
            missing = [(op, t) for op, t in zip(model_ops.ops, tasks)
                       if lookup(db, t, there, versions, 0) is None]
        measurer.runner.add_baseline_jobs([_baseline_job(op, t) for op, t in missing])
        result = tune_tasks(tasks, config, callbacks, measurer=measurer,
                            weights=[op.count for op in model_ops.ops])
    finally:
        measurer.close()
    with open_database(config.database_url) as db:
        choices = recorded_choices(model_ops, tasks, db, result.target, versions)
    return ModelTuneResult(model_ops, result, choices, imported)


def _baseline_job(op, task) -> dict:
    """A bundle's baseline job for `task` (measure/bundle/baselines.py)."""
    return {"task_key": task.key, "task": task.name, "workload": op.workload,
            "params": dict(op.params),
            "inputs": [{"shape": list(s.shape), "dtype": s.dtype} for s in task.inputs]}
