"""The one way autosched compiles CUDA: a module -> device code for the target's exact
architecture, embedded in the built module (never CUDA source).

Why this module exists: `tvm.compile` makes device code only when TVM's CUDA runtime
(`libtvm_runtime_cuda.so`) is registered in the process, and then through the global
callback `tvm_callback_cuda_compile`, whose default (NVRTC via the `cuda-bindings`
package, no architecture outside a target scope) fails on most machines. Without the
runtime it keeps the source, and the library would need a compiler where it loads. So
the build worker, the dry run and export all compile here, the same way:

1. `ensure_cuda_runtime()` registers TVM's CUDA runtime. It needs `libcuda.so.1`: the
   real driver when it loads; on a build host without a driver, a placeholder
   `libcuda.so.1` whose every function fails (nothing can run through it; building
   calls no driver function), compiled with `cc` once into a cache folder. We compile
   our own rather than take the toolkit's `lib64/stubs/libcuda.so` because pip-installed
   toolkits do not ship the stubs folder, while `cc` is needed anyway to link every
   library. It also needs `libcudart.so.13`, taken from the CUDA toolkit when the
   loader does not find it.
2. Our callback replaces TVM's (override): nvcc -> a fatbin holding SASS for exactly the
   target's arch (`-gencode arch=compute_90a,code=sm_90a` for `sm_90a`), or NVRTC (when
   `cuda.bindings` imports) -> a cubin. `compiler="auto"` takes nvcc when it is on PATH,
   else NVRTC; the choice is returned in `CudaBuild.compiler`.
3. The compile runs inside the target's scope (`with target:`), which TVM's nvcc path
   needs to know the architecture.

Public API (all imports of tvm happen inside the functions):

- `build_cuda(mod, target_config, compiler="auto") -> CudaBuild`: compile an IRModule;
  raises `CudaCompileError` (the candidate's failure, one line) or
  `InfrastructureError` (no CUDA compiler, a broken toolchain, no runtime).
- `ensure_cuda_runtime() -> str`: register TVM's CUDA runtime here; returns
  `DRIVER` or `BUILD_HOST` (the placeholder driver). Idempotent.
- `choose_compiler(preference="auto") -> str`: `NVCC` or `NVRTC`, or InfrastructureError.
- `arch_of(target_config) -> str`, `gencode_flags(arch) -> list[str]`.
- `first_error_line(text) -> str`: the first line of a compiler's output naming an error.
- `cuda_source(executable) -> str`: the CUDA source TVM generated (for inspection).

Once `ensure_cuda_runtime()` ran, every `tvm.compile` for cuda in the process makes
device code through our callback; one outside `build_cuda` (no target scope) fails
with one line saying so.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
from dataclasses import dataclass
from typing import ClassVar

from ...errors import InfrastructureError
from ...target import tvm_target

NVCC, NVRTC, AUTO = "nvcc", "nvrtc", "auto"
DRIVER, BUILD_HOST = "driver", "build-host placeholder driver"
BINARY = {NVCC: "fatbin", NVRTC: "cubin"}
_ARCH = re.compile(r"^sm_(\d+)([af]?)$")
_CALLBACK = "tvm_callback_cuda_compile"
_TOOLKIT_REMEDY = ("install the CUDA toolkit (nvcc on PATH, or the cuda-bindings package "
                   "for NVRTC), then rerun")

# The driver functions libtvm_runtime_cuda.so imports (TVM 0.27); each returns
# CUDA_ERROR_STUB_LIBRARY, so the CUDA runtime sees no device.
_PLACEHOLDER_FUNCS = ("cuDeviceGetName", "cuFuncSetAttribute", "cuLaunchKernelEx",
                      "cuModuleGetFunction", "cuModuleLoadData", "cuModuleUnload",
                      "cuTensorMapEncodeTiled")
_PLACEHOLDER_SOURCE = "\n".join(
    ["typedef int CUresult;", "#define STUB 34 /* CUDA_ERROR_STUB_LIBRARY */",
     'CUresult cuGetErrorName(CUresult e, const char **s) { *s = "CUDA_ERROR_STUB_LIBRARY"; '
     + 'return 0; }',
     'CUresult cuGetErrorString(CUresult e, const char **s) { *s = "build-host placeholder '
     + 'driver: no GPU here"; return 0; }']
    + [f"CUresult {name}(void) {{ return STUB; }}" for name in _PLACEHOLDER_FUNCS]) + "\n"

_PROBE_KERNEL = 'extern "C" __global__ void autosched_probe(float* a) { a[threadIdx.x] = 1.f; }'
_NOISE = re.compile(r"^(ptxas info|ptxas\s+\.|\s*$|Compilation error:|#|//|extern |\s)")
_ERROR = re.compile(r"(error|fatal)", re.IGNORECASE)
_TMPDIR = re.compile(r"^\S*/(?=tvm_kernels\.)")   # nvcc's temporary directory


class CudaCompileError(Exception):
    """The candidate's own failure to compile: TVM refused it, or nvcc/NVRTC rejected
    the generated source. The message is one line."""


@dataclass(frozen=True)
class CudaBuild:
    """A compiled CUDA module: the TVM executable and how its device code was made."""

    executable: object
    arch: str
    compiler: str
    runtime: str

    @property
    def binary(self) -> str:
        """What the module embeds: "fatbin" (nvcc) or "cubin" (NVRTC)."""
        return BINARY[self.compiler]

    def describe(self) -> dict:
        """What a manifest or a log records about the build."""
        return {"arch": self.arch, "binary": self.binary, "compiler": self.compiler}


class _State:
    """This process's CUDA compile state (one runtime, one callback per process)."""

    runtime: ClassVar[str | None] = None
    handles: ClassVar[list] = []    # loaded libraries stay loaded: the runtime points into them
    compiler: ClassVar[str] = NVCC
    failure: ClassVar[tuple[str, str] | None] = None   # (side, line) of the callback's error
    probed: ClassVar[dict] = {}


