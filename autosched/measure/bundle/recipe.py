"""What a bundle carries for a task whose reference data is too large to travel.

A 4096^3 float32 matmul has 192 MiB of inputs and outputs, and its expected outputs take
about 40 minutes on this machine's CPU. Above `MeasureSettings.bundle_reference_mib`,
the bundle therefore carries, in `DIR/recipes/<task key>/`:

```
recipe.json   the task as the reference worker describes it (key, name, argument
              specs, reduction extent), the seed of its inputs, the target and
              schedule of the reference kernels
kernel.so     the reference kernel: `search_space.cuda.reference_schedule` of the task
              for a cuda target, the unscheduled function built for the generic CPU
              otherwise (what the CPU reference runs), built like every candidate
check.so      the same kernel for the reduced instance (`reference.device.reduced_task`)
check/        that instance's CPU reference (reference/data.py's layout: small arrays)
```

The measuring machine (target_reference.py) runs `check.so` on `check/` as it runs a
candidate, and only when it passes regenerates the inputs (`reference.data.random_inputs`
is deterministic numpy) and runs `kernel.so` once to make `DIR/reference/<task key>/`.
A task that has no reduced instance ships its arrays whatever their size: without one,
nothing small can vouch for the kernel.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil

from ..reference.data import REFERENCE_TARGET, np_dtype
from ..reference.store import ensure_reference
from ..settings import MeasureInput
from .format import RECIPES, read_json

RECIPE = "recipe.json"
RECIPE_VERSION = 1
KERNEL, CHECK_KERNEL, CHECK = "kernel.so", "check.so", "check"
SEED = 0  # the seed of every reference a bundle carries


def reference_bytes(task) -> int:
    """What the task's reference data holds: its inputs and outputs, in bytes."""
    total = 0
    for spec in (*task.inputs, *task.outputs):
        count = 1
        for extent in spec.shape:
            count *= int(extent)
        total += count * np_dtype(spec.dtype).itemsize
    return total


def kernel_target(target):
    """The TargetSpec the reference kernels are built for: the task's own for cuda, the
    generic CPU (`reference.REFERENCE_TARGET`) otherwise, as the CPU reference is."""
    if target.kind == "cuda":
        return target
    return dataclasses.replace(target, config=dict(REFERENCE_TARGET))


def kernel_input(task, target) -> MeasureInput:
    """The reference kernel of `task` as a build input for `kernel_target(target)`."""
    import tvm

    from ..reference.device import device_module

    built_for = kernel_target(target)
    mod = (device_module(task.func, built_for) if built_for.kind == "cuda"
           else tvm.IRModule({"main": task.func}))
    return MeasureInput(task, built_for, None, mod)


def recipe_of(task, small, target) -> dict:
    """The recipe.json of `task` with the reduced instance `small` on `target`."""
    from ..reference.device import describe

    built_for = kernel_target(target)
    schedule = "reference_schedule" if built_for.kind == "cuda" else "unscheduled"
    return {"version": RECIPE_VERSION, "task": describe(task), "seed": SEED,
            "target": built_for.config, "schedule": schedule, "kernel": KERNEL,
            "check": {"task": describe(small), "args": dict(small.args), "kernel": CHECK_KERNEL,
                      "reference": CHECK}}


def recipe_dir(bundle: str, task_key: str) -> str:
    return os.path.join(bundle, RECIPES, task_key)


def read_recipe(folder: str) -> dict | None:
    """The recipe in `folder` when it is complete (its kernels and check data are
    there), else None."""
    recipe = read_json(os.path.join(folder, RECIPE))
    if recipe is None or recipe.get("version") != RECIPE_VERSION:
        return None
    check = recipe["check"]
    needed = [recipe["kernel"], check["kernel"], os.path.join(check["reference"], "meta.json")]
    return recipe if all(os.path.isfile(os.path.join(folder, f)) for f in needed) else None


def write_recipe(bundle: str, task, small, target, kernels, work_dir: str,
                 scratch_dir: str | None) -> dict:
    """Put the recipe of `task` into the bundle: `kernels` are the built paths of its
    reference kernel and of the reduced instance's; the reduced instance's CPU reference
    is computed (or found) under `work_dir` by the reference worker. The folder appears
    by a rename, so a killed run leaves no half recipe."""
    check = ensure_reference(small, work_dir, SEED, scratch_dir=scratch_dir)
    recipe = recipe_of(task, small, target)
    final = recipe_dir(bundle, task.key)
    tmp = f"{final}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    shutil.move(kernels[0], os.path.join(tmp, KERNEL))
    shutil.move(kernels[1], os.path.join(tmp, CHECK_KERNEL))
    shutil.copytree(check.directory, os.path.join(tmp, CHECK))
    with open(os.path.join(tmp, RECIPE), "w") as f:
        json.dump(recipe, f, indent=1, sort_keys=True)
    shutil.rmtree(final, ignore_errors=True)  # an older recipe: no round pending needs it
    os.rename(tmp, final)
    return recipe
