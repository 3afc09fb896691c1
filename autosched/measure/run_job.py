"""What a run worker does with one built candidate on this machine: load the library,
run it on the task's reference inputs, check every output (and that no input was
overwritten) with the comparison rule of `check.compare`, then time it.

The RPC session worker (`rpc_session.py`) uses the same reference loading and output
check on the data it copies back from a server, so both runners judge alike.
"""
from __future__ import annotations

import os

# (reference directory, meta.json mtime) -> (specs, inputs, expected, tolerances):
# consecutive candidates of one task reuse the arrays; a rewritten reference is reread.
_LOADED: dict[tuple[str, int], tuple] = {}
_LOADED_MAX = 4


def load_reference_arrays(directory: str) -> tuple:
    """(specs, inputs, expected, tolerances) of a reference directory, cached."""
    from .reference import load_reference

    key = (directory, os.stat(os.path.join(directory, "meta.json")).st_mtime_ns)
    if key not in _LOADED:
        ref = load_reference(directory)
        if ref is None:
            raise FileNotFoundError(f"no complete reference in {directory}")
        inputs, expected = ref.arrays()
        _LOADED[key] = (ref.specs(), inputs, expected, ref.tolerances())
        while len(_LOADED) > _LOADED_MAX:
            _LOADED.pop(next(iter(_LOADED)))
    return _LOADED[key]


def failure_reply(kind: str, msg: str) -> dict:
    """The reply a worker sends for a failure of the candidate."""
    return {"ok": False, "kind": kind, "error": msg}


def check_outputs(specs, inputs, args, outs, expected, tols) -> str | None:
    """None when every output matches and no input changed, else what went wrong."""
    from .check import compare

    for spec, out, exp, tol in zip(specs[1], outs, expected, tols):
        msg = compare(spec.name, out.numpy(), exp, tol)
        if msg:
            return msg
    for spec, original, arg in zip(specs[0], inputs, args):
        if arg.numpy().tobytes() != original.tobytes():
            return f"input {spec.name} was modified by the kernel"
    return None


def run_job(request: dict) -> dict:
    """In the run worker: load, run, check against the reference, time."""
    import tvm

    from .reference import poison
    from .worker import error_text

    try:
        specs, inputs, expected, tols = load_reference_arrays(request["reference"])
        dev = tvm.device(request["device"], 0)
        lib = tvm.runtime.load_module(request["lib"])
        args = [tvm.runtime.tensor(a, dev) for a in inputs]
        outs = [tvm.runtime.tensor(poison(s), dev) for s in specs[1]]
        for _ in range(max(1, request["warmup"])):
            lib["main"](*args, *outs)
        dev.sync()
    except Exception as e:
        return failure_reply("run_error", error_text(e))
    if request["check"]:
        msg = check_outputs(specs, inputs, args, outs, expected, tols)
        if msg:
            return failure_reply("wrong_answer", msg)
    try:
        evaluator = lib.time_evaluator("main", dev, number=request["number"],
                                       repeat=request["repeat"],
                                       min_repeat_ms=request["min_repeat_ms"])
        latencies = list(evaluator(*args, *outs).results)
    except Exception as e:
        return failure_reply("run_error", error_text(e))
    return {"ok": True, "latencies": latencies}