def arch_of(target_config: dict) -> str:
    """The target's `arch` ("sm_90", "sm_90a", "sm_120f"); InfrastructureError when it
    is not one nvcc could be asked for."""
    arch = str(target_config.get("arch", ""))
    if not _ARCH.match(arch):
        raise InfrastructureError(f"the cuda target's arch {arch!r} is not of the form "
                                  "sm_XY, sm_XYa or sm_XYf",
                                  "give the target an arch such as sm_90a, then rerun")
    return arch


def gencode_flags(arch: str) -> list[str]:
    """nvcc flags for SASS of exactly `arch` and nothing else (no PTX to JIT)."""
    number = _ARCH.match(arch)
    suffix = number.group(1) + number.group(2)
    return ["-gencode", f"arch=compute_{suffix},code=sm_{suffix}"]


def choose_compiler(preference: str = AUTO) -> str:
    """NVCC or NVRTC as asked; for AUTO nvcc when on PATH, else NVRTC when the
    cuda-bindings package imports. InfrastructureError when the choice is unavailable."""
    if preference not in (AUTO, NVCC, NVRTC):
        raise ValueError(f"unknown CUDA compiler {preference!r}; use auto, nvcc or nvrtc")
    have_nvcc = shutil.which("nvcc") is not None
    if preference in (AUTO, NVCC) and have_nvcc:
        return NVCC
    if preference in (AUTO, NVRTC) and _nvrtc_importable():
        return NVRTC
    missing = {AUTO: "neither nvcc on PATH nor NVRTC (the cuda-bindings package)",
               NVCC: "nvcc is not on PATH", NVRTC: "NVRTC needs the cuda-bindings package, "
                                                   "which does not import here"}
    raise InfrastructureError(f"cannot compile CUDA kernels: {missing[preference]}",
                              _TOOLKIT_REMEDY)


def _nvrtc_importable() -> bool:
    try:
        from cuda.bindings import nvrtc  # noqa: F401
    except ImportError:
        return False
    return True


def ensure_cuda_runtime() -> str:
    """Register TVM's CUDA runtime module in this process (see the module docstring);
    DRIVER or BUILD_HOST. InfrastructureError when it cannot be."""
    import tvm  # (its import loads libtvm_runtime and tries the CUDA runtime)
    import tvm.support.nvcc  # noqa: F401  (registers TVM's callback, which ours replaces)
    import tvm_ffi

    if _State.runtime is None:
        _State.runtime = _load_driver()
        if tvm_ffi.get_global_func("ffi.Module.create.cuda", allow_missing=True) is None:
            _load_runtime_library()
    tvm_ffi.register_global_func(_CALLBACK, _compile_callback, override=True)
    return _State.runtime


