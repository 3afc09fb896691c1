"""Per operator of a model: torch's recorded time, the best kernel's, and which runs.

A kernel is chosen only where its recorded latency beats torch's recorded latency for the
same task on the same target and machine, and, once `export-model` has timed the kernel
as the model calls it, where that call beats torch's operator timed beside it (repeats
alternating, same inputs); without a kernel record or without a baseline torch runs
(nothing is assumed). Export then times the whole compiled step with the chosen kernels
against inductor alone and leaves to torch the groups of them that slow it
(`step_check.py`; its measurements are the `step_check` entry of `model_ops.json`, absent
where no check ran). The table is what `tune-model` prints, what
`export-model` writes beside the library (`model_ops.json`) and what the backend obeys.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace

CHOICES_NAME = "model_ops.json"
CHOICES_FORMAT = 1
# why a faster kernel stays unused: its aten call has another output that torch computes
SPLIT_CALL = "another output of the operator stays torch"
# why a faster kernel stays unused: with its group (step_check.py) the whole compiled step
# was not faster than inductor alone beyond noise
STEP_SLOWER = "slower in the whole compiled step"


def shape_text(params: dict) -> str:
    """A task's shape parameters as the tables and the backend's decisions show them."""
    return ",".join(f"{k}={v}" for k, v in params.items() if k != "dtype")


@dataclass(frozen=True)
class OpChoice:
    """One task of a model: where it comes from, both latencies and the decision."""

    workload: str
    params: dict
    count: int
    ops: dict            # aten operator -> calls
    task_key: str
    torch_s: float | None
    kernel_s: float | None
    baseline_record_id: int | None
    kernel_record_id: int | None
    # the kernel called as torch.ops.autosched.* from Python (its recorded latency plus
    # the cost of the call), timed at export; None before
    call_s: float | None = None
    # torch's operator timed at export beside that call, calls alternating (the two
    # compared under the same machine conditions); None before
    torch_call_s: float | None = None
    # why torch runs although the kernel is faster (say, another task of the workload
    # takes the same input shapes, and one op cannot dispatch between them)
    excluded: str = ""
    # where one aten call computes this output with others (joint_calls.py), the pair
    # that decides for the whole call, the same on every task of it: torch's one call
    # computing all its outputs and the kernels of them all one after the other, as
    # recorded (the call's baseline record, the sum of the kernels' records; before
    # export) and as called at export (the sum of the kernels' calls, and torch's one
    # call timed beside them, or None where the records mode compares the calls with
    # the call's record). None where unknown
    joint_call_s: float | None = None
    joint_torch_call_s: float | None = None
    joint_kernel_s: float | None = None
    joint_torch_s: float | None = None

    @property
    def joint(self) -> bool:
        """Whether the choice compares the kernels of all outputs of its aten call with
        torch's one call computing them."""
        return self.joint_torch_s is not None and self.joint_kernel_s is not None \
            or self.joint_torch_call_s is not None and self.joint_call_s is not None

    @property
    def kernel_cost_s(self) -> float | None:
        """What running the kernel in the model costs, as well as it is known (for a
        joint choice: the kernels of all outputs of its call)."""
        if self.joint:
            return _known(self.joint_call_s, self.joint_kernel_s)
        return _known(self.call_s, self.kernel_s)

    @property
    def torch_cost_s(self) -> float | None:
        """torch's time to compare the kernel's with: timed beside its call when known
        (for a joint choice: torch's one call computing all those outputs)."""
        if self.joint:
            return _known(self.joint_torch_call_s, self.joint_torch_s)
        return _known(self.torch_call_s, self.torch_s)

    @property
    def chosen(self) -> str:
        if self.kernel_s is None or self.torch_s is None or self.excluded:
            return "torch"
        return "autosched" if self.kernel_cost_s < self.torch_cost_s else "torch"

    @property
    def reason(self) -> str:
        if self.kernel_s is None:
            return "no kernel recorded"
        if self.torch_s is None:
            return "no torch baseline recorded"
        if self.excluded:
            return self.excluded
        speedup = self.torch_cost_s / self.kernel_cost_s if self.kernel_cost_s else math.inf
        if self.joint:
            how = self.decided_by.split(",")[0]
            if self.chosen == "autosched":
                return (f"kernels of all outputs of the call faster ({speedup:.2f}x "
                        f"torch's one call, {how})")
            return (f"torch's one call of all outputs faster (kernels at "
                    f"{speedup:.2f}x, {how})")
        how = " side by side" if self.torch_call_s is not None else ""
        if self.chosen == "autosched":
            return f"kernel faster ({speedup:.2f}x torch{how})"
        return f"torch {'timed' if how else 'recorded'} faster (kernel at {speedup:.2f}x{how})"

    @property
    def decided_by(self) -> str:
        """How the choice was made: the kernel's call timed beside torch's operator, the
        call against torch's baseline record, or the two records alone (export on a
        host that cannot run the kernels, or before export)."""
        if self.joint:
            return _how(self.joint_call_s, self.joint_torch_call_s) \
                + ", with the other outputs of its call"
        return _how(self.call_s, self.torch_call_s)

    @property
    def shape(self) -> str:
        return shape_text(self.params)

    def to_json(self) -> dict:
        return {"workload": self.workload, "params": dict(self.params), "count": self.count,
                "ops": dict(self.ops), "task_key": self.task_key, "torch_s": self.torch_s,
                "kernel_s": self.kernel_s, "baseline_record_id": self.baseline_record_id,
                "kernel_record_id": self.kernel_record_id, "call_s": self.call_s,
                "torch_call_s": self.torch_call_s, "excluded": self.excluded,
                "joint_call_s": self.joint_call_s,
                "joint_torch_call_s": self.joint_torch_call_s,
                "joint_kernel_s": self.joint_kernel_s, "joint_torch_s": self.joint_torch_s,
                "chosen": self.chosen, "reason": self.reason, "decided_by": self.decided_by}

    @staticmethod
    def from_json(d: dict) -> OpChoice:
        return OpChoice(d["workload"], dict(d["params"]), int(d["count"]), dict(d["ops"]),
                        d["task_key"], d.get("torch_s"), d.get("kernel_s"),
                        d.get("baseline_record_id"), d.get("kernel_record_id"),
                        d.get("call_s"), d.get("torch_call_s"), d.get("excluded", ""),
                        d.get("joint_call_s"), d.get("joint_torch_call_s"),
                        d.get("joint_kernel_s"), d.get("joint_torch_s"))


