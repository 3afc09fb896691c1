"""A task's expected outputs, computed in a reference worker that is killed when it runs
past its time.

Why a worker: the CPU reference of a large task takes minutes (about 40 at a 4096^3
matmul), and a device reference can crash or hang like any kernel; neither may stall or
take down the tuner. The worker (role ``reference`` in `worker.HANDLERS`) gets one
request, made by `reference_request` from `device.plan`: the runs (a module,
its target, the device) that make the expected outputs, and for the device the check
at a reduced shape with its CPU fallback. What it does is the same for every target:
run the check if there is one, generate the seeded inputs, build and run the chosen
module, write the arrays and ``meta.json`` into the staging folder it was given. The
parent (`store.ensure_reference`) publishes that folder.

A reference that fails, whose worker dies, or that runs past `timeout` raises
`ReferenceFailed`, an InfrastructureError: one line naming the task, where it ran and
why; nothing is recorded for any candidate, and nothing is published.
"""
from __future__ import annotations

import os
import re

import numpy as np

from ...errors import InfrastructureError
from ..worker import WorkerDied, WorkerProcess

# Test-only fault injection: a PrimFunc attribute of the task read by `reference_request`
# and acted on by the worker. "crash" kills the worker with SIGSEGV before it computes;
# "check_mismatch" perturbs the device side of the check. Workloads never set it.
TEST_FAULT_ATTR = "autosched.test_only.reference_fault"
_MESSAGE_CHARS = 600


class ReferenceFailed(InfrastructureError):
    """The expected outputs of a task could not be computed (failed, crashed, timed out).
    Not a candidate's fault: the tuning loop stops with this one line."""


def reference_request(task, target, directory: str, seed: int) -> dict:
    """The worker's request for `task` on `target` (a TargetSpec or None), writing into
    `directory` with inputs seeded by `seed`."""
    from .device import describe, plan

    func, fault = task.func, None
    if func.attrs is not None and TEST_FAULT_ATTR in func.attrs:
        fault = str(func.attrs[TEST_FAULT_ATTR])
        func = func.without_attr(TEST_FAULT_ATTR)
    return {"dir": directory, "seed": seed, "task": describe(task, func),
            **plan(task, target, func), "test_fault": fault}


def where(run: dict) -> str:
    """'on the CPU' / 'on the GPU (cuda, sm_90)': where a run computes."""
    if run["device"] == "cpu":
        return "on the CPU"
    return f"on the GPU ({run['target'].get('kind')}, {run['target'].get('arch', '?')})"


def compute_reference(task, target, directory: str, seed: int, *, timeout: float,
                      log_dir: str) -> dict:
    """Compute the task's reference into `directory` in a fresh worker (logs in
    `log_dir`) given `timeout` seconds after its start-up; the meta it wrote.
    ReferenceFailed when it fails, dies or runs out of time (the worker is killed)."""
    request = reference_request(task, target, directory, seed)
    what = f"reference of {task.name} {where(request['expected'])}"
    retry = "nothing was recorded; fix the cause and rerun"
    try:
        reply = one_reply("reference", request, timeout, log_dir)
    except WorkerDied as e:
        raise ReferenceFailed(f"{what}: the reference worker {e}", retry) from None
    if reply is None:
        raise ReferenceFailed(
            f"{what} did not finish within {timeout:g}s; worker killed",
            "give the workload smaller arguments (--arg K=V) or the reference a longer "
            "timeout (reference_timeout), then rerun")
    if not reply.get("ok"):
        raise ReferenceFailed(f"{what} failed: {_one_line(reply.get('error', '?'))}", retry)
    return reply["meta"]


def one_reply(role: str, request: dict, timeout: float, log_dir: str) -> dict | None:
    """Send `request` to a fresh worker of `role` (logs in `log_dir`) and wait `timeout`
    seconds after its start-up: its reply, or None when it ran out of time. The worker
    is killed either way; WorkerDied, saying how it ended, when it died."""
    worker = WorkerProcess(role, log_dir)
    try:
        worker.wait_ready()
        worker.send(request)
        return worker.wait_reply(timeout)
    except WorkerDied as e:
        raise WorkerDied(_death(str(e), worker.log_path)) from None
    finally:
        worker.kill()


