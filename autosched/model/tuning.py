"""`tune-model` and `export-model`: a model file -> tuned tasks -> a library of winners.

    tune_model(path, config, train)      extract, tune all tasks with one budget (the task
                                         scheduler weighs each by its count), and time
                                         torch once per task as its baseline record
    export_model(path, target, out_dir)  the kernels that beat torch, as a library, and
                                         the decision for every task (model_ops.json);
                                         groups of them that slow the whole compiled step
                                         are undone (step_check.py)
"""
from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, replace
from functools import partial

from search_space import SPACE_VERSION

from ..errors import UserError
from ..versions import current_versions
from .choice import SPLIT_CALL
from .step_check import ROUNDS, min_rounds


@dataclass
class ModelTuneResult:
    model_ops: object     # ModelOps
    tune: object          # TuneResult
    choices: list         # OpChoice per task
    measured_baselines: int


def model_tasks(model_ops):
    """The autosched Task of every operator extraction found, in the same order."""
    from ..workload import make_task
    from .workloads import WORKLOADS

    return [make_task(WORKLOADS[op.workload].definition(), dict(op.params))
            for op in model_ops.ops]


def baseline_threads(target) -> int:
    """The threads torch gets when timed: as many as the kernels' thread pool."""
    import torch

    return int(target.config.get("num-cores") or torch.get_num_threads())


def _random_inputs(task, device: str):
    from .baseline import random_inputs

    return random_inputs([(s.shape, s.dtype) for s in task.inputs], device)


def _call_twin(twin, params, *tensors):
    return twin.torch_call(tensors, params)


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
    from .baseline import lookup, record_baseline, time_torch, time_torch_cuda
    from .workloads import WORKLOADS

    gpu = target.kind == "cuda"
    threads, measured = baseline_threads(target), 0
    for op, task in zip(model_ops.ops, tasks):
        if lookup(db, task, target, versions, threads) is not None:
            continue
        twin = WORKLOADS[op.workload]
        inputs = _random_inputs(task, "cuda" if gpu else "cpu")
        call = partial(_call_twin, twin, dict(op.params))
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
    from .extract import extract

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


def export_model(path: str, target_text: str, out_dir: str, db_url: str | None = None,
                 train: bool = False, side_by_side: bool = True, step_check: bool = True,
                 step_rounds: int = ROUNDS) -> tuple[str, list]:
    """Build the library of the kernels that beat torch into `out_dir` and write the
    decision for every task beside it; returns (the choices file, the choices).

    A kernel whose record beats torch's is built, then timed as the compiled model will
    call it (through `torch.ops.autosched.<workload>.graph`, whose Python call costs
    microseconds that the kernel's record does not hold) beside torch's own operator, their repeats
    alternating on the same inputs; it stays in the library only if it beats torch
    there too. (Torch's baseline and the kernel's record were timed at different
    moments; on a machine whose speed drifts only the side-by-side pair is fair.)
    `side_by_side=False` compares the call with torch's baseline record instead.

    With `step_check`, the whole step (training step with `train`, else inference)
    compiled with the chosen kernels is then timed against inductor alone, in
    `step_rounds` alternating rounds, and groups of kernels that keep it from being
    faster beyond noise are left to torch (step_check.py); model_ops.json records those
    measurements under `step_check`.

    On a CUDA target the kernels and torch are timed on the GPU (`time_torch_cuda`);
    on a host where torch sees no GPU (a build host exporting a bundle's results) each
    choice is made from the records, kernel record against baseline record, and the
    step check is skipped: model_ops.json says both (`decided_on`, each op's
    `decided_by`, `step_check_skipped`)."""
    from ..db import DEFAULT_DB_URL, open_database
    from .modelfile import load_model_file
    from ..target import resolve_target
    from .choice import write_choices
    from .extract import extract

    if step_check and step_rounds < min_rounds():
        raise UserError(f"--step-rounds {step_rounds}: the step check needs at least "
                        f"{min_rounds()} rounds")
    spec = load_model_file(path)
    model_ops = extract(spec, train)
    tasks = model_tasks(model_ops)
    target = resolve_target(target_text)
    versions = current_versions(SPACE_VERSION)
    notes, no_gpu = _cuda_notes(target)
    with open_database(db_url or DEFAULT_DB_URL) as db:
        target = _measuring_target(db, tasks, target)
        choices = recorded_choices(model_ops, tasks, db, target, versions)
        if all(c.kernel_s is None for c in choices):
            raise UserError(f"no kernel of {path} is recorded in {db.url} for this target "
                            "and machine; run `autosched tune-model` first")
        records = {c.task_key: db.best(t.key, target.key, target.hardware_key, versions)
                   for t, c in zip(tasks, choices) if c.chosen == "autosched"}
    if records and no_gpu:  # nothing can be called here: the records decide
        _write(tasks, choices, records, target, out_dir)
    elif records:
        timed = _build_and_time(model_ops, tasks, choices, records, target, out_dir,
                                side_by_side)
        choices = exclude_split_calls(model_ops, [
            replace(c, call_s=timed[c.task_key][0], torch_call_s=timed[c.task_key][1])
            if c.task_key in timed else c for c in choices])
        winners = {c.task_key for c in choices if c.chosen == "autosched"}
        records = {k: r for k, r in records.items() if k in winners}
        if records:        # again: the library's metadata carries the times of the calls
            _write(tasks, choices, records, target, out_dir)
    check = None
    if records and step_check and "step_check_skipped" not in notes:
        choices, records, check = _check_step(spec, model_ops, tasks, choices, records,
                                              target, out_dir, step_rounds)
    if not records:  # torch wins everywhere: no library, only the decisions
        _clear_library(out_dir)
    return write_choices(out_dir, path, train, choices,
                         check.to_json() if check else None, notes), choices


