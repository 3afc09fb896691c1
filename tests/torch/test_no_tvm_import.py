"""Loading and running a CPU library needs tvm_ffi and torch only, not the TVM compiler."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import sys
    import torch
    import autosched.torch
    lib = autosched.torch.load_library(sys.argv[1])
    a, b = torch.randn(8, 6, requires_grad=True), torch.randn(6, 5)
    c = torch.ops.autosched.matmul(a, b)
    c.sum().backward()
    assert torch.allclose(c, a @ b, atol=1e-5)
    assert torch.allclose(a.grad, torch.ones(8, 5) @ b.t(), atol=1e-5)
    loaded = sorted(m for m in sys.modules if m == "tvm" or m.startswith("tvm."))
    print("TVM_MODULES", loaded)
""")


def test_cpu_library_loads_without_importing_tvm(nn_library):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(nn_library)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "TVM_MODULES []" in out.stdout
