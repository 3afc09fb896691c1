"""On the measuring machine: the reference data of a task that came as a recipe
(recipe.py), made before its candidates are judged.

For each such task with a candidate to run, `make_reference`:

1. keeps `DIR/reference/<task key>/` when it is complete and of this task and seed (a
   measurement that was killed after making it does not make it again);
2. runs the reduced instance's reference kernel (`check.so`) on its CPU inputs and
   judges it against its CPU outputs exactly as a candidate is judged (a run request of
   the run worker, `run_job.run_request`, one timed call);
3. only when that passes, runs the full-size reference kernel once in a fresh worker
   (role ``bundle_reference``, `reference_kernel_job`, killed after the round's
   `reference_timeout`) on the inputs `reference.data.random_inputs` regenerates from the
   recipe's task key and seed, and writes inputs, outputs and their tolerances
   (`reference.data.write_reference`) into a private folder that is renamed into place.

A task whose check fails, or whose reference kernel fails, crashes or hangs, cannot
have its candidates judged: `make_reference` returns why (one line), the measurer
records nothing for that task and ends with exit 1 after measuring the other tasks,
so the candidates stay pending; nothing about them is known.
"""
from __future__ import annotations

import os
import shutil
import time

from ...errors import InfrastructureError
from ..reference.data import load_reference
from ..reference.job import one_reply
from ..run_job import run_request
from ..worker import WorkerDied
from .format import REFERENCE
from .recipe import read_recipe

# One untimed and one timed call of the reduced kernel: the check only needs its outputs.
CHECK_SETTINGS = {"warmup": 1, "number": 1, "repeat": 1, "min_repeat_ms": 0,
                  "check_correctness": True}


def make_reference(runner, manifest: dict, directory: str, task_key: str,
                   log_dir: str) -> tuple[str | None, str]:
    """(None, what was done) when `DIR/reference/<task key>/` holds the task's
    reference, else (why its candidates cannot be judged, ""). `runner` runs a request
    as a candidate is run (`bundle._RoundRunner`); InfrastructureError when this
    machine cannot run anything."""
    task = manifest["tasks"][task_key]
    final = os.path.abspath(os.path.join(directory, task["reference"]))
    folder = os.path.abspath(os.path.join(directory, task["recipe"]))  # workers get paths
    recipe = read_recipe(folder)
    if recipe is None:
        return f"its recipe in {task['recipe']} is missing or incomplete", ""
    if _complete(final, recipe):
        return None, "made earlier on this machine"
    check = recipe["check"]
    shape = f"the reduced shape {check['task']['name']}"
    result = runner.run(run_request(
        dict(manifest["settings"], **CHECK_SETTINGS), os.path.join(folder, check["kernel"]),
        os.path.join(folder, check["reference"]), manifest["device"]))
    if not result.ok:
        return (f"its reference kernel is wrong at {shape}: "
                f"{result.error_kind}: {result.error_msg}"), ""
    start = time.monotonic()
    passed = {"task": check["task"]["name"], "task_key": check["task"]["key"],
              "args": check["args"], "shape": "reduced", "target": recipe["target"],
              "ok": True, "message": None}
    why = _run_kernel(manifest, recipe, os.path.join(folder, recipe["kernel"]), final,
                      log_dir, passed)
    if why is not None:
        return why, ""
    return None, (f"checked at {shape}, then computed by its reference kernel in "
                  f"{time.monotonic() - start:.1f}s")


def _complete(folder: str, recipe: dict) -> bool:
    ref = load_reference(folder)
    return (ref is not None and ref.meta["task_key"] == recipe["task"]["key"]
            and ref.meta["seed"] == recipe["seed"]
            and ref.meta.get("expected", {}).get("schedule") == recipe["schedule"])


def _run_kernel(manifest: dict, recipe: dict, kernel: str, final: str, log_dir: str,
                check: dict) -> str | None:
    """Run the reference kernel into a private folder and rename it to `final`; why
    not (one line) when it failed, crashed or ran out of time."""
    tmp = os.path.join(os.path.dirname(final), f".tmp-{os.path.basename(final)}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    timeout = float(manifest["settings"]["reference_timeout"])
    request = {"lib": kernel, "dir": tmp, "task": recipe["task"], "seed": recipe["seed"],
               "device": manifest["device"],
               "how": {"target": recipe["target"], "check": check,
                       "expected": {"device": manifest["device"],
                                    "schedule": recipe["schedule"]}}}
    try:
        reply = one_reply("bundle_reference", request, timeout, log_dir)
    except WorkerDied as e:
        reply = {"ok": False, "error": f"the reference worker {e}"}
    if reply is None:
        reply = {"ok": False, "error": f"it did not finish within {timeout:g}s; worker killed"}
    if reply.get("infrastructure"):
        shutil.rmtree(tmp, ignore_errors=True)
        raise InfrastructureError(reply["cause"], reply["remedy"])
    if not reply["ok"]:
        shutil.rmtree(tmp, ignore_errors=True)
        return f"its reference kernel failed: {' '.join(str(reply['error']).split())[:600]}"
    shutil.rmtree(final, ignore_errors=True)  # a partial or outdated one
    os.rename(tmp, final)
    return None


def remove_partial_references(directory: str) -> None:
    """Delete what a killed measurement left of a reference it was making."""
    folder = os.path.join(directory, REFERENCE)
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        if name.startswith(".tmp-"):
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)


# ----------------------------------------------------------------------- worker side


def reference_kernel_job(request: dict) -> dict:
    """In the ``bundle_reference`` worker: regenerate the task's inputs, run the
    reference kernel once on them, write the reference folder; ``{"ok": true}``, or the
    failure (``infrastructure`` when this machine cannot run kernels at all)."""
    import tvm_ffi

    from ...task import TensorSpec
    from ..device_arrays import sync, to_device, to_host
    from ..reference.data import np_dtype, poison, random_inputs, write_reference
    from ..run_job import infrastructure_reply, open_device
    from ..worker import error_text

    task = request["task"]
    try:
        dev = open_device(request["device"])
    except InfrastructureError as e:
        return infrastructure_reply(e)
    try:
        in_specs = [TensorSpec.from_json(e) for e in task["inputs"]]
        out_specs = [TensorSpec.from_json(e) for e in task["outputs"]]
        inputs = random_inputs(in_specs, task["key"], request["seed"])
        func = tvm_ffi.load_module(request["lib"])["main"]
        args = [to_device(a, s.dtype, dev) for a, s in zip(inputs, in_specs)]
        outs = [to_device(poison(s), s.dtype, dev) for s in out_specs]
        func(*args, *outs)
        sync(dev)
        expected = [to_host(t, s.shape, np_dtype(s.dtype)) for t, s in zip(outs, out_specs)]
        write_reference(request["dir"], task, request["seed"], inputs, expected,
                        request["how"])
    except Exception as e:  # the reference kernel's failure: no candidate's
        return {"ok": False, "error": error_text(e)}
    return {"ok": True}