def _cuda_notes(target) -> tuple[dict, str | None]:
    """What model_ops.json says of how a CUDA export decided, and why no kernel can be
    called here (None where torch sees a GPU); ({}, None) for the CPU."""
    from .baseline import no_gpu_reason

    if target.kind != "cuda":
        return {}, None
    why = no_gpu_reason()
    if why is None:
        return {}, None
    return {"decided_on": f"records (kernel record against torch's baseline record): {why}",
            "step_check_skipped": f"no GPU to run the step on: {why}"}, why


def _measuring_target(db, tasks, target):
    """On a host without the GPU (a CUDA target, no local device): the target as
    measured on the one GPU whose kernel records of `tasks` the database holds, so that
    its records and baselines are found; else `target`."""
    if target.kind != "cuda" or target.has_local_device:
        return target
    found = {}
    for task in tasks:
        for rec in db.iter_records(task_key=task.key, target_key=target.key, ok_only=True):
            found.setdefault(rec.hardware_key, rec.hardware)
    if len(found) > 1:
        names = ", ".join(f"{fp.get('name')} ({key})" for key, fp in sorted(found.items()))
        raise UserError(f"the records of this model on {target.key} come from several GPUs "
                        f"({names}); export on the GPU machine whose kernels you want")
    return target.measured_on(next(iter(found.values()))) if found else target


def _check_step(spec, model_ops, tasks, choices, records, target, out_dir, rounds):
    """The step check over the library in `out_dir` (step_check.py): (choices with the
    undone groups left to torch, the records still chosen, the check); the library is
    written again without the undone kernels."""
    from .step_check import check_step, chosen_groups, undo

    check = check_step(spec, out_dir, model_ops, choices, model_ops.train,
                       baseline_threads(target), rounds)
    if check is None or not check.undone:
        return choices, records, check
    groups = chosen_groups(model_ops, choices)
    choices = exclude_split_calls(model_ops, undo(choices, groups, check.undone))
    winners = {c.task_key for c in choices if c.chosen == "autosched"}
    records = {k: r for k, r in records.items() if k in winners}
    if records:
        _write(tasks, choices, records, target, out_dir)
    return choices, records, check


def recorded_choices(model_ops, tasks, db, target, versions) -> list:
    """The decision for every task from the database's records (before export times the
    calls), with the tasks the backend could not run on a kernel left to torch."""
    from .choice import op_choices

    return exclude_split_calls(model_ops, exclude_ambiguous(tasks, op_choices(
        model_ops, tasks, db, target, versions, baseline_threads(target))))