def _known(timed, recorded):
    return timed if timed is not None else recorded


def _how(call_s, torch_call_s) -> str:
    if torch_call_s is not None:
        return "side by side"
    return "call against baseline record" if call_s is not None else "records"


def op_choices(model_ops, tasks, db, target, versions, threads: int) -> list[OpChoice]:
    """The decision for every task of `model_ops` from what `db` holds; the tasks of one
    aten call (joint_calls.py) by their kernels' records summed against the baseline of
    torch's one call, where every one has a kernel and that baseline exists."""
    from .baseline import joint_outputs, lookup
    from .joint_calls import sibling_groups

    out = []
    for op, task in zip(model_ops.ops, tasks):
        best = db.best(task.key, target.key, target.hardware_key, versions)
        base = lookup(db, task, target, versions, threads)
        out.append(OpChoice(op.workload, dict(op.params), op.count, dict(op.ops), task.key,
                            base.latency_s if base else None, best.latency if best else None,
                            base.record_id if base else None, best.id if best else None))
    for group in sibling_groups(model_ops):
        first, outputs = joint_outputs([tasks[i] for i in group])
        base = lookup(db, first, target, versions, threads, outputs)
        if base is None or any(out[i].kernel_s is None for i in group):
            continue
        kernels = sum(out[i].kernel_s for i in group)
        for i in group:
            out[i] = replace(out[i], joint_kernel_s=kernels, joint_torch_s=base.latency_s)
    return out


