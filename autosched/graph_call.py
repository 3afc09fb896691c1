"""A C++ CPU kernel for the torch ops that run autosched's kernels (`graph_call.cpp`).

A compiled model calls each kernel through the `.graph` overload of its torch op
(`torch/ops.py`). Served by Python, a call crosses from torch's dispatcher into the
interpreter and back, selects the kernel, allocates its outputs and converts every
tensor: inside a training step, right after inductor's own kernels, that costs tens of
microseconds a call, as much as a kernel wins against torch's operator (on the ResNet
example's training step the kernels' Python calls cost about what the kernels saved).
The C++ kernel does the same work without the interpreter: the shapes and dtypes select
one of the kernels bound to the op, inputs are made contiguous and 64-byte aligned, the
outputs allocated, and the TVM function called through the TVM-FFI C API. A call it
does not serve (no kernel of those shapes, a tensor on another device) goes to the op's
fallback, whose Python implementation runs the torch reference or raises as before.

Two doors use it: the `.graph` overloads of `autosched.torch` (CUDA kernels keep the
Python path), and the run worker that times a model's candidates as the model calls
them (`measure/beside_torch.py`), so that a record holds the cost of the call the model
really makes.

`AUTOSCHED_GRAPH_CALL` chooses:

    native  (default) the C++ kernel, built on first use against the installed torch
            and TVM-FFI with the machine's C++ compiler (`native.built_library`);
            where it cannot be built or loaded, Python serves the calls and a warning
            says why, once
    python  the Python implementations

The choice is made once per process.
"""
from __future__ import annotations

import ctypes
import logging
import os
from functools import lru_cache
from importlib import resources

from .errors import InfrastructureError, UserError

log = logging.getLogger("autosched")

CALL_VAR = "AUTOSCHED_GRAPH_CALL"
NATIVE, PYTHON = "native", "python"


def requested_call(env=None) -> str:
    """What `AUTOSCHED_GRAPH_CALL` asks for (default native); a bad value is one
    UserError line."""
    value = (os.environ if env is None else env).get(CALL_VAR, "").strip().lower() or NATIVE
    if value not in (NATIVE, PYTHON):
        raise UserError(f"{CALL_VAR}={value!r}: expected {NATIVE} or {PYTHON}")
    return value


def _build_inputs() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(compile flags, link arguments) for graph_call.cpp against this process's torch
    and TVM-FFI; the torch version and C++ ABI are in the flags, so another torch gets
    a build of its own."""
    import torch
    import tvm_ffi.libinfo

    torch_dir = os.path.dirname(torch.__file__)
    torch_lib = os.path.join(torch_dir, "lib")
    ffi_lib = os.path.dirname(tvm_ffi.libinfo.find_libtvm_ffi())
    includes = [os.path.join(torch_dir, "include"),
                os.path.join(torch_dir, "include", "torch", "csrc", "api", "include"),
                *tvm_ffi.libinfo.include_paths()]
    flags = ("-O2", "-std=c++17", "-w", *(f"-I{p}" for p in includes),
             f"-D_GLIBCXX_USE_CXX11_ABI={int(torch.compiled_with_cxx11_abi())}",
             f"-DAUTOSCHED_TORCH_VERSION=\"{torch.__version__}\"")
    libs = (f"-L{torch_lib}", f"-Wl,-rpath,{torch_lib}", "-lc10", "-ltorch_cpu",
            f"-L{ffi_lib}", f"-Wl,-rpath,{ffi_lib}", "-ltvm_ffi")
    return flags, libs


@lru_cache(maxsize=1)
def native() -> ctypes.CDLL | None:
    """The C++ kernel's library, built on first use and loaded once per process; None
    where Python serves the calls (asked for, or the build or load failed: the warning
    says why)."""
    if requested_call() == PYTHON:
        return None
    from .native import built_library

    source = resources.files("autosched").joinpath("graph_call.cpp").read_text()
    try:
        flags, libs = _build_inputs()
        path = built_library("graph-call", "libautosched_graph_call.so", source, flags,
                             "the C++ call path of CPU kernels", cxx=True, libs=libs)
        functions = ctypes.CDLL(path)
    except (InfrastructureError, OSError, ImportError) as e:
        log.warning("autosched: CPU kernels in compiled models are called through Python "
                    "(slower by microseconds a call): %s", e)
        return None
    functions.autosched_graph_register.argtypes = [ctypes.c_char_p] * 4
    functions.autosched_graph_bind.argtypes = [
        ctypes.c_char_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64),
        ctypes.POINTER(ctypes.c_void_p)]
    functions.autosched_graph_error.restype = ctypes.c_char_p
    return functions


def register(namespace: str, name: str, workload: str, fallback: str = "") -> bool:
    """Make the C++ kernel the CPU kernel of the op `namespace::name` (defined, with no
    CPU kernel yet): it runs the kernels bound to `workload` (`bind`), and calls it does
    not serve go to the op `fallback` ("ns::op"; none: an error). False where Python
    must serve the op."""
    functions = native()
    if functions is None:
        return False
    if functions.autosched_graph_register(namespace.encode(), name.encode(),
                                          workload.encode(), fallback.encode()) != 0:
        why = functions.autosched_graph_error().decode(errors="replace").strip()
        log.warning("autosched: %s::%s is called through Python: %s", namespace, name,
                    why.splitlines()[0] if why else "registration failed")
        return False
    return True


def bind(workload: str, kernels) -> None:
    """Make the C++ kernel of `workload` run `kernels`, [(input specs, output specs, TVM
    function)] with specs as (shape, dtype name) pairs, replacing those bound before
    (none: every call goes to the fallback)."""
    functions = native()
    if functions is None:
        return
    kernels = list(kernels)
    specs: list[int] = []
    for inputs, outputs, _ in kernels:
        for tensors in (inputs, outputs):
            specs.append(len(tensors))
            for shape, dtype in tensors:
                specs += [len(shape), *shape, *_dl_dtype(dtype)]
    handles = [ctypes.c_void_p(function.__chandle__()) for _, _, function in kernels]
    functions.autosched_graph_bind(workload.encode(), len(kernels),
                                   (ctypes.c_int64 * max(1, len(specs)))(*specs),
                                   (ctypes.c_void_p * max(1, len(handles)))(*handles))


def _dl_dtype(name: str) -> tuple[int, int, int]:
    """DLPack's (code, bits, lanes) of a dtype name ("float32", "bfloat16", "bool")."""
    import tvm_ffi

    dtype = tvm_ffi.dtype(name)
    return dtype.type_code, dtype.bits, dtype.lanes
