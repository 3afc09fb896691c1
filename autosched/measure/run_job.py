"""What a run worker does with one built candidate on this machine: load the library,
run it on the task's reference inputs, check every output (and that no input was
overwritten) with the comparison rule of `check.compare`, then time it.

It needs only `tvm_ffi`, TVM's runtime libraries (`autosched.tvm_runtime`) and numpy,
never the TVM compiler: a GPU machine without TVM's compiler (a bundle measurer) calls
`run_job` in its own process. On the CPU it times with the runtime's `time_evaluator`
(`runtime.RPCTimeEvaluator`); on CUDA with `cuda.timing` (events on the worker's own
stream, L2 flushed before each timed call).

The request (a JSON dict): `lib`, `reference` (a reference directory), `device` ("cpu"
or "cuda"), `warmup`, `number`, `repeat`, `min_repeat_ms`, `check`; optional `flush_l2`
(default true) and `stream` ("runner", the default, or "default"), which only CUDA uses.
The reply is one of:

- ``{"ok": true, "latencies": [...]}``: seconds per call, one per repeat; on CUDA also
  ``"number"``, the calls per repeat after growing to `min_repeat_ms`;
- ``{"ok": false, "kind": ..., "error": ...}``: the candidate's failure (`run_error`,
  `wrong_answer`); with ``"restart": true`` when it was a CUDA error, which leaves the
  process's CUDA context unusable: the caller must not run anything else in this process;
- ``{"ok": false, "infrastructure": true, "cause": ..., "remedy": ...}``: the machine
  cannot run anything (no TVM runtime, no CUDA driver or runtime, no device, a library
  without code for this GPU, torch's operator to time a kernel beside that does not
  run); nothing about the candidate is known.

The RPC session worker (`rpc/session.py`) uses the same reference loading and output
check on the data it copies back from a server, so both runners judge alike.
"""
from __future__ import annotations

import os
import struct

from ..errors import InfrastructureError

# (reference directory, meta.json mtime) -> (specs, inputs, expected, tolerances):
# consecutive candidates of one task reuse the arrays; a rewritten reference is reread.
_LOADED: dict[tuple[str, int], tuple] = {}
_LOADED_MAX = 4
# (stream, flush_l2) -> CudaTimer: one stream and flush buffer per process and setting
_TIMERS: dict[tuple[str, bool], object] = {}

# Test-only fault injection: a request key read after the warm-up. "cuda_error:<code>:
# <name>:<text>" raises the CUDA error a faulting kernel would (e.g. "cuda_error:700:
# cudaErrorIllegalAddress:an illegal memory access was encountered"), so the handling of
# a poisoned context can be tested without a GPU. Runners set it only from
# `local_runner.TEST_RUN_FAULT_ATTR`; search spaces never do.
TEST_FAULT_KEY = "test_fault"
# CUDA errors that say the library or the machine is wrong, not the kernel: every
# candidate would fail alike, so none is recorded. (driver API name, runtime API name)
MACHINE_CUDA_ERRORS = {
    ("NO_BINARY_FOR_GPU", "NoKernelImageForDevice"):
        "the kernel library holds no code for this GPU's architecture",
    ("UNSUPPORTED_PTX_VERSION", "UnsupportedPtxVersion"):
        "the kernel library's PTX is newer than this NVIDIA driver",
    ("ECC_UNCORRECTABLE", "ECCUncorrectable"): "the GPU reports an uncorrectable ECC error",
    ("DEVICE_UNAVAILABLE", "DevicesUnavailable"):
        "the GPU is busy or unavailable (exclusive-process mode, or another process owns it)",
}
MACHINE_CUDA_REMEDY = ("build for this GPU (--target cuda on it, or its arch in the target "
                       "JSON) with a CUDA toolkit this driver supports, check the GPU with "
                       "nvidia-smi, then rerun")
STICKY_NOTE = ("a CUDA error leaves the process's CUDA context unusable, so the run worker "
               "is replaced")


