"""A loaded library's parallel loops run on the process's OpenMP pool (torch's threads),
give the same answers there at any thread count, and fall back to TVM's pool, in one
warning, where the launcher cannot be built."""
from __future__ import annotations

import importlib
import logging
import os

import pytest
import torch

import autosched.torch as at
from autosched import kernel_pool


def _inputs(entry, seed=0):
    g = torch.Generator().manual_seed(seed)
    dtype = {"float32": torch.float32, "float64": torch.float64}
    return [torch.randn(s.shape, generator=g, dtype=dtype[s.dtype]) for s in entry.inputs]


def _reference(entry):
    module, _, name = entry.meta["torch_reference"].partition(":")
    return getattr(importlib.import_module(module), name)


def _launches_per_call(lib, entry) -> list[int]:
    counts = []
    for _ in range(3):
        before = kernel_pool.launches()
        lib[entry.workload](*_inputs(entry))
        counts.append(kernel_pool.launches() - before)
    return counts


@pytest.fixture
def default_pool(monkeypatch):
    monkeypatch.delenv(kernel_pool.POOL_VAR, raising=False)


def test_every_parallel_loop_runs_on_the_openmp_pool_with_equal_answers(
        nn_library, references_on_path, default_pool):
    lib = at.load_library(nn_library)
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            for entry in lib.manifest.kernels:
                inputs = _inputs(entry)
                out = lib[entry.workload](*inputs)
                tol = 1e-5 if entry.inputs[0].dtype == "float32" else 1e-12
                torch.testing.assert_close(out, _reference(entry)(*inputs), rtol=tol,
                                           atol=tol, msg=f"{entry.symbol} on {n} threads")
    finally:
        torch.set_num_threads(threads)
    # the test library parallelises each block's outer spatial loop: a matmul has one
    (matmul,) = [e for e in lib.manifest.kernels
                 if e.workload == "matmul" and e.inputs[0].dtype == "float32"]
    assert _launches_per_call(lib, matmul) == [1, 1, 1]


def test_tvms_own_pool_when_asked(nn_library, monkeypatch):
    monkeypatch.setenv(kernel_pool.POOL_VAR, "tvm")
    lib = at.load_library(nn_library)
    (matmul,) = [e for e in lib.manifest.kernels
                 if e.workload == "matmul" and e.inputs[0].dtype == "float32"]
    assert _launches_per_call(lib, matmul) == [0, 0, 0]
    monkeypatch.delenv(kernel_pool.POOL_VAR)
    lib = at.load_library(nn_library)  # loaded again: the loops go back to OpenMP
    assert _launches_per_call(lib, matmul) == [1, 1, 1]


def test_without_a_c_compiler_tvms_pool_sleeps_at_once_and_says_so_once(
        nn_library, references_on_path, monkeypatch, tmp_path, caplog):
    monkeypatch.delenv(kernel_pool.POOL_VAR, raising=False)
    monkeypatch.delenv(kernel_pool.SPIN_VAR, raising=False)
    built = kernel_pool.launcher()  # the launcher built from the real cache, loaded
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("PATH", str(tmp_path))          # no cc, no gcc
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    kernel_pool.launcher.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="autosched"):
            lib = at.load_library(nn_library)
            at.load_library(nn_library)
        before = built.autosched_pool_launches()
        entry = lib.entries("matmul")[0]
        inputs = _inputs(entry)
        torch.testing.assert_close(lib["matmul"](*inputs), _reference(entry)(*inputs))
        assert built.autosched_pool_launches() == before  # TVM's pool ran the loop
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "cannot build the OpenMP launcher" in warnings[0]
        assert "no C compiler" in warnings[0]
        assert os.environ[kernel_pool.SPIN_VAR] == "0"
    finally:
        kernel_pool.launcher.cache_clear()
    

def test_a_bad_pool_name_is_one_line():
    with pytest.raises(kernel_pool.UserError) as e:
        kernel_pool.requested_pool({kernel_pool.POOL_VAR: "threads"})
    assert str(e.value) == ("AUTOSCHED_KERNEL_POOL='threads': expected one of openmp, "
                            "tvm-yield, tvm")
    assert kernel_pool.requested_pool({kernel_pool.POOL_VAR: " TVM-Yield "}) == "tvm-yield"
    assert kernel_pool.requested_pool({}) == "openmp"
