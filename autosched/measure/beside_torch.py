"""Timing a CPU candidate as a PyTorch model calls it: in a torch process, on the kernel
pool a torch process runs it on, with its outputs allocated by torch on every call, each
call right after torch's own operator for the same computation.

A kernel timed alone (TVM's `time_evaluator`: preallocated outputs, calls back to back
on TVM's own thread pool) runs faster than the same kernel inside a model, where each of
its calls follows a torch operator whose threads are still spinning or already asleep,
and allocates its outputs. A candidate meant for the model path (`tune-model`) is
therefore measured here instead, called through a torch operator as the compiled model
calls our kernels, so that its record holds as the model calls it and the
search ranks candidates by that time. The run worker that serves such requests (role
``run_torch``) imports torch before anything else, so the launcher that serves the
kernel's parallel loops (`kernel_pool`, `AUTOSCHED_KERNEL_POOL`) binds the one OpenMP
runtime torch uses.

The request carries, beside the usual fields (`run_job.run_request`), ``"beside"``:

    {"peer": "module:function", "workload": ..., "args": {...}, "threads": N}

`peer` names a function that, called with (workload, args), returns the callable torch
runs in the kernel's place (taking the kernel's input tensors in order): the model floor
supplies it (`autosched.model.baseline:twin_call`), so this module knows no workload.
Each repeat runs rounds of one peer call and one kernel call, each call timed on its
own, until the round's calls together have lasted `2 * min_repeat_ms`; a repeat's
latency is the kernel's time over its calls. Bounding repeats by elapsed time, not by a
number of calls fixed while the machine was quiet, keeps a repeat from outlasting the
run timeout when the machine gets busy (an OpenMP thread that fell asleep wakes late).
The reply adds the peer's latencies (``"beside_latencies"``) to the kernel's.
"""
from __future__ import annotations

import importlib
import time

# (peer, workload, args as JSON) -> the peer's callable, made once per task
_PEERS: dict[tuple, object] = {}


def peer_callable(spec: dict):
    """The callable torch runs in the kernel's place, from the request's "beside"."""
    import json

    key = (spec["peer"], spec["workload"], json.dumps(spec["args"], sort_keys=True))
    if key not in _PEERS:
        module_name, _, name = spec["peer"].partition(":")
        factory = getattr(importlib.import_module(module_name), name)
        _PEERS[key] = factory(spec["workload"], dict(spec["args"]))
    return _PEERS[key]


def _working_peer(spec: dict, args):
    """The peer, called once on the task's inputs before any candidate code runs: a peer
    that cannot be made or run is this machine's or torch's fault, never the candidate's
    (InfrastructureError: nothing is recorded)."""
    from ..errors import InfrastructureError

    try:
        peer = peer_callable(spec)
        peer(*args)
    except Exception as e:  # noqa: BLE001 (whatever torch or the factory raise)
        first = (str(e).strip().splitlines() or [""])[0]
        raise InfrastructureError(
            f"torch's operator to time {spec['workload']} beside ({spec['peer']}) does not "
            f"run here: {type(e).__name__}: {first[:300]}",
            "check that torch imports and runs in the measuring worker (or tune the model's "
            "tasks alone with `autosched tune`), then rerun") from None
    return peer


def torch_tensor(array, dtype: str):
    """A new torch tensor (torch's allocator, so aligned as torch's operators get them)
    holding `array`, whose TVM dtype is `dtype` (bfloat16 and other dtypes numpy lacks
    copy as raw bytes)."""
    import torch

    tdtype = getattr(torch, dtype)
    out = torch.empty(tuple(array.shape), dtype=tdtype)
    if array.dtype.kind in "biuf" and str(array.dtype) == dtype:
        out.copy_(torch.from_numpy(array.copy()))
    else:
        raw = getattr(torch, f"int{8 * array.dtype.itemsize}")
        out.view(raw).copy_(torch.from_numpy(array.view(f"i{array.dtype.itemsize}").copy()))
    return out


def host_array(tensor, np_dtype):
    """A numpy copy of a torch tensor, in the reference's numpy dtype."""
    import torch

    raw = getattr(torch, f"int{8 * tensor.element_size()}")
    return tensor.detach().view(raw).numpy().copy().view(np_dtype)


def _run_current(inputs):
    """The CPU implementation of the timing op: the current candidate, with fresh
    outputs from torch's allocator (DLPack, zero-copy)."""
    import torch

    func, outputs = _CURRENT[0]
    outs = [torch.empty(shape, dtype=dtype) for shape, dtype in outputs]
    func(*inputs, *outs)
    return outs


