"""A library that does not fit this process or machine is refused with one clear error, and
nothing that was loaded before stops working."""
from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch

import autosched.torch as at
from autosched.torch import compat
from autosched.torch.manifest import read_manifest


@pytest.fixture
def lib_copy(nn_library, tmp_path):
    """A copy of the test library and a function that edits its manifest."""
    target = tmp_path / "lib"
    shutil.copytree(nn_library, target)

    def edit(change):
        path = target / "manifest.json"
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))
        return target

    return target, edit


def _set(path, value):
    def change(data):
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return change


@pytest.mark.parametrize("path,value,message", [
    (("format",), 2, "library format 2; this autosched reads format 1"),
    (("versions", "tvm"), "0.26.0", "built with apache-tvm 0.26.0, this process has 0.27"),
    (("versions", "tvm_ffi"), "0.2.1", "built with apache-tvm-ffi 0.2.1, this process has 0.1"),
    (("target", "kind"), "rocm", "target kind 'rocm' is not supported"),
    (("target",), {"kind": "cuda", "arch": "sm_90"}, "CUDA library (sm_90) but this process "
     "has a CPU-only build of torch"),
    (("hardware", "machine"), "aarch64", "built for aarch64 CPUs, this machine is x86_64"),
    (("library",), "../kernels.so", "must be a file in the library directory"),
    (("library",), "other.so", "other.so is missing"),
    (("kernels", 0, "symbol"), "no_such_kernel", "missing from the library: no_such_kernel"),
    (("kernels", 0, "inputs", 0, "dtype"), "float8_e4m3", "has no torch equivalent"),
    (("kernels", 0, "meta", "backward", "x", "inputs"), ["grad:z"], "unknown tensor 'grad:z'"),
    (("kernels", 0, "meta", "backward", "q"), {"workload": "w", "inputs": []},
     "names 'q', which is not an input"),
    (("kernels",), [], "holds no kernels"),
])
def test_misfit_library_is_refused(lib_copy, path, value, message):
    if path == ("target",) and torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    _, edit = lib_copy
    with pytest.raises(at.LibraryError, match=message.replace("(", r"\(").replace(")", r"\)")):
        at.load_library(edit(_set(path, value)))


def test_missing_or_broken_files(lib_copy, tmp_path):
    target, edit = lib_copy
    with pytest.raises(at.LibraryError, match="is not a directory"):
        at.load_library(tmp_path / "nowhere")
    (target / "kernels.so").write_bytes(b"\x7fELF but not really a shared object")
    with pytest.raises(at.LibraryError, match="cannot be loaded"):
        at.load_library(target)
    (target / "manifest.json").write_text("{not json")
    with pytest.raises(at.LibraryError, match="unreadable manifest"):
        at.load_library(target)
    (target / "manifest.json").unlink()
    with pytest.raises(at.LibraryError, match="no manifest"):
        at.load_library(target)


def test_two_kernels_with_the_same_inputs_are_ambiguous(lib_copy):
    def duplicate(data):
        first, second = data["kernels"][:2]
        assert first["workload"] == second["workload"] == "linear"
        second["inputs"] = first["inputs"]
    _, edit = lib_copy
    with pytest.raises(at.LibraryError, match="take the same input shapes"):
        at.load_library(edit(duplicate))


def test_cpu_lacking_the_instruction_set_is_refused(lib_copy):
    from autosched.torch.manifest import read_manifest

    target, edit = lib_copy
    path = edit(_set(("target", "mcpu"), "skylake-avx512"))  # needs AVX-512
    flags = frozenset(compat.MCPU_FLAGS["skylake-avx512"]) - {"avx512f", "avx512bw"}
    without = compat.HostCPU(compat.HostCPU.detect().model, flags)
    with pytest.raises(at.LibraryError, match="needs avx512bw, avx512f; this CPU .* lacks them"):
        compat.check_cpu(read_manifest(path), host=without)


def test_another_model_with_the_same_instruction_set_loads_with_a_warning(lib_copy, caplog):
    _, edit = lib_copy
    path = edit(_set(("hardware", "model"), "Some Other CPU"))
    with caplog.at_level(logging.WARNING, logger="autosched.torch"):
        lib = at.load_library(path)
    assert "linear" in lib
    assert any("tuned on 'Some Other CPU'" in r.getMessage() for r in caplog.records)


def test_unknown_mcpu_on_another_model_needs_an_explicit_override(lib_copy):
    _, edit = lib_copy
    edit(_set(("hardware", "model"), "Some Other CPU"))
    path = edit(_set(("target", "mcpu"), "neoverse-v2"))
    with pytest.raises(at.LibraryError, match="Pass check_hardware=False"):
        at.load_library(path)
    assert "linear" in at.load_library(path, check_hardware=False)


def test_failed_load_leaves_previous_ops_working(nn_ops, lib_copy):
    def change_matmul_schema(data):
        for k in data["kernels"]:
            if k["workload"] == "matmul":
                k["inputs"].append({"name": "extra", "shape": [1], "dtype": "float32"})
    _, edit = lib_copy
    with pytest.raises(at.LibraryError, match="already defined in this process"):
        at.load_library(edit(change_matmul_schema))
    torch.manual_seed(0)
    a, b = torch.randn(8, 6), torch.randn(6, 5)
    torch.testing.assert_close(torch.ops.autosched.matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)
    assert at.ops.bound_kernels("matmul") is not None


def test_missing_backward_kernel_is_a_clear_error_at_backward(lib_copy):
    def only_matmul(data):
        data["kernels"] = [k for k in data["kernels"] if k["workload"] in ("matmul",
                                                                            "matmul_grad_a")]
    _, edit = lib_copy
    at.load_library(edit(only_matmul))
    torch.manual_seed(0)
    a = torch.randn(8, 6, requires_grad=True)
    b = torch.randn(6, 5, requires_grad=True)
    out = torch.ops.autosched.matmul(a, b)
    with pytest.raises(at.MissingBackwardError,
                       match="no gradient for input 'B'.*'matmul_grad_b', which the library lacks"):
        out.sum().backward()
    # the gradient that the library has still works when only it is needed
    out = torch.ops.autosched.matmul(a, b.detach())
    out.sum().backward()
    torch.testing.assert_close(a.grad, torch.ones(8, 5) @ b.detach().t(), rtol=1e-5, atol=1e-5)


def test_manifest_round_trip_keeps_backward_pairing(nn_library):
    m = read_manifest(nn_library)
    linear = next(k for k in m.kernels if k.workload == "linear")
    assert [(g.input, g.workload, g.inputs) for g in linear.backward] == [
        ("x", "linear_grad_x", ("grad:y", "w")), ("w", "linear_grad_w", ("grad:y", "x")),
        ("b", "linear_grad_b", ("grad:y",))]
    assert linear.torch_reference == "nn_reference:linear"


def test_cuda_runtime_without_a_driver_is_a_clear_error():
    import ctypes.util

    from autosched.torch import loader

    if ctypes.util.find_library("cuda"):
        pytest.skip("this machine has a CUDA driver")
    with pytest.raises(at.LibraryError, match="libcuda.so.1"):
        loader.load_cuda_runtime()
