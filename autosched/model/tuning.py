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
    """Time torch on every task that has no baseline here yet, and its one call on every
    set of tasks that one aten call computes (joint_calls.py: their kernels are chosen
    against it, together), on the GPU for a CUDA target (`baseline.time_torch_cuda`);
    returns how many were timed."""
    from .baseline import (baseline_threads, joint_outputs, joint_twin, lookup,
                           random_inputs, record_baseline, time_torch, time_torch_cuda,
                           twin_call)
    from .joint_calls import member_specs, sibling_groups

    device = "cuda" if target.kind == "cuda" else "cpu"
    threads, measured = baseline_threads(target), 0

    def record(task, call, inputs, outputs=()):
        latencies = (time_torch_cuda([call], inputs, settings)[0] if device == "cuda"
                     else time_torch(call, inputs, settings, threads))
        record_baseline(db, task, target, versions, latencies, threads, settings.to_json(),
                        outputs=outputs)

    for op, task in zip(model_ops.ops, tasks):
        if lookup(db, task, target, versions, threads) is None:
            record(task, twin_call(op.workload, dict(op.params)),
                   random_inputs([(s.shape, s.dtype) for s in task.inputs], device))
            measured += 1
    for group in sibling_groups(model_ops):
        first, outputs = joint_outputs([tasks[i] for i in group])
        if lookup(db, first, target, versions, threads, outputs) is None:
            record(first, joint_twin(member_specs(model_ops, tasks, group), device), [],
                   outputs)
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
    job for every task (and every aten call of several tasks) still without one into the
    round this run writes, tune."""
    from ..db import open_database
    from ..measure.factory import make_measurer
    from ..tuner import tune_tasks
    from .bundle_jobs import import_baselines, missing_jobs
    from .choice import recorded_choices

    measurer = make_measurer(config.measure, config.runner, config.work_dir)
    try:
        measurer.check_run(tasks, target, versions)  # another command's bundle: refused
        there = target.measured_on(measurer.hardware(target))
        with open_database(config.database_url) as db:
            imported = import_baselines(db, measurer.runner.baseline_results(), tasks, there,
                                        versions)
            jobs = missing_jobs(db, model_ops, tasks, there, versions)
        measurer.runner.add_baseline_jobs(jobs)
        result = tune_tasks(tasks, config, callbacks, measurer=measurer,
                            weights=[op.count for op in model_ops.ops])
    finally:
        measurer.close()
    with open_database(config.database_url) as db:
        choices = recorded_choices(model_ops, tasks, db, result.target, versions)
    return ModelTuneResult(model_ops, result, choices, imported)