def _death(message: str, log_path: str) -> str:
    """How a worker ended, with what faulthandler wrote of a crash (the fatal error and
    the innermost Python frame) when its log has it."""
    how = message.partition("; log: ")[0]
    if "(SIGKILL)" in how:  # not ours (we kill after a timeout): most often the OOM killer
        return f"{how} (out of memory?)"
    try:
        with open(log_path, errors="replace") as f:
            lines = f.read(1 << 20).splitlines()
    except OSError:
        return how
    fatal = next((i for i, ln in enumerate(lines) if ln.startswith("Fatal Python error")), None)
    if fatal is None:
        return how
    frame = re.search(r'File "([^"]+)", line (\d+) in (\S+)',
                      "\n".join(lines[fatal:fatal + 6]))
    at = f" in {frame[3]} at {os.path.basename(frame[1])}:{frame[2]}" if frame else ""
    return f"{how} ({lines[fatal].strip()}{at})"


def _one_line(text) -> str:
    return " ".join(str(text).split())[:_MESSAGE_CHARS]


# ----------------------------------------------------------------------- worker side


def reference_job(request: dict) -> dict:
    """In the reference worker: check (device only), compute, write; the meta."""
    from ...task import TensorSpec
    from .data import random_inputs, write_reference
    from ..worker import error_text

    fault = request.get("test_fault")
    try:
        if fault == "crash":
            import signal

            os.kill(os.getpid(), signal.SIGSEGV)
        check = run_check(request["check"], request["seed"], fault)
        run = request["expected"] if check is None or check["ok"] else request["fallback"]
        task = request["task"]
        inputs = random_inputs([TensorSpec.from_json(e) for e in task["inputs"]],
                               task["key"], request["seed"])
        expected = run_module(run, inputs, [TensorSpec.from_json(e) for e in task["outputs"]])
        how = {"target": run["target"], "check": check,
               "expected": {"device": run["device"], "schedule": run["schedule"]}}
        meta = write_reference(request["dir"], task, request["seed"], inputs, expected, how)
    except Exception as e:  # any failure is the reference's: reported, never a candidate's
        return {"ok": False, "error": error_text(e)}
    return {"ok": True, "meta": meta}


def run_check(check: dict | None, seed: int, fault: str | None) -> dict | None:
    """Run the check's instance on the device and on the CPU and compare them with the
    tolerance candidates get; what the meta records of it (None: no check)."""
    from ...task import TensorSpec
    from .data import random_inputs

    if check is None:
        return None
    task = check["task"]
    outs = [TensorSpec.from_json(e) for e in task["outputs"]]
    inputs = random_inputs([TensorSpec.from_json(e) for e in task["inputs"]], task["key"], seed)
    want = run_module(check["cpu"], inputs, outs)
    got = run_module(check["device"], inputs, outs)
    if fault == "check_mismatch":
        got[0] = (got[0].astype(np.float64) + 1.0).astype(got[0].dtype)
    message = first_mismatch(outs, got, want, int(task["reduction_extent"]),
                             task.get("accumulate_dtype"))
    return {"task": task["name"], "task_key": task["key"], "args": check["args"],
            "shape": check["shape"], "target": check["device"]["target"],
            "ok": message is None, "message": message}


def first_mismatch(out_specs, got, want, reduction_extent: int,
                   accumulate: str | None = None) -> str | None:
    """None when every output in `got` matches `want` (the CPU's) under the tolerance
    candidates are judged by, else the first output's mismatch in one line."""
    from .check import compare, tolerance_for

    for spec, g, w in zip(out_specs, got, want, strict=True):
        message = compare(spec.name, g, w,
                          tolerance_for(spec.dtype, reduction_extent, w, accumulate))
        if message:
            return message
    return None


def run_module(run: dict, inputs: list[np.ndarray], out_specs) -> list[np.ndarray]:
    """Build a run's module for its target and call it once on `inputs` on its device;
    the outputs (prefilled with `data.poison`, so unwritten elements show)."""
    import tvm

    from .data import poison

    mod = tvm.ir.load_json(run["mod"])
    if run["target"].get("kind") == "cuda":
        from ..cuda.compiler import build_cuda

        exe = build_cuda(mod, run["target"]).executable
    else:
        exe = tvm.compile(mod, target=tvm.target.Target(run["target"]))
    dev = tvm.device(run["device"], 0)
    if run["device"] != "cpu" and not dev.exist:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise RuntimeError(f"no {run['device']} device is visible to this process"
                           + (f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None
                              else ""))
    args = [tvm.runtime.tensor(a, dev) for a in inputs]
    outs = [tvm.runtime.tensor(poison(s), dev) for s in out_specs]
    exe["main"](*args, *outs)
    dev.sync()
    return [o.numpy() for o in outs]
