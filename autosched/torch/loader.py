"""Loading kernels.so into the process.

A CPU library is a plain shared object whose functions follow the TVM FFI calling
convention: `tvm_ffi` alone loads it, without the TVM compiler. A CUDA library carries its
kernels as CUDA source, compiled for the local GPU when the module loads; that needs TVM's
runtime libraries (libtvm_runtime, libtvm_runtime_cuda) and a registered CUDA compiler
callback (see docs/torch.md).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from .errors import LibraryError
from .manifest import Manifest

_CUDA_LOADER = "ffi.Module.load_from_bytes.cuda"
_CUDA_COMPILE = "tvm_callback_cuda_compile"


def _tvm_lib_dir() -> Path | None:
    """tvm/lib of the installed TVM package, found without importing it."""
    spec = importlib.util.find_spec("tvm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "lib"


def _load_cuda_runtime() -> None:
    """Register TVM's CUDA module loader and a CUDA compiler callback, or explain why not."""
    import tvm_ffi

    if tvm_ffi.get_global_func(_CUDA_LOADER, allow_missing=True) is None:
        lib_dir = _tvm_lib_dir()
        if lib_dir is None or not (lib_dir / "libtvm_runtime_cuda.so").exists():
            raise LibraryError("loading a CUDA kernel library needs TVM's runtime libraries "
                               "(libtvm_runtime.so, libtvm_runtime_cuda.so); install "
                               "apache-tvm (or its runtime-only package)")
        from tvm_ffi.libinfo import load_lib_ctypes

        try:
            load_lib_ctypes("tvm", "tvm_runtime", "RTLD_GLOBAL", extra_lib_paths=[str(lib_dir)])
            load_lib_ctypes("tvm", "tvm_runtime_cuda", "RTLD_LOCAL",
                            extra_lib_paths=[str(lib_dir)])
        except (OSError, RuntimeError) as e:  # typically libcuda.so.1 or libcudart.so.13
            raise LibraryError(f"TVM's CUDA runtime does not load here: {e} (it needs "
                               "libcuda.so.1 from the driver and libcudart.so.13)") from None
    if tvm_ffi.get_global_func(_CUDA_COMPILE, allow_missing=True) is None:
        try:  # TVM's callback compiles the kernels' source with NVRTC or nvcc
            import tvm.support.nvcc  # noqa: F401
        except ImportError as e:
            raise LibraryError(f"CUDA kernels are compiled when the library loads, which "
                               f"needs tvm.support.nvcc: {e}") from None


def load_kernels(manifest: Manifest):
    """Load the library's shared object and check that every kernel symbol is in it."""
    import tvm_ffi

    path = manifest.library_path
    if Path(manifest.library).name != manifest.library:
        raise LibraryError(f"{manifest.directory}: library name {manifest.library!r} must be "
                           "a file in the library directory")
    if not path.is_file():
        raise LibraryError(f"{manifest.directory}: {manifest.library} is missing")
    if manifest.device_type == "cuda":
        _load_cuda_runtime()
    try:
        module = tvm_ffi.load_module(str(path))
    except Exception as e:  # a broken file, another architecture, a missing loader
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise LibraryError(f"{path}: cannot be loaded: {first}") from None
    missing = [k.symbol for k in manifest.kernels
               if not module.implements_function(k.symbol, query_imports=True)]
    if missing:
        raise LibraryError(f"{path}: kernels listed in the manifest are missing from the "
                           f"library: {', '.join(missing)}")
    return module
