"""Where a task's expected outputs are computed, and the check that lets a device's
outputs be trusted.

- On the CPU (an ``llvm`` target, no target, or a CUDA target whose GPU is not on this
  machine, as for an RPC server or a dry run): the unscheduled function built for the
  generic CPU. Correct by construction, and slow at large shapes (about 40 minutes for
  a 4096^3 matmul).
- On the device (a CUDA target with its GPU here): `search_space.cuda.reference_schedule`
  of the function, every block its own kernel with its spatial loops over blocks and
  threads, run on the GPU (milliseconds). Its outputs are trusted only after the same
  schedule of a *reduced instance* of the workload (every integer argument above
  `SMALL_EXTENT` lowered to it) matched that instance's CPU outputs under the tolerance
  candidates are judged by. When no reduced instance can be made (a task without its
  workload definition, a call that fails at the small shape, or one that builds other
  blocks there), the check runs at the task's own shape. When the check fails, the CPU
  computes the expected outputs after all, and ``meta.json`` says why.

`plan` says which, as runs (module, target, device) for the reference worker
(`job.py`), which does the same for every target.
"""
from __future__ import annotations

from .data import REFERENCE_TARGET, longest_reduction

SMALL_EXTENT = 64  # a power of two keeps the divisibility most workloads ask for
SCHEDULES = ("unscheduled", "reference_schedule")


def run_spec(mod, target: dict, device: str, schedule: str) -> dict:
    """One computation for the reference worker: `mod` built for `target` (a config
    dict) and run on `device` ("cpu" / "cuda"); `schedule` names how it was made."""
    import tvm

    assert schedule in SCHEDULES
    return {"mod": tvm.ir.save_json(mod), "target": dict(target), "device": device,
            "schedule": schedule}


def cpu_run(func) -> dict:
    """The CPU reference of a PrimFunc: unscheduled, for the generic CPU."""
    import tvm

    return run_spec(tvm.IRModule({"main": func}), REFERENCE_TARGET, "cpu", "unscheduled")


def device_run(func, target) -> dict:
    """The device reference of a PrimFunc on a cuda TargetSpec: the plain GPU schedule."""
    return run_spec(device_module(func, target), target.config, "cuda", "reference_schedule")


def device_module(func, target):
    """`search_space.cuda.reference_schedule` of a PrimFunc for a cuda TargetSpec: every
    block its own kernel, its spatial loops over blocks and threads."""
    import tvm

    from search_space.cuda import GpuLimits, reference_schedule

    return reference_schedule(tvm.IRModule({"main": func}), GpuLimits.of(target))


def on_device(target) -> bool:
    """Whether the expected outputs are computed on the target's device (here)."""
    return target is not None and target.kind == "cuda" and target.has_local_device


def describe(task, func=None) -> dict:
    """What the worker needs to know of a task: key, name, argument specs, and the
    longest reduction's extent (the tolerance grows with it) and accumulation dtype."""
    extent, accumulate = longest_reduction(task.func if func is None else func)
    return {"key": task.key, "name": task.name,
            "inputs": [s.to_json() for s in task.inputs],
            "outputs": [s.to_json() for s in task.outputs],
            "reduction_extent": extent, "accumulate_dtype": accumulate}


def plan(task, target, func=None) -> dict:
    """The runs that make the task's expected outputs: ``expected``; for the device,
    ``check`` (the reduced instance, run on the device and on the CPU) and ``fallback``
    (the CPU run used when the check fails). `func` replaces the task's function (the
    same function without test-only attributes)."""
    func = task.func if func is None else func
    if not on_device(target):
        return {"expected": cpu_run(func), "check": None, "fallback": None}
    small = reduced_task(task)
    shape = "reduced"
    if small is None:
        small, shape = task, "full"
    small_func = func if small is task else small.func
    check = {"task": describe(small, small_func), "args": dict(small.args), "shape": shape,
             "device": device_run(small_func, target), "cpu": cpu_run(small_func)}
    return {"expected": device_run(func, target), "check": check, "fallback": cpu_run(func)}


def reduced_args(args: dict) -> dict:
    """`args` with every integer above SMALL_EXTENT lowered to it (booleans, floats,
    strings and small integers unchanged)."""
    def small(v):
        if isinstance(v, int) and not isinstance(v, bool) and v > SMALL_EXTENT:
            return SMALL_EXTENT
        return v

    return {k: small(v) for k, v in args.items()}


def reduced_task(task):
    """The task's workload at reduced arguments, or None when there is none smaller or
    it cannot stand in for the task (no definition, the call fails, other blocks)."""
    from ...errors import UserError
    from ...workload import make_task

    args = reduced_args(task.args)
    if task.definition is None or args == dict(task.args):
        return None
    try:
        small = make_task(task.definition, args)
    except UserError:
        return None
    return small if same_structure(task, small) else None


def same_structure(a, b) -> bool:
    """Whether two tasks have the same arguments (names, ranks, dtypes) and the same
    blocks in the same order, so that one checks the other's schedule."""
    def args(t):
        return [(s.name, len(s.shape), s.dtype) for s in t.arg_specs]

    return args(a) == args(b) and block_names(a.func) == block_names(b.func)


def block_names(func) -> list[str]:
    """Names of the blocks of a PrimFunc, outer ones first, in program order."""
    import tvm
    from tvm import s_tir

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    names, stack = [], list(reversed(sch.get_child_blocks(sch.get_sblock("root"))))
    while stack:
        block = stack.pop()
        names.append(str(sch.get(block).name_hint))
        stack.extend(reversed(sch.get_child_blocks(block)))
    return names
