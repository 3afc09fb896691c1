"""Proof that a CUDA candidate compiles, without a GPU.

`tvm.compile` keeps CUDA kernels as source inside the module (the binary is made when
the library is loaded on a GPU machine). `compile_candidate` builds the module, takes
that source and compiles it with nvcc to a cubin for the target's architecture, so a
dry run catches every candidate that would fail to compile on the GPU.
"""
from __future__ import annotations

import re
import shutil
import time

_NOISE = re.compile(r"^(ptxas info|ptxas\s+\.|\s*$|Compilation error:|#|//|extern |\s)")
_ERROR = re.compile(r"(error|fatal)", re.IGNORECASE)
_TMPDIR = re.compile(r"^\S*/(?=tvm_kernels\.)")   # nvcc's temporary directory


def cuda_source(exe) -> str:
    """The CUDA source of a module built by `tvm.compile` for a cuda target."""
    for sub in exe.mod.imports:
        if str(sub.kind) == "cuda":
            return sub.inspect_source()
    raise RuntimeError("the built module holds no CUDA kernel")


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


def _tvm_error(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else type(e).__name__)[:400]


def compile_candidate(mod, target) -> tuple[bool, str, float]:
    """Build `mod` for `target` (a cuda TargetSpec) and compile its CUDA source with
    nvcc to a cubin for `target.config["arch"]`.

    Returns (ok, message, seconds): message is "" on success, else one line saying what
    failed (TVM's build or nvcc's first error); never raises for a bad candidate.
    """
    import tvm
    from tvm.support import nvcc

    start = time.perf_counter()
    if shutil.which("nvcc") is None:
        return False, "nvcc not found on PATH", 0.0
    tvm_target = target.tvm()
    try:
        exe = tvm.compile(mod, target=tvm_target)
        src = cuda_source(exe)
    except Exception as e:  # TVM refused to lower or generate the kernel
        return False, "build: " + _tvm_error(e), time.perf_counter() - start
    arch = str(target.config.get("arch", "sm_90"))
    try:
        with tvm_target:
            cubin = nvcc.compile_cuda(src, target_format="cubin", arch=arch, compiler="nvcc")
    except Exception as e:  # nvcc rejected the generated source
        return False, "nvcc: " + first_error_line(str(e)), time.perf_counter() - start
    if not cubin:
        return False, "nvcc: empty cubin", time.perf_counter() - start
    return True, "", time.perf_counter() - start
