"""Loading kernels.so into the process.

A CPU library is a plain shared object whose functions follow the TVM FFI calling
convention; `tvm_ffi` loads it without the TVM compiler. Kernels that use a thread pool or
workspace memory call TVM's runtime through function pointers in the library
(`__TVMBackendParallelLaunch`, `__TVMBackendAllocWorkspace`), which the loader fills from
what libtvm_runtime.so registered. So libtvm_runtime.so is loaded first (with ctypes, from
the installed `tvm` package, without importing it), and after loading we check that no
such pointer was left empty: calling through one would crash the process. The pointer
to the parallel launcher is then pointed at the pool `AUTOSCHED_KERNEL_POOL` chooses
(`autosched.kernel_pool`: by default the process's OpenMP pool, torch's own threads).

A process may load a library folder again after it was written again (export writes a
model's library, times it, then writes the winners only): the dynamic loader hands back
the object it already holds under that path as long as anything still references it (a
bound op does), so the new kernels would not be loaded, or worse, an old kernel would
answer to a new symbol of the same name. So the object loaded is a copy named by the
digest of its bytes (`_loaded_copy`): a library written again is a new name, the same
bytes the same one.

A CUDA library carries its kernels as device code (a fatbin or cubin for one GPU
architecture, made at export), so loading it needs TVM's runtime libraries
(libtvm_runtime, libtvm_runtime_cuda, which needs the driver's libcuda.so.1 and
libcudart.so.13) and no CUDA compiler. A library exported by an older autosched, which
carried CUDA source to compile at load time, is refused with the advice to re-export.
Its functions take torch's CUDA tensors as they are (DLPack, zero-copy); the torch ops
over them (`dispatch.OpKernels`) allocate the outputs with torch and launch inside
`tvm_ffi.use_torch_stream()`, so a kernel runs on torch's current stream with no host
synchronisation, which is what a CUDA graph capture needs.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

from .. import tvm_runtime
from ..errors import InfrastructureError
from ..kernel_pool import route_parallel_loops
from ..threads import size_kernel_pool
from .errors import LibraryError
from .manifest import Manifest

# Runtime entry points that kernels call through pointers the loader fills.
_CONTEXT_SYMBOLS = ("__TVMBackendAllocWorkspace", "__TVMBackendFreeWorkspace",
                    "__TVMBackendParallelLaunch", "__TVMBackendParallelBarrier")


def _load_tvm_runtime() -> None:
    """Load libtvm_runtime.so if installed; a library that needs it and did not get it
    is refused by _check_context_symbols (a pure kernel library needs none)."""
    try:
        tvm_runtime.load_runtime()
    except InfrastructureError:
        pass


def _loaded_copy(path: Path) -> Path:
    """The copy of the library at `path` this process loads: in a per-user folder under
    the temporary directory, named by the digest of its bytes (see the module doc),
    written under a temporary name and renamed into place."""
    import hashlib
    import tempfile

    data = path.read_bytes()
    folder = Path(tempfile.gettempdir()) / f"autosched-loaded-{os.getuid()}"
    copy = folder / f"{hashlib.sha256(data).hexdigest()[:24]}{path.suffix}"
    if not copy.is_file():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            staging = folder / f".{copy.name}.{os.getpid()}"
            staging.write_bytes(data)
            os.replace(staging, copy)
        except OSError as e:
            raise LibraryError(f"{path}: cannot copy it to {folder} to load it: {e}") from None
    return copy


def _check_context_symbols(loaded: Path, path: Path) -> None:
    """Refuse a library (`path`, loaded from its copy `loaded`) whose runtime entry
    points were left empty."""
    lib = ctypes.CDLL(str(loaded), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)  # the loaded copy
    empty = []
    for name in _CONTEXT_SYMBOLS:
        try:
            pointer = ctypes.c_void_p.in_dll(lib, name)
        except ValueError:  # this library does not use it
            continue
        if not pointer.value:
            empty.append(name.removeprefix("__"))
    if empty:
        raise LibraryError(f"{path}: its kernels call TVM's runtime ({', '.join(empty)}), but "
                           "libtvm_runtime.so is not loaded; install apache-tvm (or its "
                           "runtime-only package) where the library is loaded")


def load_cuda_runtime() -> None:
    """Register TVM's CUDA module loader (runtime libraries only), or explain why not."""
    try:
        tvm_runtime.load_cuda_runtime()
    except InfrastructureError as e:
        raise LibraryError(str(e)) from None


def check_device_code(manifest: Manifest) -> None:
    """A CUDA library must hold device code (the manifest says which); one that holds
    CUDA source would need a compiler here and is refused."""
    if manifest.device_type == "cuda" and not manifest.cuda.get("binary"):
        raise LibraryError(f"{manifest.directory}: this CUDA library holds kernel source, "
                           "not device code (exported by an older autosched), and would "
                           "need a CUDA compiler to load; re-export it with `autosched "
                           "export`")


def load_kernels(manifest: Manifest):
    """Load the library's shared object and check that every kernel symbol is in it."""
    import tvm_ffi

    path = manifest.library_path
    if not path.is_file():
        raise LibraryError(f"{manifest.directory}: {manifest.library} is missing")
    size_kernel_pool()  # before the first kernel starts the pool
    _load_tvm_runtime()
    if manifest.device_type == "cuda":
        check_device_code(manifest)
        load_cuda_runtime()
    loaded = _loaded_copy(path)
    try:
        module = tvm_ffi.load_module(str(loaded))
    except Exception as e:  # a broken file, another architecture, a missing loader
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise LibraryError(f"{path}: cannot be loaded: {first}") from None
    _check_context_symbols(loaded, path)
    if manifest.device_type == "cpu":
        route_parallel_loops(str(loaded))
    missing = [k.symbol for k in manifest.kernels
               if not module.implements_function(k.symbol, query_imports=True)]
    if missing:
        raise LibraryError(f"{path}: kernels listed in the manifest are missing from the "
                           f"library: {', '.join(missing)}")
    return module
