"""Candidates compile with nvcc to a cubin for the target's architecture, and the
compile check turns every failure into one line."""
from __future__ import annotations

import shutil

import pytest

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

PER_OP = 12   # bench/cuda_dry_run.py runs 64 per operator


def _target(base, **overrides):
    from autosched.target import TargetSpec

    return TargetSpec("cuda", dict(base.config, **overrides), base.fingerprint, False)


@needs_nvcc
def test_compiles_a_tiled_matmul_to_a_cubin(space_of, distinct_samples, cuda_target):
    import tvm

    from autosched.measure.nvcc import compile_candidate, cuda_source

    (cand, mod), = distinct_samples(space_of("matmul"), 1, seed=2, sketch="tile")
    src = cuda_source(tvm.compile(mod, target=cuda_target.tvm()))
    assert "__global__" in src and "__shared__" in src and "__launch_bounds__" in src
    ok, msg, seconds = compile_candidate(mod, cuda_target)
    assert (ok, msg) == (True, "") and seconds > 0


@needs_nvcc
def test_nvcc_error_is_one_line(space_of, distinct_samples, cuda_target):
    from autosched.measure.nvcc import compile_candidate

    (_, mod), = distinct_samples(space_of("softmax"), 1, seed=2, sketch="rows")
    ok, msg, _ = compile_candidate(mod, _target(cuda_target, arch="sm_12"))
    assert not ok and "\n" not in msg and msg.startswith(("nvcc:", "build:"))
    assert "sm_12" in msg


def test_unscheduled_module_is_a_build_failure_not_a_traceback(tasks, cuda_target):
    from autosched.measure.nvcc import compile_candidate

    ok, msg, _ = compile_candidate(tasks["matmul"].mod, cuda_target)
    assert not ok and msg == "build: the built module holds no CUDA kernel"


def test_first_error_line_skips_the_source_dump():
    from autosched.measure.nvcc import first_error_line

    text = ("extern \"C\" __global__ void k() {\n  int error_count = 0;\n}\n"
            "Compilation error:\n/tmp/x/tvm_kernels.cu(3): error: identifier \"foo\" is "
            "undefined\n1 error detected in the compilation of \"/tmp/x/tvm_kernels.cu\".\n")
    assert first_error_line(text) == 'tvm_kernels.cu(3): error: identifier "foo" is undefined'


@needs_nvcc
@pytest.mark.parametrize("workload", ["matmul", "conv2d", "depthwise_conv2d", "softmax",
                                      "layer_norm", "dense_bias_gelu", "batch_matmul"])
def test_sampled_candidates_pass_check_and_compile(space_of, distinct_samples, cuda_target,
                                                   workload):
    """At least 90% of distinct sampled candidates fit the target and compile."""
    from autosched.measure.nvcc import compile_candidate

    space = space_of(workload)
    samples = distinct_samples(space, PER_OP, seed=0)
    assert len(samples) == PER_OP
    failures = []
    for cand, mod in samples:
        reason = space.check(mod)
        if reason is None:
            ok, msg, _ = compile_candidate(mod, cuda_target)
            reason = None if ok else msg
        if reason is not None:
            failures.append((cand.dumps(), reason))
    assert len(failures) <= PER_OP // 10, failures
