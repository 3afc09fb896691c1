"""A stand-in NVIDIA driver (`libcuda.so.1`) for tests of the GPU machine's code paths on
a machine without a GPU.

TVM's CUDA runtime (`libtvm_runtime_cuda.so`) links against the driver library, so on a
machine without one it cannot load, and TVM keeps CUDA kernels as source. With this
stand-in on `LD_LIBRARY_PATH` it loads and registers itself exactly as on a GPU
machine: `tvm.compile` then compiles kernels at build time through
`tvm_callback_cuda_compile`, and a library holding a fatbin can be loaded. Every driver
function fails (CUDA_ERROR_NO_DEVICE), so nothing can run: the CUDA runtime sees no
device. Only the functions the TVM runtime imports are defined.
"""
from __future__ import annotations

import os
import shutil
import subprocess

SONAME = "libcuda.so.1"
NO_DEVICE = 100  # CUDA_ERROR_NO_DEVICE

SOURCE = r"""
typedef int CUresult;
#define NO_DEVICE %(code)d
CUresult cuDeviceGetName(char *name, int len, int dev) { return NO_DEVICE; }
CUresult cuFuncSetAttribute(void *f, int attr, int value) { return NO_DEVICE; }
CUresult cuGetErrorName(CUresult e, const char **s) { *s = "CUDA_ERROR_NO_DEVICE"; return 0; }
CUresult cuGetErrorString(CUresult e, const char **s) {
    *s = "no CUDA-capable device is detected"; return 0; }
CUresult cuLaunchKernelEx(const void *config, void *f, void **params, void **extra) {
    return NO_DEVICE; }
CUresult cuModuleGetFunction(void **f, void *mod, const char *name) { return NO_DEVICE; }
CUresult cuModuleLoadData(void **mod, const void *image) { return NO_DEVICE; }
CUresult cuModuleUnload(void *mod) { return NO_DEVICE; }
CUresult cuTensorMapEncodeTiled(void) { return NO_DEVICE; }
"""


def cuda_toolkit_lib() -> str | None:
    """The CUDA toolkit's library folder holding `libcudart.so.13` (which TVM's CUDA
    runtime also needs), or None when no toolkit is installed."""
    nvcc = shutil.which("nvcc")
    candidates = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", "/usr/local/cuda-13.0"]
    if nvcc:
        real = os.path.realpath(nvcc)
        candidates.insert(0, os.path.dirname(os.path.dirname(real)))
        try:  # /usr/local/bin/nvcc may be a wrapper script that execs the real one
            with open(nvcc, errors="replace") as f:
                for word in f.read().split():
                    if word.endswith("/bin/nvcc"):
                        candidates.insert(0, os.path.dirname(os.path.dirname(word)))
        except OSError:
            pass
    for root in candidates:
        lib = os.path.join(root, "lib64") if root else ""
        if lib and os.path.exists(os.path.join(lib, "libcudart.so.13")):
            return lib
    return None


def build_standin(directory: str) -> str:
    """Compile the stand-in driver into `directory` with `cc`; returns the folder to put
    first on `LD_LIBRARY_PATH` (it also holds nothing else)."""
    os.makedirs(directory, exist_ok=True)
    src = os.path.join(directory, "standin_cuda.c")
    with open(src, "w") as f:
        f.write(SOURCE % {"code": NO_DEVICE})
    subprocess.run(["cc", "-shared", "-fPIC", f"-Wl,-soname,{SONAME}", "-o",
                    os.path.join(directory, SONAME), src], check=True, capture_output=True)
    return directory


def gpu_machine_env(directory: str, base: dict | None = None) -> dict:
    """An environment (for a subprocess) in which TVM's CUDA runtime loads as on a GPU
    machine: the stand-in driver and the toolkit's `libcudart` on `LD_LIBRARY_PATH`."""
    env = dict(os.environ if base is None else base)
    paths = [directory, cuda_toolkit_lib() or "", env.get("LD_LIBRARY_PATH", "")]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in paths if p)
    return env


def driver_installed() -> bool:
    """Whether this machine has an NVIDIA driver (`libcuda.so.1` loads)."""
    import ctypes

    try:
        ctypes.CDLL(SONAME)
        return True
    except OSError:
        return False


# Python source (for a subprocess script) that makes `sch`: a CUDA schedule of a 64K
# element scale whose 256 KiB shared-memory stage no GPU has, so ptxas rejects it.
SHARED_OVERFLOW_SCHEDULE = '''
import tvm
from tvm import te
a = te.placeholder((65536,), name="a")
b = te.compute((65536,), lambda i: a[i] * 2, name="b")
sch = tvm.s_tir.Schedule(te.create_prim_func([a, b]))
block = sch.get_sblock("b")
bx, _, tx = sch.split(sch.get_loops(block)[0], [1, 64, 1024])
sch.bind(bx, "blockIdx.x")
sch.bind(tx, "threadIdx.x")
shared = sch.cache_read(block, 0, "shared")   # 256 KiB: more than any GPU has
sch.compute_at(shared, bx)
_, t = sch.split(sch.get_loops(shared)[-1], [None, 1024])
sch.bind(t, "threadIdx.x")
'''
