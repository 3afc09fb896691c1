"""The wgmma sketch's fused epilogues (`search_space/cuda/hopper_gemm_epilogue.py`): which
GEMM + elementwise chains it takes and which it refuses, and that what it takes computes
the task's own values.

No emulator runs wgmma, so correctness is checked on the write-back alone: the kernel's
write-back made into a plain CPU function (`writeback_twin`: the same `Epilogue.value`
and `pair_value` the kernel's stores use) is fed the GEMM's exact result and compared
bit for bit with the task's unscheduled function built for llvm. Inputs are small
integers so the GEMM is exact in any accumulation (its fp32 result is the reference's C
whatever C's dtype); the operands are arbitrary floats. The addresses the kernel stores
to are checked by the layout tests in test_hopper_gemm.py."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SM90A = json.dumps({"kind": "cuda", "arch": "sm_90a"})
OPS = textwrap.dedent('''
    from tvm import te, tirx

    import autosched


    def _mm(M, N, K, dtype, acc, nk=False, name="C"):
        A = te.placeholder((M, K), name="A", dtype=dtype)
        B = te.placeholder((N, K) if nk else (K, N), name="B", dtype=dtype)
        k = te.reduce_axis((0, K), name="k")
        b_at = (lambda j: B[j, k]) if nk else (lambda j: B[k, j])
        C = te.compute((M, N), lambda i, j: te.sum(
            A[i, k].astype(acc) * b_at(j).astype(acc), axis=k), name=name)
        return A, B, C


    @autosched.workload
    def relu_cast(M=37, N=24, K=16, dtype="float16", out="bfloat16"):
        A, B, C = _mm(M, N, K, dtype, "float32")
        y = te.compute((M, N), lambda i, j: te.max(C[i, j], te.const(0, "float32")).astype(out),
                       name="relu")
        return A, B, y


    @autosched.workload
    def residual(M=37, N=24, K=16, dtype="float16"):
        R = te.placeholder((M, N), name="R", dtype="float32")
        A, B, C = _mm(M, N, K, dtype, "float32")
        s = te.compute((M, N), lambda i, j: C[i, j] * te.const(0.125, "float32"), name="scale")
        y = te.compute((M, N), lambda i, j: s[i, j] + R[i, j], name="res")
        return R, A, B, y


    @autosched.workload
    def row_bias_erf(M=37, N=24, K=16, dtype="bfloat16"):
        A, B, C = _mm(M, N, K, dtype, "float32", nk=True)
        b = te.placeholder((M,), name="b", dtype="float32")
        v = te.compute((M, N), lambda i, j: C[i, j] + b[i], name="bias")
        y = te.compute((M, N), lambda i, j: (v[i, j] * te.const(0.5, "float32") * (
            te.const(1.0, "float32") + te.erf(v[i, j] * te.const(0.7071067811865476,
                                                                 "float32")))).astype(dtype),
            name="gelu")
        return A, B, b, y


    @autosched.workload
    def batched_bias(Bt=3, M=19, N=24, K=16, dtype="float16"):
        a = te.placeholder((Bt, M, K), name="A", dtype=dtype)
        w = te.placeholder((Bt, K, N), name="B", dtype=dtype)
        bias = te.placeholder((Bt, 1, N), name="bias", dtype=dtype)
        k = te.reduce_axis((0, K), name="k")
        C = te.compute((Bt, M, N), lambda n, i, j: te.sum(a[n, i, k] * w[n, k, j], axis=k),
                       name="C")
        y = te.compute((Bt, M, N), lambda n, i, j: C[n, i, j] + bias[n, 0, j], name="y")
        return a, w, bias, y


    @autosched.workload
    def odd_n(M=37, N=23, K=16, dtype="float16"):
        return _mm(M, N, K, dtype, "float32", nk=True)


    @autosched.workload
    def shifted(M=37, N=24, K=16, dtype="float16"):
        A, B, C = _mm(M, N, K, dtype, "float32")
        y = te.compute((M, N), lambda i, j: C[i, (j + 1) % N], name="y")
        return A, B, y


    @autosched.workload
    def row_sum(M=37, N=24, K=16, dtype="float16"):
        A, B, C = _mm(M, N, K, dtype, "float32")
        j = te.reduce_axis((0, N), name="j")
        return A, B, te.compute((M,), lambda i: te.sum(C[i, j], axis=j), name="s")


    @autosched.workload
    def diagonal_operand(M=24, N=24, K=16, dtype="float16"):
        A, B, C = _mm(M, N, K, dtype, "float32")
        D = te.placeholder((2 * N,), name="D", dtype="float32")
        return A, B, D, te.compute((M, N), lambda i, j: C[i, j] + D[i + j], name="y")


    @autosched.workload
    def reads_input(M=24, N=24, K=24, dtype="float16"):
        A, B, C = _mm(M, N, K, dtype, "float32")
        return A, B, te.compute((M, N), lambda i, j: C[i, j] + A[i, j].astype("float32"),
                                name="y")


    @autosched.workload
    def two_outputs(M=24, N=24, K=16, dtype="float16"):
        A, B, C = _mm(M, N, K, dtype, "float32")
        return A, B, C, te.compute((M, N), lambda i, j: C[i, j] * 2.0, name="y")
''')


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    path = tmp_path_factory.mktemp("ops") / "epilogues.py"
    path.write_text(OPS)
    return str(path)


def _task(path: str, name: str, args=()):
    from autosched.workload import load_tasks

    return load_tasks(path, names=[name], arg_items=list(args))[0]


def _found(task):
    from autosched.target import resolve_target
    from search_space.cuda.hopper_gemm_sketch import explain

    return explain(task.func, resolve_target(SM90A))


def _raw(a):
    """The bits of an array (16-bit floats as uint16, 32-bit as uint32)."""
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _run_twin(task, found, inputs):
    """The kernel's write-back on the CPU, fed the GEMM's exact result."""
    import tvm

    from search_space.cuda.hopper_gemm_epilogue import writeback_twin

    s = found.shape
    by_name = {t.name: inputs[t.name] for t in task.inputs}
    names = [str(p.name) for p in task.func.params]
    a, b = (by_name[names[found.params.index(role)]] for role in ("A", "B"))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if not s.b_kn:
        b64 = np.swapaxes(b64, -1, -2)
    acc = np.matmul(a64, b64).astype(np.float32).reshape(s.batch, s.m, s.n)
    func = writeback_twin(s.batch, s.m, s.n, found.epilogue)
    lib = tvm.compile(tvm.IRModule({"main": func}), target="llvm").jit()
    dev = tvm.cpu()
    ops = [tvm.runtime.tensor(by_name[str(p.name)].reshape(-1), dev)
           for p in found.epilogue.operands]
    shape = [int(d) for d in func.params[-1].shape]
    out = tvm.runtime.tensor(np.zeros(shape, str(func.params[-1].dtype)), dev)
    lib["main"](tvm.runtime.tensor(acc, dev), *ops, out)
    return out.numpy()


CASES = [
    # (file, workload, args): bias [N] + GELU (tanh) in fp32, y fp16 / bf16; the same all
    # in fp16 (C accumulated in fp16 by the reference); ReLU + cast to bf16; scale +
    # residual [M, N] with the operand first among the parameters; bias [M] + GELU (erf)
    # with B [N, K]; a batched bias [B, 1, N]; a plain GEMM with an odd N (scalar stores)
    ("mp", "dense_bias_gelu_mp", ["M=37", "N=24", "K=16"]),
    ("mp", "dense_bias_gelu_mp", ["M=37", "N=24", "K=16", "dtype=bfloat16"]),
    ("gelu", "dense_bias_gelu", ["M=37", "N=24", "K=16", "dtype=float16"]),
    ("ops", "relu_cast", []),
    ("ops", "residual", []),
    ("ops", "row_bias_erf", []),
    ("ops", "batched_bias", []),
    ("ops", "odd_n", []),
]


@pytest.mark.parametrize("where, name, args", CASES)
def test_fused_writeback_equals_the_reference_bit_for_bit(ops, reference, where, name, args):
    path = {"mp": str(ROOT / "examples" / "mixed_precision.py"),
            "gelu": str(ROOT / "examples" / "dense_gelu.py"), "ops": ops}[where]
    task = _task(path, name, args)
    found, why = _found(task)
    assert found is not None, why
    rng = np.random.default_rng(7)
    names = [str(p.name) for p in task.func.params]
    gemm_inputs = {names[found.params.index(role)] for role in ("A", "B")}
    inputs = {}
    for t in task.inputs:
        if t.name in gemm_inputs:   # small integers: the GEMM is exact
            inputs[t.name] = rng.integers(-2, 3, t.shape).astype(t.dtype)
        else:
            inputs[t.name] = rng.standard_normal(t.shape).astype(t.dtype)
    (want,) = reference(task, inputs).values()
    got = _run_twin(task, found, inputs).reshape(-1)
    want_bits = _raw(want).reshape(-1)
    got = got.view(want_bits.dtype) if got.dtype.itemsize == 2 * want.dtype.itemsize \
        else _raw(got)   # stored as column pairs, or one by one
    assert np.abs(want.astype(np.float32)).max() > 0
    assert got.dtype == want_bits.dtype and np.array_equal(got, want_bits)


def test_parameters_keep_the_task_order(ops):
    found, _ = _found(_task(ops, "residual"))
    assert [p if isinstance(p, str) else str(p.name) for p in found.params] == \
        ["R", "A", "B", "C"]
    assert (found.shape.m, found.shape.n, found.shape.k, found.shape.out_dtype) == \
        (37, 24, 16, "float32")
    found, _ = _found(_task(str(ROOT / "examples" / "mixed_precision.py"),
                            "dense_bias_gelu_mp"))
    assert [p if isinstance(p, str) else str(p.name) for p in found.params] == \
        ["A", "B", "b", "C"]
    assert found.epilogue.c_dtype == "float32" and found.epilogue.out_dtype == "float16"


@pytest.mark.parametrize("name, why", [
    ("shifted", "y reads C at another element"),
    ("row_sum", "s reduces after the GEMM"),
    ("diagonal_operand", "y reads D at an index other than its batch, row, column or a "
                         "constant"),
    ("reads_input", "y reads A, not an epilogue operand"),
    ("two_outputs", "an intermediate result is also an output"),
])
def test_refused_chains(ops, name, why):
    found, got = _found(_task(ops, name))
    assert found is None and got == why