def run_request(settings, lib: str, reference_dir: str, device: str,
                beside: dict | None = None) -> dict:
    """The request `run_job` takes for the library `lib` on its task's reference in
    `reference_dir`, on `device` ("cpu" / "cuda"), timed as `settings` say (a
    MeasureSettings or its JSON, as a bundle's manifest holds it). Every runner makes
    its requests here, so what is run and how it is timed never differ between them.
    `beside` (CPU only): time the kernel as a torch model calls it, alternating with
    torch's operator (`beside_torch.py`; a worker of role ``run_torch`` serves it)."""
    from .settings import MeasureSettings

    s = settings if isinstance(settings, MeasureSettings) else MeasureSettings(**settings)
    request = {"lib": lib, "reference": reference_dir, "device": device, "warmup": s.warmup,
               "number": s.number, "repeat": s.repeat, "min_repeat_ms": s.min_repeat_ms,
               "check": s.check_correctness, "flush_l2": s.flush_l2, "stream": s.stream}
    if beside is not None:
        if device != "cpu":
            raise ValueError("a kernel is timed beside torch on the CPU only")
        request["beside"] = beside
    return request


def load_reference_arrays(directory: str) -> tuple:
    """(specs, inputs, expected, tolerances) of a reference directory, cached."""
    from .reference.data import load_reference

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


def infrastructure_reply(e: InfrastructureError) -> dict:
    """The reply for a machine that cannot run any candidate."""
    return {"ok": False, "infrastructure": True, "cause": e.cause, "remedy": e.remedy}


def check_outputs(specs, inputs, args, outs, expected, tols) -> str | None:
    """None when every output matches and no input changed, else what went wrong.
    `args` and `outs` are the kernel's inputs and outputs copied back as numpy arrays."""
    from .reference.check import compare

    for spec, out, exp, tol in zip(specs[1], outs, expected, tols):
        msg = compare(spec.name, out, exp, tol)
        if msg:
            return msg
    for spec, original, arg in zip(specs[0], inputs, args):
        if arg.tobytes() != original.tobytes():
            return f"input {spec.name} was modified by the kernel"
    return None


def open_device(kind: str):
    """Device 0 of `kind` ("cpu" or "cuda") with its runtime loaded; InfrastructureError
    when this machine cannot run kernels on it."""
    from .. import tvm_runtime
    from .device_arrays import device, device_exists

    tvm_runtime.load_for(kind)
    dev = device(kind, 0)
    if not device_exists(dev):
        raise InfrastructureError(f"no {kind} device is visible here: {_why_no_device()}",
                                  "run on a machine with an NVIDIA GPU and its driver (check "
                                  "nvidia-smi and CUDA_VISIBLE_DEVICES), then rerun")
    return dev


def _why_no_device() -> str:
    """The CUDA runtime's own answer to "how many devices?" (one line)."""
    from .cuda.cudart import CudaError, Cudart

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    where = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
    try:
        return f"the CUDA runtime counts {Cudart().device_count()} devices{where}"
    except CudaError as e:
        return f"{e}{where}"
    except OSError as e:
        return f"the CUDA runtime cannot be opened: {e}"


def _cuda_timer(request: dict):
    """This process's CudaTimer for the request's settings, made before any candidate
    code runs: a GPU that cannot give it a stream or the flush buffer (full memory)
    would fail every candidate alike, so that is an InfrastructureError."""
    from .cuda.timing import CudaTimer
    from .cuda.cudart import CudaError

    key = (request.get("stream", "runner"), bool(request.get("flush_l2", True)))
    if key not in _TIMERS:
        try:
            _TIMERS[key] = CudaTimer(0, stream=key[0], flush_l2=key[1])
        except (CudaError, OSError) as e:
            raise InfrastructureError(f"cannot set up CUDA timing on this GPU: {e}",
                                      "check the GPU with nvidia-smi (free memory, other "
                                      "processes), then rerun") from None
    return _TIMERS[key]


def _drop_timers() -> None:
    for timer in _TIMERS.values():
        timer.close()
    _TIMERS.clear()


def _inject_fault(spec: str) -> None:
    from .cuda.cudart import CudaError

    kind, _, rest = spec.partition(":")
    if kind != "cuda_error":
        raise ValueError(f"unknown test fault {spec!r}")
    code, name, text = rest.split(":", 2)
    raise CudaError("cudaStreamSynchronize (injected)", int(code), name, text)


