"""One candidate on one RPC server, inside an `rpc` session worker (see `worker.py`).

The runner asks the tracker for a free server and hands its address to this worker,
which opens a TVM RPC session with a server-side timeout, uploads the candidate's
`.so`, loads it, uploads the task's reference inputs as tensors (outputs prefilled with
poison), runs it once, copies the outputs back and checks them here with the same rule
as the local runner (`run_job.check_outputs`), then times it with the
remote `time_evaluator`. Only the library and tensors cross the wire.

Right after connecting, before anything of the candidate runs, it reads the server's
hardware (`read_hardware`) and every reply that reached the server carries it, so the
runner knows which machine each result comes from. A `probe` request stops there: it is
how the runner learns the hardware before the first measurement.

A failure is classified for the runner:
- the candidate's fault (`run_error`, `wrong_answer`, `run_timeout` when the server ended
  the session at its timeout): recorded, never retried;
- the server's (the connection is gone: it died, or crashed with the kernel):
  ``{"lost": true}``, so the runner retries the candidate elsewhere;
- the farm's (the server has no such device): ``{"misconfigured": ...}``, which stops the run.
"""
from __future__ import annotations

import os

# Phases in which the candidate's own code runs on the server: losing the server there
# may be the candidate's doing (a crashing kernel takes TVM's server down with it).
KERNEL_PHASES = ("run", "time")


def _lost(phase: str, error: str) -> dict:
    return {"ok": False, "lost": True, "phase": phase, "error": error}


def _alive(dev) -> bool:
    """Whether the session still answers: one tiny remote allocation."""
    import tvm

    try:
        tvm.runtime.empty((1,), "float32", dev)
        return True
    except Exception:
        return False


# TVM's stock RPC server (`python -m tvm.exec.rpc_server`) registers these global
# functions (the full TVM wheel a server needs has them). The CPU's model name is not
# among them, and the server's file download cannot read /proc/cpuinfo (TVM sizes a file
# by seeking to its end, which /proc does not support), so a CPU is named by what LLVM
# detects on the server: its microarchitecture and vendor.
CPU_FUNCTIONS = {"cpu": ("target.llvm_get_system_cpu",),
                 "vendor": ("target.llvm_get_system_x86_vendor",),
                 "triple": ("target.llvm_get_system_triple",),
                 "cores": ("s_tir.meta_schedule.cpu_count", True)}


def _remote_call(sess, name: str, *args):
    """The value of a global function on the server; None where it has none."""
    try:
        func = sess.get_function(name)
    except AttributeError:  # TVM's answer for a name the server does not register
        return None
    return func(*args)


def read_hardware(sess, dev, device: str) -> dict:
    """What the server says about its hardware: for "cpu", the CPU's LLVM name, vendor,
    target triple, logical cores and memory (GiB); for "cuda", the GPU's name, compute
    capability, SM count and memory (TVM's device attributes; its CUDA device reports
    no driver version)."""
    if device == "cuda":
        return {"name": dev.device_name, "compute_version": dev.compute_version,
                "sm_count": dev.multi_processor_count, "memory": dev.total_global_memory}
    out = {}
    for field, (name, *args) in CPU_FUNCTIONS.items():
        value = _remote_call(sess, name, *args)
        out[field] = None if value is None else (int(value) if field == "cores" else str(value))
    # in whole GiB: identical machines differ by a few MiB of memory the kernel reserves
    memory = dev.total_global_memory
    out["memory_gib"] = round(memory / 2**30) if memory else None
    return out


def _measure(request: dict, reference: tuple, progress: dict) -> dict:
    """Connect, upload, run, check, time. `progress["phase"]` says how far it got; all
    remote objects live in this frame, so returning ends the session."""
    import tvm
    from tvm import rpc

    from ..run_job import check_outputs, failure_reply
    from ..reference.data import poison

    progress["phase"] = "connect"
    sess = rpc.connect(request["host"], request["port"], request["matchkey"],
                       session_timeout=request["session_timeout"])
    dev = sess.device(request["device"], 0)
    progress["dev"] = dev
    if not dev.exist:
        return {"ok": False, "misconfigured": f"RPC server {request['host']}:{request['port']} "
                f"has no {request['device']} device"}
    progress["phase"] = "hardware"
    progress["hardware"] = read_hardware(sess, dev, request["device"])
    if request.get("probe"):
        return {"ok": True, "hardware": progress["hardware"]}
    specs, inputs, expected, tols = reference
    progress["phase"] = "upload"
    sess.upload(request["lib"])
    lib = sess.load_module(os.path.basename(request["lib"]))
    args = [tvm.runtime.tensor(a, dev) for a in inputs]
    outs = [tvm.runtime.tensor(poison(s), dev) for s in specs[1]]
    progress["phase"] = "run"
    for _ in range(max(1, request["warmup"])):
        lib["main"](*args, *outs)
    dev.sync()
    if request["check"]:
        progress["phase"] = "check"
        msg = check_outputs(specs, inputs, [a.numpy() for a in args],
                            [o.numpy() for o in outs], expected, tols)
        if msg:
            return dict(failure_reply("wrong_answer", msg), hardware=progress["hardware"])
    progress["phase"] = "time"
    evaluator = lib.time_evaluator("main", dev, number=request["number"],
                                   repeat=request["repeat"],
                                   min_repeat_ms=request["min_repeat_ms"])
    return {"ok": True, "latencies": list(evaluator(*args, *outs).results),
            "hardware": progress["hardware"]}


def run_job(request: dict) -> dict:
    """In the `rpc` worker: measure one built candidate on the server in `request`, or
    with `"probe": true` only read the server's hardware."""
    from ..run_job import failure_reply, load_reference_arrays
    from ..worker import error_text

    try:
        reference = None if request.get("probe") else load_reference_arrays(request["reference"])
    except Exception as e:
        return failure_reply("run_error", f"reference data: {error_text(e)}")
    progress: dict = {"phase": "connect"}
    try:
        return _measure(request, reference, progress)
    except Exception as e:
        phase, text = progress["phase"], error_text(e)
        on = {"hardware": progress["hardware"]} if "hardware" in progress else {}
        if "RPCSessionTimeoutError" in str(e):
            return dict(failure_reply("run_timeout", f"the server ended the session at its "
                        f"{request['session_timeout']:g}s timeout (during {phase})"), **on)
        dev = progress.pop("dev", None)
        if phase in ("connect", "hardware") or dev is None or not _alive(dev):
            return _lost(phase, text)
        return dict(failure_reply("run_error", f"{phase}: {text}"), **on)