_CURRENT: list = [None]  # (candidate function, output shapes and dtypes)
_OPS: list = []          # the timing op's torch.library.Library, defined once
_NATIVE: dict = {}       # "kernel_<inputs>_<outputs>" -> its library, None without C++


def kernel_call(func, inputs, outputs):
    """The candidate called as a compiled model calls our kernels: through torch's
    dispatcher into the kernel that serves `torch.ops.autosched.<workload>.graph` on the
    CPU, which allocates the outputs with torch, so the record holds that cost too: the
    C++ kernel of `graph_call.py` where it is built, bound to this candidate, else a
    Python implementation. `inputs` and `outputs` are (shape, dtype name) pairs.
    Returns the callable taking the input tensors."""
    import torch

    from ..graph_call import bind, register

    arity = f"kernel_{len(inputs)}_{len(outputs)}"
    if arity not in _NATIVE:
        library = torch.library.Library("autosched_measure", "FRAGMENT")
        tensors = ", ".join(f"Tensor a{i}" for i in range(len(inputs)))
        library.define(f"{arity}({tensors}) -> "
                       f"({', '.join(['Tensor'] * len(outputs))})")
        _NATIVE[arity] = library if register("autosched_measure", arity, arity) else None
    if _NATIVE[arity] is not None:
        bind(arity, [(inputs, outputs, func)])
        return getattr(torch.ops.autosched_measure, arity).default
    if not _OPS:
        library = torch.library.Library("autosched_measure", "FRAGMENT")
        library.define("call(Tensor[] inputs) -> Tensor[]")
        library.impl("call", _run_current, "CPU")
        _OPS.append(library)
    _CURRENT[0] = (func, [(shape, getattr(torch, dtype)) for shape, dtype in outputs])
    op = torch.ops.autosched_measure.call.default
    return lambda *inputs: op(list(inputs))


def alternating(kernel, peer, repeats: int, min_repeat_ms: float) -> tuple[list, list]:
    """(kernel's, peer's) seconds per call, one per repeat, their calls alternating (see
    the module doc)."""
    clock = time.perf_counter
    spend = 2e-3 * max(min_repeat_ms, 1)
    kernel_lat, peer_lat = [], []
    for _ in range(max(1, repeats)):
        k = p = 0.0
        calls = 0
        while k + p < spend:
            t0 = clock()
            peer()
            t1 = clock()
            kernel()
            t2 = clock()
            p += t1 - t0
            k += t2 - t1
            calls += 1
        kernel_lat.append(k / calls)
        peer_lat.append(p / calls)
    return kernel_lat, peer_lat


def measure_beside(request: dict, reference: tuple, check_outputs) -> dict:
    """Load the candidate, route its loops to the process's kernel pool, check its
    outputs, then time it alternating with torch's peer. `check_outputs` is run_job's
    comparison (inputs unchanged, every output within tolerance)."""
    import torch
    import tvm_ffi

    from ..kernel_pool import route_parallel_loops
    from .reference.data import np_dtype, poison

    specs, inputs, expected, tols = reference
    spec = request["beside"]
    previous = torch.get_num_threads()
    torch.set_num_threads(int(spec["threads"]))
    try:
        with torch.no_grad():
            args = [torch_tensor(a, s.dtype) for a, s in zip(inputs, specs[0])]
            peer = _working_peer(spec, args)
            lib = tvm_ffi.load_module(request["lib"])
            route_parallel_loops(request["lib"])
            func = lib["main"]
            # the first call writes into poisoned outputs, so an element it leaves
            # unwritten shows (torch.empty may hand back an earlier call's right answer)
            outs = [torch_tensor(poison(s), s.dtype) for s in specs[1]]
            func(*args, *outs)
            kernel = kernel_call(func, [(tuple(s.shape), s.dtype) for s in specs[0]],
                                 [(tuple(s.shape), s.dtype) for s in specs[1]])
            for _ in range(max(1, request["warmup"])):
                peer(*args)
                kernel(*args)
            if request["check"]:
                msg = check_outputs(specs, inputs,
                                    [host_array(t, np_dtype(s.dtype)) for t, s in
                                     zip(args, specs[0])],
                                    [host_array(t, np_dtype(s.dtype)) for t, s in
                                     zip(outs, specs[1])], expected, tols)
                if msg:
                    return {"ok": False, "kind": "wrong_answer", "error": msg}
            kernel_lat, peer_lat = alternating(lambda: kernel(*args), lambda: peer(*args),
                                               request["repeat"], request["min_repeat_ms"])
    finally:
        torch.set_num_threads(previous)
    return {"ok": True, "latencies": kernel_lat, "beside_latencies": peer_lat}