def _run_failure(kind: str, e: Exception) -> dict:
    """A candidate's run_error, sticky (restart) for any error of a CUDA run; or the
    machine's fault for the CUDA errors no kernel causes (MACHINE_CUDA_ERRORS)."""
    from .cuda.cudart import CudaError
    from .worker import error_text

    text = error_text(e)
    if kind != "cuda" and not isinstance(e, CudaError):
        return failure_reply("run_error", text)
    _drop_timers()
    for signs, cause in MACHINE_CUDA_ERRORS.items():
        if any(sign in text for sign in signs):
            return infrastructure_reply(InfrastructureError(f"{cause}: {text}",
                                                            MACHINE_CUDA_REMEDY))
    return dict(failure_reply("run_error", f"{text}; {STICKY_NOTE}"), restart=True)


def _time_cpu(lib, dev, call_args, request: dict) -> list[float]:
    import tvm_ffi

    repeat = max(1, request["repeat"])
    evaluator = tvm_ffi.get_global_func("runtime.RPCTimeEvaluator")(
        lib, "main", dev.dlpack_device_type(), dev.index, request["number"], repeat,
        request["min_repeat_ms"], 100, 0, 1, 0, "")
    return list(struct.unpack("@" + "d" * repeat, evaluator(*call_args)))


def _host(tensors, specs) -> list:
    from .device_arrays import to_host
    from .reference.data import np_dtype

    return [to_host(t, s.shape, np_dtype(s.dtype)) for t, s in zip(tensors, specs)]


def run_job(request: dict) -> dict:
    """In the run worker (or any process with TVM's runtime): load, run, check against
    the reference, time. See the module docstring for the request and the reply."""
    kind = request["device"]
    try:
        dev = open_device(kind)
        timer = _cuda_timer(request) if kind == "cuda" else None
    except InfrastructureError as e:
        return infrastructure_reply(e)
    try:
        specs, inputs, expected, tols = load_reference_arrays(request["reference"])
    except Exception as e:
        from .worker import error_text

        return failure_reply("run_error", f"reference data: {error_text(e)}")
    try:
        if request.get("beside"):
            from .beside_torch import measure_beside

            return measure_beside(request, (specs, inputs, expected, tols), check_outputs)
        return _measure(request, dev, timer, (specs, inputs, expected, tols))
    except InfrastructureError as e:  # torch's peer cannot run here (beside_torch.py)
        return infrastructure_reply(e)
    except Exception as e:
        return _run_failure(kind, e)


def _measure(request: dict, dev, timer, reference: tuple) -> dict:
    """Load, warm up (the first calls also catch a crash before any copy back), check,
    time; `timer` is the CudaTimer on CUDA, None on the CPU."""
    import tvm_ffi

    from .device_arrays import sync, to_device
    from .reference.data import poison

    specs, inputs, expected, tols = reference
    lib = tvm_ffi.load_module(request["lib"])
    func = lib["main"]
    args = [to_device(a, s.dtype, dev) for a, s in zip(inputs, specs[0])]
    outs = [to_device(poison(s), s.dtype, dev) for s in specs[1]]
    if timer is not None:
        timer.warm_up(dev, lambda: func(*args, *outs), request["warmup"])
    else:
        for _ in range(max(1, request["warmup"])):
            func(*args, *outs)
        sync(dev)
    if request.get(TEST_FAULT_KEY):
        _inject_fault(request[TEST_FAULT_KEY])
    if request["check"]:
        msg = check_outputs(specs, inputs, _host(args, specs[0]), _host(outs, specs[1]),
                            expected, tols)
        if msg:
            return failure_reply("wrong_answer", msg)
    if timer is None:
        return {"ok": True, "latencies": _time_cpu(lib, dev, [*args, *outs], request)}
    latencies, number = timer.measure(dev, lambda: func(*args, *outs), request["number"],
                                      request["repeat"], request["min_repeat_ms"])
    return {"ok": True, "latencies": latencies, "number": number}
