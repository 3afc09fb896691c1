"""`export-model`: the kernels of a tuned model that beat torch, as a library, and the
decision for every task (model_ops.json); groups of them that slow the whole compiled
step are undone (step_check.py).
"""
from __future__ import annotations

import os
import statistics
from dataclasses import replace

from search_space import SPACE_VERSION

from ..errors import UserError
from ..versions import current_versions
from .step_check import ROUNDS, min_rounds


def export_model(path: str, target_text: str, out_dir: str, db_url: str | None = None,
                 train: bool = False, side_by_side: bool = True, step_check: bool = True,
                 step_rounds: int = ROUNDS, time_all: bool = False) -> tuple[str, list]:
    """Build the library of the kernels that beat torch into `out_dir` and write the
    decision for every task beside it; returns (the choices file, the choices).

    A kernel whose record beats torch's is built, then timed as the compiled model will
    call it (through `torch.ops.autosched.<workload>.graph`, whose Python call costs
    microseconds that the kernel's record does not hold) beside torch's own operator, their repeats
    alternating on the same inputs; it stays in the library only if it beats torch
    there too. The kernels of all outputs of one aten call (a convolution's or a layer
    norm's input, weight and bias gradients) are timed beside torch's one call computing
    them wherever each has a kernel, whatever the records say (`calls_to_time`), and
    stay only together, where their calls sum to less (joint_calls.py).
    (Torch's baseline and the kernel's record were timed at different moments; on a
    machine whose speed drifts only the side-by-side pair is fair.)
    `side_by_side=False` compares the call with torch's baseline record instead.
    `time_all` times every task's kernel so, not only those whose record beats torch's,
    and the call decides for each (a kernel whose record lost can win as called); a
    kernel is left untimed only where another timed task of its workload takes the same
    input shapes (one op dispatches on shapes alone).

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
    from .choice import exclude_split_calls, recorded_choices, write_choices
    from .extract import extract, model_tasks

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
        timed = {c.task_key for c in choices if c.chosen == "autosched"}
        if time_all and not no_gpu:
            timed |= _also_timed(tasks, choices, timed)
        elif side_by_side and not no_gpu:
            timed |= calls_to_time(model_ops, tasks, choices, timed)
        records = {c.task_key: db.best(t.key, target.key, target.hardware_key, versions)
                   for t, c in zip(tasks, choices) if c.task_key in timed}
    if records and no_gpu:  # nothing can be called here: the records decide
        _write(tasks, choices, records, target, out_dir)
    elif records:
        timed = _build_and_time(model_ops, tasks, choices, records, target, out_dir,
                                side_by_side)
        choices = exclude_split_calls(model_ops, [
            replace(c, **timed[c.task_key]) if c.task_key in timed else c
            for c in choices])
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


def _also_timed(tasks, choices, timed: set) -> set:
    """The tasks `time_all` adds to the `timed` ones: every other task with a kernel and
    a baseline, but where a timed task of the same workload takes the same input shapes
    (their kernels could not share one library)."""
    from .choice import dispatch_key

    taken = {dispatch_key(t) for t, c in zip(tasks, choices) if c.task_key in timed}
    added = set()
    for t, c in zip(tasks, choices):
        key = dispatch_key(t)
        if c.task_key in timed or c.task_key in added or c.kernel_s is None \
                or c.torch_s is None or key in taken:
            continue
        taken.add(key)
        added.add(c.task_key)
    return added


def calls_to_time(model_ops, tasks, choices, timed: set) -> set:
    """The tasks of every aten call of several outputs (joint_calls.py) whose outputs all
    have a kernel, timed beside torch's one call whatever the records say: the kernels'
    records and the call's baseline were timed at different moments (and the kernels
    one by one, beside torch's single-output twins), so only the side-by-side pair
    decides fairly. A call is left out where one of its tasks would share a torch op's
    dispatch key with a task already timed (`_also_timed`)."""
    from .choice import dispatch_key
    from .joint_calls import sibling_groups

    taken = {dispatch_key(t): t.key for t, c in zip(tasks, choices) if c.task_key in timed}
    added = set()
    for group in sibling_groups(model_ops):
        if any(choices[i].kernel_s is None or choices[i].torch_s is None for i in group):
            continue
        keys = [dispatch_key(tasks[i]) for i in group]
        if any(taken.get(k, tasks[i].key) != tasks[i].key for k, i in zip(keys, group)) \
                or len(set(keys)) < len(keys):
            continue
        for k, i in zip(keys, group):
            taken[k] = tasks[i].key
            added.add(tasks[i].key)
    return added - timed


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
    from .baseline import baseline_threads
    from .choice import exclude_split_calls
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


def _write(tasks, choices, records, target, out_dir) -> list:
    """The library of the tasks in `records`; returns those tasks."""
    from ..exporting import KernelChoice, write_library

    picked = [(t, c) for t, c in zip(tasks, choices) if c.task_key in records]
    metas = [{"torch_latency_s": c.torch_s, "baseline_record_id": c.baseline_record_id,
              "call_latency_s": c.call_s, "torch_call_latency_s": c.torch_call_s,
              "joint_call_latency_s": c.joint_call_s,
              "joint_torch_call_latency_s": c.joint_torch_call_s,
              "joint_kernel_latency_s": c.joint_kernel_s,
              "joint_torch_latency_s": c.joint_torch_s,
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
    {task key: the OpChoice fields timed}, medians. The kernels of all outputs of one
    aten call (joint_calls.py) are timed beside torch's one call computing them
    (`joint_call_s`, `joint_torch_call_s`; without `side_by_side` their sum is compared
    with the call's baseline record), each kernel's own call in `call_s`."""
    from functools import partial

    from ..torch import load_library
    from .baseline import random_inputs, twin_call
    from .joint_calls import joint_call, sibling_groups

    built = {t.key for t in _write(tasks, choices, records, target, out_dir)}
    library = load_library(out_dir)
    device = "cuda" if target.kind == "cuda" else "cpu"

    def inputs_of(t):
        return random_inputs([(s.shape, s.dtype) for s in t.inputs], device)

    out = {}
    # without `side_by_side` a call's kernels are timed together only where the records
    # hold torch's one call to compare their sum with
    groups = [g for g in sibling_groups(model_ops) if all(tasks[i].key in built for i in g)
              and (side_by_side or choices[g[0]].joint_torch_s is not None)]
    for group in groups:
        members = [(tasks[i], inputs_of(tasks[i])) for i in group]
        peer = [joint_call([(t.workload, dict(model_ops.ops[i].params), ins)
                            for i, (t, ins) in zip(group, members)])] if side_by_side else []
        times = _time(target, [partial(library.graph_op(t.workload), *ins)
                               for t, ins in members] + peer)
        calls = [statistics.median(x) for x in times]
        for (t, _), call in zip(members, calls):
            out[t.key] = {"call_s": call, "torch_call_s": None,
                          "joint_call_s": sum(calls[:len(members)]),
                          "joint_torch_call_s": calls[-1] if side_by_side else None}
    for op, t in zip(model_ops.ops, tasks):
        if t.key in built and t.key not in out:
            inputs = inputs_of(t)
            funcs = [library.graph_op(t.workload)] + \
                ([twin_call(op.workload, dict(op.params))] if side_by_side else [])
            times = _time(target, [partial(f, *inputs) for f in funcs])
            out[t.key] = {"call_s": statistics.median(times[0]),
                          "torch_call_s": statistics.median(times[1]) if side_by_side
                          else None,  # timed alone: no pair of its call decides
                          "joint_call_s": None, "joint_torch_call_s": None,
                          "joint_kernel_s": None, "joint_torch_s": None}
    return out


def _time(target, calls) -> list[list[float]]:
    """Latencies of the callables `calls` (no arguments), their calls alternating: on
    the GPU with the kernels' CUDA harness, on the CPU with torch on the kernels' thread
    count."""
    from ..measure.settings import MeasureSettings
    from .baseline import baseline_threads, time_side_by_side, time_torch_cuda

    if target.kind == "cuda":
        return time_torch_cuda(calls, [], MeasureSettings())
    return time_side_by_side(calls, [], MeasureSettings(), baseline_threads(target))


def _clear_library(out_dir: str) -> None:
    from ..exporting import LIBRARY_NAME, MANIFEST_NAME

    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise UserError(f"-o {out_dir}: exists and is not a directory")
    os.makedirs(out_dir, exist_ok=True)
    for name in (LIBRARY_NAME, MANIFEST_NAME):
        path = os.path.join(out_dir, name)
        if os.path.isfile(path):
            os.remove(path)
