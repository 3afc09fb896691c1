"""TVM's runtime libraries, loaded without the TVM compiler.

A machine that only runs kernels (a GPU node measuring a bundle, a process serving torch
ops) needs `tvm_ffi` plus TVM's runtime libraries from the installed `tvm` package's
`lib/` folder: `libtvm_runtime.so` (tensors, timers, the thread pool and workspace entry
points that CPU kernels call) and, for CUDA, `libtvm_runtime_cuda.so` (the CUDA device API
and the loader of CUDA modules). They are loaded with ctypes from where `tvm` is
installed, without importing `tvm` (which would load the compiler, 250 MB, and may not be
installed at all). Both are global registries: loading twice is harmless, and a process
that did import `tvm` already has them.

A missing or unloadable runtime is the machine's fault, never a kernel's: it raises
`InfrastructureError` with what to install.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from .errors import InfrastructureError

CUDA_MODULE_LOADER = "ffi.Module.load_from_bytes.cuda"  # registered by libtvm_runtime_cuda
RUNTIME_PROBE = "runtime.TVMTensorAllocWithScope"       # registered by libtvm_runtime
INSTALL_REMEDY = "install apache-tvm (or its runtime-only package) where kernels run, then rerun"


def tvm_lib_dir() -> Path | None:
    """tvm/lib of the installed TVM package, found without importing it."""
    spec = importlib.util.find_spec("tvm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "lib"


def _registered(name: str) -> bool:
    import tvm_ffi

    return tvm_ffi.get_global_func(name, allow_missing=True) is not None


def _load(name: str, mode: str) -> None:
    from tvm_ffi.libinfo import load_lib_ctypes

    lib_dir = tvm_lib_dir()
    if lib_dir is None or not (lib_dir / f"lib{name}.so").exists():
        raise InfrastructureError(f"TVM's runtime library lib{name}.so is not installed",
                                  INSTALL_REMEDY)
    try:
        load_lib_ctypes("tvm", name, mode, extra_lib_paths=[lib_dir])
    except (OSError, RuntimeError) as e:
        text = " ".join(str(e).split())
        if name == "tvm_runtime_cuda":
            raise InfrastructureError(
                f"TVM's CUDA runtime does not load here: {text}",
                "it needs the NVIDIA driver (libcuda.so.1) and the CUDA 13 runtime "
                "(libcudart.so.13) on the library path; install them, then rerun") from None
        raise InfrastructureError(f"TVM's runtime library lib{name}.so does not load: {text}",
                                  INSTALL_REMEDY) from None


def load_runtime() -> None:
    """Make TVM's runtime (`libtvm_runtime.so`) available in this process."""
    if not _registered(RUNTIME_PROBE):
        _load("tvm_runtime", "RTLD_GLOBAL")


def load_cuda_runtime() -> None:
    """Make TVM's CUDA runtime available: the CUDA device API and module loader."""
    load_runtime()
    if not _registered(CUDA_MODULE_LOADER):
        _load("tvm_runtime_cuda", "RTLD_LOCAL")


def load_for(device: str) -> None:
    """The runtime libraries that kernels for `device` ("cpu" or "cuda") need."""
    load_cuda_runtime() if device == "cuda" else load_runtime()
