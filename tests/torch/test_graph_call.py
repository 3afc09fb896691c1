"""The `.graph` overload's CPU kernel in C++ (autosched/graph_call.py): it is what
torch's dispatcher runs, it computes exactly what the Python path computes (also for
inputs that are not contiguous or not aligned), a call it does not serve gets the Python
path's answer (its error, or the torch reference with fallback), a library loaded later
replaces the kernels it runs, and `AUTOSCHED_GRAPH_CALL=python` keeps it out."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


def _inputs(entry, seed=0):
    g = torch.Generator().manual_seed(seed)
    dtype = {"float32": torch.float32, "float64": torch.float64}
    return [torch.randn(s.shape, generator=g, dtype=dtype[s.dtype]) for s in entry.inputs]


def _cpu_kernel(workload: str) -> str:
    """Where the CPU kernel of `autosched::<workload>.graph` was registered."""
    dump = torch._C._dispatch_dump(f"autosched::{workload}.graph")
    return next(line for line in dump.splitlines() if line.startswith("CPU:"))


def test_the_cpu_kernel_is_cpp_and_equals_the_python_path(nn_ops):
    from autosched import graph_call
    from autosched.torch.ops import bound_kernels

    assert graph_call.native() is not None
    for entry in nn_ops.manifest.kernels:
        assert "graph_call.cpp" in _cpu_kernel(entry.workload)
        inputs = _inputs(entry)
        got = nn_ops.graph_op(entry.workload)(*inputs)
        want = bound_kernels(entry.workload).run(inputs)
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))


def test_inputs_not_contiguous_or_not_aligned_are_copied_first(nn_ops):
    (entry,) = [k for k in nn_ops.manifest.kernels if k.workload == "matmul"
                and k.inputs[0].dtype == "float32"]
    a, b = _inputs(entry)
    want = nn_ops.graph_op("matmul")(a, b)
    strided = a.t().contiguous().t()                       # a's values, column-major
    offset = torch.empty(a.numel() + 1)[1:].view(a.shape)  # 4 bytes past an aligned start
    offset.copy_(a)
    assert not strided.is_contiguous() and offset.data_ptr() % 64
    for x in (strided, offset):
        assert torch.equal(nn_ops.graph_op("matmul")(x, b), want)


def test_a_call_it_does_not_serve_gets_the_python_paths_answer(nn_ops, nn_library,
                                                               references_on_path):
    import autosched.torch
    from autosched.torch.errors import KernelArgumentError

    x, w, bias = torch.randn(3, 7), torch.randn(2, 7), torch.randn(2)   # no such kernel
    with pytest.raises(KernelArgumentError, match="has no kernel for"):
        nn_ops.graph_op("linear")(x, w, bias)
    lib = autosched.torch.load_library(nn_library, fallback=True)
    assert torch.allclose(lib.graph_op("linear")(x, w, bias), x @ w.t() + bias, atol=1e-6)


def test_a_library_loaded_later_replaces_the_kernels_it_runs(nn_ops, tmp_path):
    import autosched.torch
    from autosched.torch.ops import bound_kernels
    from support.torch_library import build_library

    (entry,) = [k for k in nn_ops.manifest.kernels if k.workload == "gelu"
                and k.inputs[0].dtype == "float32" and k.inputs[0].shape == (8, 16)]
    (x,) = _inputs(entry)
    assert torch.equal(nn_ops.graph_op("gelu")(x), nn_ops["gelu"](x))
    other = autosched.torch.load_library(build_library(
        tmp_path / "lib", {"gelu": [{"M": 4, "N": 5}]}))
    from autosched.torch.errors import KernelArgumentError

    with pytest.raises(KernelArgumentError):   # the earlier library's shape is gone
        other.graph_op("gelu")(x)
    y = torch.randn(4, 5)
    assert torch.equal(other.graph_op("gelu")(y), bound_kernels("gelu").run([y])[0])
    assert "graph_call.cpp" in _cpu_kernel("gelu")


def test_python_serves_the_calls_when_asked(nn_library):
    code = f"""
import torch, autosched.torch
from autosched import graph_call
lib = autosched.torch.load_library({str(nn_library)!r})
assert graph_call.native() is None
dump = torch._C._dispatch_dump("autosched::gelu.graph")
print(next(l for l in dump.splitlines() if l.startswith("CPU:")))
x = torch.randn(8, 16)
print(torch.equal(lib.graph_op("gelu")(x), lib["gelu"](x)))
"""
    env = dict(os.environ, AUTOSCHED_GRAPH_CALL="python",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    where, equal = done.stdout.splitlines()[-2:]
    assert "ops.py" in where and equal == "True"


def test_a_bad_setting_is_one_line():
    from autosched.errors import UserError
    from autosched.graph_call import requested_call

    assert requested_call({}) == "native"
    assert requested_call({"AUTOSCHED_GRAPH_CALL": " Python "}) == "python"
    with pytest.raises(UserError, match="AUTOSCHED_GRAPH_CALL='cxx': expected native or"):
        requested_call({"AUTOSCHED_GRAPH_CALL": "cxx"})


def test_a_library_written_again_in_its_folder_loads_its_new_kernels(tmp_path):
    """Export writes a library, loads it, then writes the winners only into the same
    folder and loads that: while the first one's kernels are still bound, the loader
    must not hand back the first object (whose symbols name other variants)."""
    import os
    import shutil

    import autosched.torch
    from autosched.torch.ops import bound_kernels
    from support.torch_library import build_library

    folder = build_library(tmp_path / "lib", {"gelu": [{"M": 4, "N": 5}, {"M": 8, "N": 16}],
                                              "softmax": [{"M": 4, "N": 5}]})
    first = autosched.torch.load_library(folder)
    assert {e.symbol for e in first.manifest.kernels if e.workload == "gelu"} != {"gelu"}
    again = build_library(tmp_path / "again", {"gelu": [{"M": 4, "N": 5}]})
    for name in ("kernels.so", "manifest.json"):   # replaced as export replaces them
        shutil.copyfile(again / name, tmp_path / f"{name}.new")
        os.replace(tmp_path / f"{name}.new", folder / name)
    second = autosched.torch.load_library(folder)   # softmax of the first stays bound
    assert [e.symbol for e in second.manifest.kernels] == ["gelu"]
    x = torch.randn(4, 5)
    assert torch.equal(second.graph_op("gelu")(x), bound_kernels("gelu").run([x])[0])
    assert torch.allclose(second["gelu"](x), torch.nn.functional.gelu(x, approximate="tanh"),
                          atol=1e-5)