def choices_table(choices: list[OpChoice]) -> str:
    """op, shape, count, torch ms, autosched ms (records), the kernel as called and
    torch beside it (export), chosen — one row per task. A joint choice shows, where
    known, the kernels of all outputs of its aten call and torch's one call, marked
    "(call)"."""
    from ..tables import format_table

    def ms(s):
        return "-" if s is None else f"{s * 1e3:.4f}"

    def times(c):  # records, then as called; a joint pair: all outputs of the aten call
        def pair(joint, single):
            return f"{ms(joint)} (call)" if c.joint and joint is not None else ms(single)

        return (pair(c.joint_torch_s, c.torch_s), pair(c.joint_kernel_s, c.kernel_s),
                pair(c.joint_call_s, c.call_s), pair(c.joint_torch_call_s, c.torch_call_s))

    rows = [(",".join(c.ops), c.workload.removeprefix("aten_"), c.shape, str(c.count),
             *times(c), c.chosen) for c in choices]
    return format_table(("op", "workload", "shape", "count", "torch ms", "autosched ms",
                         "as called ms", "torch beside ms", "chosen"), rows, right=5)


def write_choices(out_dir: str, model_path: str, train: bool, choices,
                  step_check: dict | None = None, notes: dict | None = None) -> str:
    """model_ops.json in `out_dir`: the decision for every task, the measurements of
    the step check (`StepCheck.to_json()`) where one ran, and `notes` (strings: how a
    CUDA export decided where it could not time, `decided_on`, and why the step check
    did not run, `step_check_skipped`)."""
    path = os.path.join(out_dir, CHOICES_NAME)
    doc = {"format": CHOICES_FORMAT, "model": os.path.abspath(model_path), "train": train,
           "ops": [c.to_json() for c in choices]}
    if step_check is not None:
        doc["step_check"] = step_check
    doc.update(notes or {})
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    return path


def _read(out_dir) -> dict | None:
    path = os.path.join(str(out_dir), CHOICES_NAME)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if doc.get("format") != CHOICES_FORMAT:
        from ..errors import UserError

        raise UserError(f"{path}: format {doc.get('format')!r}; this autosched reads "
                        f"{CHOICES_FORMAT} (re-run `autosched export-model`)")
    return doc


def read_choices(out_dir) -> list[OpChoice] | None:
    """The choices a library directory was exported with; None if it has none."""
    doc = _read(out_dir)
    return None if doc is None else [OpChoice.from_json(d) for d in doc["ops"]]


def read_step_check(out_dir) -> dict | None:
    """The step check's measurements a library directory was exported with (the
    `step_check` entry of model_ops.json); None where no check ran."""
    doc = _read(out_dir)
    return None if doc is None else doc.get("step_check")


def recorded_choices(model_ops, tasks, db, target, versions) -> list:
    """The decision for every task from the database's records (before export times the
    calls), with the tasks the backend could not run on a kernel left to torch."""
    from .baseline import baseline_threads

    return exclude_split_calls(model_ops, exclude_ambiguous(tasks, op_choices(
        model_ops, tasks, db, target, versions, baseline_threads(target))))


def dispatch_key(task) -> tuple:
    """What `torch.ops.autosched.<workload>` dispatches on: the workload and its input
    shapes and dtypes (two tasks with equal keys cannot share one library)."""
    return task.workload, tuple((s.shape, s.dtype) for s in task.inputs)


def exclude_ambiguous(tasks, choices) -> list:
    """Of the chosen tasks of one workload that take the same input shapes (they differ
    in another parameter, such as a layer norm's eps), keep the one that saves the most
    time per step: `torch.ops.autosched.<workload>` dispatches on shapes alone."""
    best: dict[tuple, int] = {}
    for i, (t, c) in enumerate(zip(tasks, choices)):
        if c.chosen != "autosched":
            continue
        key = dispatch_key(t)

        def saving(j):
            return choices[j].count * (choices[j].torch_cost_s - choices[j].kernel_cost_s)

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