def _load_driver() -> str:
    try:
        _State.handles.append(ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL))
        return DRIVER
    except OSError:
        pass
    path = _placeholder_driver()
    try:  # loaded first by path, it satisfies libtvm_runtime_cuda's need of libcuda.so.1
        _State.handles.append(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL))
    except OSError as e:
        raise InfrastructureError(f"cannot load the build-host placeholder driver {path}: {e}",
                                  "remove it (it is rebuilt), then rerun") from None
    return BUILD_HOST


def _placeholder_driver() -> str:
    """Path of the placeholder libcuda.so.1, compiled with cc on first use."""
    from ...native import built_library

    return built_library("cuda-build-host", "libcuda.so.1", _PLACEHOLDER_SOURCE,
                         ("-Wl,-soname,libcuda.so.1",),
                         "the placeholder CUDA driver that CUDA builds need on a machine "
                         "without the NVIDIA driver")


def _load_runtime_library() -> None:
    import tvm
    import tvm_ffi

    lib_dir = os.path.join(os.path.dirname(tvm.__file__), "lib")
    runtime = os.path.join(lib_dir, "libtvm_runtime_cuda.so")
    if not os.path.exists(runtime):
        raise InfrastructureError(f"this TVM has no CUDA runtime ({runtime} is missing)",
                                  "install an apache-tvm wheel built with CUDA, then rerun")
    try:
        ctypes.CDLL("libcudart.so.13", mode=ctypes.RTLD_GLOBAL)
    except OSError:
        _load_toolkit_cudart()
    try:
        _State.handles.append(ctypes.CDLL(runtime, mode=ctypes.RTLD_LOCAL))
    except OSError as e:
        raise InfrastructureError(f"TVM's CUDA runtime does not load: {e}",
                                  _TOOLKIT_REMEDY) from None
    if tvm_ffi.get_global_func("ffi.Module.create.cuda", allow_missing=True) is None:
        raise InfrastructureError(f"{runtime} loaded but registered no CUDA module",
                                  "reinstall apache-tvm, then rerun")


def _load_toolkit_cudart() -> None:
    nvcc = shutil.which("nvcc")
    roots = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    if nvcc:
        roots.insert(0, os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    for root in filter(None, roots):
        path = os.path.join(root, "lib64", "libcudart.so.13")
        if os.path.exists(path):
            _State.handles.append(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL))
            return
    raise InfrastructureError("TVM's CUDA runtime needs libcudart.so.13, which is neither "
                              "on the library path nor in a CUDA toolkit here",
                              "install the CUDA 13 toolkit (or add its lib64 to "
                              "LD_LIBRARY_PATH), then rerun")


def _compile_callback(code: str) -> bytearray:
    """TVM calls this with a module's CUDA source; returns the device binary."""
    import tvm
    from tvm.support import nvcc as tvm_nvcc

    target = tvm.target.Target.current(allow_none=True)
    if target is None or "arch" not in target.attrs:
        _State.failure = ("machine", "CUDA compiles through autosched's build_cuda, which sets "
                                     + "the target scope")
        raise RuntimeError(_State.failure[1])
    arch = str(target.attrs["arch"])
    try:
        if _State.compiler == NVCC:
            return tvm_nvcc.compile_cuda(code, target_format="fatbin", compiler="nvcc",
                                         arch=gencode_flags(arch))
        return tvm_nvcc.compile_cuda(code, target_format="cubin", compiler="nvrtc", arch=arch)
    except OSError as e:  # nvcc vanished or cannot be started
        _State.failure = ("machine", f"{_State.compiler} cannot run: {e}")
        raise
    except Exception as e:
        _State.failure = ("candidate", f"{_State.compiler}: {first_error_line(str(e))}")
        raise