def exclude_ambiguous(tasks, choices) -> list:
    """Of the chosen tasks of one workload that take the same input shapes (they differ
    in another parameter, such as a layer norm's eps), keep the one that saves the most
    time per step: `torch.ops.autosched.<workload>` dispatches on shapes alone."""
    best: dict[tuple, int] = {}
    for i, (t, c) in enumerate(zip(tasks, choices)):
        if c.chosen != "autosched":
            continue
        key = (t.workload, tuple((s.shape, s.dtype) for s in t.inputs))

        def saving(j):
            return choices[j].count * (choices[j].torch_s - choices[j].kernel_cost_s)

        if key not in best or saving(i) > saving(best[key]):
            best[key] = i
    kept = set(best.values())
    return [c if c.chosen != "autosched" or i in kept else
            replace(c, excluded="another task of the workload takes the same shapes")
            for i, c in enumerate(choices)]


def exclude_split_calls(model_ops, choices) -> list:
    """A task chosen for a kernel stays torch's where its aten call has another output
    that torch computes (the backend replaces a call's outputs together or not at all):
    so the library and model_ops.json hold what the backend will run. `choices` follow
    `model_ops.ops`."""
    chosen = {op.key: c.chosen == "autosched" for op, c in zip(model_ops.ops, choices)}
    while True:
        split = {op.key for op in model_ops.ops if chosen[op.key]
                 and not all(chosen.get(k, False) for k in op.siblings)}
        if not split:
            break
        chosen.update(dict.fromkeys(split, False))
    return [replace(c, excluded=SPLIT_CALL) if c.chosen == "autosched" and not chosen[op.key]
            else c for op, c in zip(model_ops.ops, choices)]


def _write(tasks, choices, records, target, out_dir) -> list:
    """The library of the tasks in `records`; returns those tasks."""
    from ..exporting import KernelChoice, write_library

    picked = [(t, c) for t, c in zip(tasks, choices) if c.task_key in records]
    metas = [{"torch_latency_s": c.torch_s, "baseline_record_id": c.baseline_record_id,
              "call_latency_s": c.call_s, "torch_call_latency_s": c.torch_call_s,
              "count": c.count, "ops": dict(c.ops)}
             for _, c in picked]
    write_library([t for t, _ in picked],
                  [KernelChoice.of_record(records[c.task_key]) for _, c in picked],
                  target, out_dir, metas)
    return [t for t, _ in picked]


def _build_and_time(model_ops, tasks, choices, records, target, out_dir,
                    side_by_side: bool) -> dict:
    """Build the candidates' library, time each kernel through its torch op beside
    torch's operator (calls alternating; or alone without `side_by_side`); returns
    {task key: (kernel's seconds per call, torch's or None)}, medians."""
    from ..measure.settings import MeasureSettings
    from ..torch import load_library
    from .baseline import time_side_by_side, time_torch_cuda
    from .workloads import WORKLOADS

    built = {t.key for t in _write(tasks, choices, records, target, out_dir)}
    library = load_library(out_dir)
    gpu = target.kind == "cuda"
    threads = 0 if gpu else baseline_threads(target)
    out = {}
    for op, t in zip(model_ops.ops, tasks):
        if t.key in built and t.key not in out:
            twin = partial(_call_twin, WORKLOADS[op.workload], dict(op.params))
            funcs = [library.graph_op(t.workload)] + ([twin] if side_by_side else [])
            inputs = _random_inputs(t, "cuda" if gpu else "cpu")
            times = (time_torch_cuda(funcs, inputs, MeasureSettings()) if gpu else
                     time_side_by_side(funcs, inputs, MeasureSettings(), threads))
            out[t.key] = (statistics.median(times[0]),
                          statistics.median(times[1]) if side_by_side else None)
    return out


def _clear_library(out_dir: str) -> None:
    from ..exporting import LIBRARY_NAME, MANIFEST_NAME

    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise UserError(f"-o {out_dir}: exists and is not a directory")
    os.makedirs(out_dir, exist_ok=True)
    for name in (LIBRARY_NAME, MANIFEST_NAME):
        path = os.path.join(out_dir, name)
        if os.path.isfile(path):
            os.remove(path)
