"""Loading and running a CPU library needs torch, tvm_ffi and TVM's runtime library, not the
TVM compiler or Python package; without the runtime library a kernel that needs it is
refused at load instead of crashing on its first call."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RUN = textwrap.dedent("""
    import sys
    import torch
    import autosched.torch
    lib = autosched.torch.load_library(sys.argv[1])
    a, b = torch.randn(8, 6, requires_grad=True), torch.randn(6, 5)
    c = torch.ops.autosched.matmul(a, b)
    c.sum().backward()
    assert torch.allclose(c, a @ b, atol=1e-5)
    assert torch.allclose(a.grad, torch.ones(8, 5) @ b.t(), atol=1e-5)
    x = torch.randn(16, 12)
    assert torch.allclose(torch.ops.autosched.softmax(x), torch.softmax(x, -1), atol=1e-6)
    loaded = sorted(m for m in sys.modules if m == "tvm" or m.startswith("tvm."))
    print("TVM_MODULES", loaded)
""")

NO_RUNTIME = textwrap.dedent("""
    import importlib.abc, sys

    class NoTVM(importlib.abc.MetaPathFinder):   # as if only tvm_ffi were installed
        def find_spec(self, name, path=None, target=None):
            if name == "tvm" or name.startswith("tvm."):
                raise ModuleNotFoundError(name)

    sys.meta_path.insert(0, NoTVM())
    import autosched.torch
    try:
        autosched.torch.load_library(sys.argv[1])
    except autosched.torch.LibraryError as e:
        print("REFUSED", e)
""")


def _run(script, library):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", script, str(library)], env=env,
                          capture_output=True, text=True, timeout=300)


def test_library_uses_the_runtime_thread_pool(nn_library):
    lib = ctypes.CDLL(str(nn_library / "kernels.so"))
    ctypes.c_void_p.in_dll(lib, "__TVMBackendParallelLaunch")  # raises if absent


def test_cpu_library_loads_without_importing_tvm(nn_library):
    out = _run(RUN, nn_library)
    assert out.returncode == 0, out.stderr
    assert "TVM_MODULES []" in out.stdout


def test_missing_runtime_library_is_refused_not_crashed(nn_library):
    out = _run(NO_RUNTIME, nn_library)
    assert out.returncode == 0, out.stderr
    assert "REFUSED" in out.stdout
    assert "TVMBackendParallelLaunch" in out.stdout and "libtvm_runtime.so" in out.stdout