def build_cuda(mod, target_config: dict, compiler: str = AUTO) -> CudaBuild:
    """Compile `mod` (an IRModule or PrimFunc) for the cuda target `target_config` into
    an executable that embeds device code for exactly its arch. CudaCompileError when
    the candidate does not compile; InfrastructureError when the machine cannot."""
    import tvm

    arch = arch_of(target_config)
    chosen = choose_compiler(compiler)
    runtime = ensure_cuda_runtime()
    from search_space.cuda.mma_intrin import store_layout
    from search_space.cuda.simt_gemm_pipeline import register_pipeline

    register_pipeline()   # the SIMT GEMM's double-buffered kernels name their pipeline
    target = tvm_target(target_config)
    _State.compiler, _State.failure = chosen, None
    try:  # tensor-core kernels' mma_store code generation needs the store layout
        with target, _async_copy_context(), store_layout():
            exe = tvm.compile(mod, target=target, **_pipeline_of(mod))
    except Exception as e:
        side, line = _State.failure or ("candidate", "build: " + _last_line(str(e)))
        if side == "machine":
            raise InfrastructureError(line, _TOOLKIT_REMEDY) from None
        if _State.failure is not None:
            _check_toolchain(chosen, target)  # a toolchain that fails everything is ours
        raise CudaCompileError(line) from None
    if not any(str(sub.kind) == "cuda" for sub in exe.mod.imports):
        raise CudaCompileError("build: the built module holds no CUDA kernel")
    return CudaBuild(exe, arch, chosen, runtime)


def _pipeline_of(mod) -> dict:
    """`tir_pipeline="tirx"` for a module whose functions say so in their attribute
    `autosched.tir_pipeline` (kernels written in TVM's TIRx, such as the Hopper GEMM of
    `search_space/cuda/hopper_gemm.py`); the default pipeline otherwise."""
    import tvm

    from search_space.cuda.common import PIPELINE_ATTR

    funcs = mod.functions.values() if isinstance(mod, tvm.IRModule) else [mod]
    asked = {str(f.attrs[PIPELINE_ATTR]) for f in funcs
             if f.attrs is not None and PIPELINE_ATTR in f.attrs}
    return {"tir_pipeline": asked.pop()} if len(asked) == 1 else {}


def _async_copy_context():
    """The current pass context with `tirx.use_async_copy` on: the copies a schedule's
    software pipeline marks asynchronous become `cp.async` (sm_80+); a kernel without
    such marks compiles as before."""
    import tvm

    current = tvm.transform.PassContext.current()
    config = dict(current.config)
    config["tirx.use_async_copy"] = True
    return tvm.transform.PassContext(opt_level=current.opt_level, config=config,
                                     disabled_pass=list(current.disabled_pass),
                                     required_pass=list(current.required_pass))


def _check_toolchain(compiler: str, target) -> None:
    """InfrastructureError when `compiler` cannot compile even a trivial kernel for the
    target (an unsupported arch, a broken install); cached per compiler and arch."""
    arch = str(target.attrs["arch"])
    key = (compiler, arch)
    if key not in _State.probed:
        saved = _State.failure
        _State.failure = None
        try:
            with target:
                _compile_callback(_PROBE_KERNEL)
            _State.probed[key] = None
        except Exception as e:
            _State.probed[key] = (_State.failure or ("", str(e)))[1]
        _State.failure = saved
    if _State.probed[key] is not None:
        raise InfrastructureError(f"the CUDA toolchain cannot compile even a trivial kernel "
                                  f"for {arch}: {_State.probed[key]}",
                                  f"use a target arch this {compiler} supports, or install "
                                  "a CUDA toolkit that supports it, then rerun")


def first_error_line(text: str) -> str:
    """The first line that names an error (nvcc prints the whole source first)."""
    lines = text.splitlines()
    tail = lines[next((i for i, ln in enumerate(lines) if ln.startswith("Compilation error:")),
                      0):]
    for ln in tail:
        if _ERROR.search(ln) and not _NOISE.match(ln):
            return _TMPDIR.sub("", ln.strip())[:400]
    meaningful = [ln.strip() for ln in tail if ln.strip()]
    return meaningful[-1][:400] if meaningful else "unknown error"


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "unknown error")[:400]


def cuda_source(executable) -> str:
    """The CUDA source TVM generated for a module built for a cuda target."""
    for sub in executable.mod.imports:
        if str(sub.kind) == "cuda":
            return sub.inspect_source()
    raise RuntimeError("the built module holds no CUDA kernel")
