"""Op files, workload selection, argument overrides and task keys."""
from __future__ import annotations

import subprocess
import sys

import pytest

from autosched.errors import UserError
from autosched.workload import load_op_file, load_tasks

MATMUL = """
from tvm import te
import autosched

@autosched.workload
def mm(M=16, N=8, K=4, dtype="float32"):
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    return A, B, te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")

@autosched.workload(name="add_one")
def add(M=16):
    A = te.placeholder((M,), name="A")
    return A, te.compute((M,), lambda i: A[i] + 1.0, name="B")
"""


def test_several_workloads_selection_and_args(write_op):
    path = write_op(MATMUL)
    defs = load_op_file(path)
    assert sorted(defs) == ["add_one", "mm"]
    tasks = load_tasks(path, ["mm"], ["M=32", "K=8"])
    assert [t.name for t in tasks] == ["mm(M=32,N=8,K=8,dtype=float32)"]
    t = tasks[0]
    assert t.flops == 2 * 32 * 8 * 8
    assert [s.shape for s in t.inputs] == [(32, 8), (8, 8)]
    assert [(s.name, s.shape, s.dtype) for s in t.outputs] == [("C", (32, 8), "float32")]


def test_repeated_arg_gives_shape_variants(write_op):
    tasks = load_tasks(write_op(MATMUL), ["mm"], ["M=16", "M=32", "N=4"])
    assert [(t.args["M"], t.args["N"]) for t in tasks] == [(16, 4), (32, 4)]
    assert len({t.key for t in tasks}) == 2


def test_key_changes_with_shape_dtype_and_computation(write_op):
    base = load_tasks(write_op(MATMUL), ["mm"])[0]
    shape = load_tasks(write_op(MATMUL), ["mm"], ["K=8"])[0]
    dtype = load_tasks(write_op(MATMUL), ["mm"], ["dtype=float64"])[0]
    other = load_tasks(write_op(MATMUL.replace("A[i, k] * B[k, j]", "A[i, k] + B[k, j]"),
                                "other.py"), ["mm"])[0]
    keys = {base.key, shape.key, dtype.key, other.key}
    assert len(keys) == 4


def test_key_ignores_tensor_names(write_op):
    a = load_tasks(write_op(MATMUL), ["mm"])[0]
    b = load_tasks(write_op(MATMUL.replace('name="A"', 'name="lhs"'), "renamed.py"), ["mm"])[0]
    assert a.key == b.key


def test_key_is_stable_across_processes(write_op):
    path = write_op(MATMUL)
    here = load_tasks(path, ["mm"])[0].key
    code = f"from autosched.workload import load_tasks; print(load_tasks({path!r}, ['mm'])[0].key)"
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={"PYTHONHASHSEED": "123", **__import__("os").environ})
    assert there.stdout.strip() == here


@pytest.mark.parametrize("source, message", [
    ("def f(:\n", "syntax error"),
    ("x = 1\n", "no @autosched.workload"),
    ("import autosched\n@autosched.workload\ndef f(M=4):\n    return 3\n", "must return TE tensors"),
    ("import autosched\n@autosched.workload\ndef f(M):\n    return 3\n", "needs a default"),
    ("raise RuntimeError('boom')\n", "RuntimeError: boom"),
])
def test_bad_op_files_raise_user_error(write_op, source, message):
    with pytest.raises(UserError, match=message):
        load_tasks(write_op(source))


def test_unknown_workload_and_arg(write_op):
    path = write_op(MATMUL)
    with pytest.raises(UserError, match="unknown workload 'nope'"):
        load_tasks(path, ["nope"])
    with pytest.raises(UserError, match="unknown --arg 'Q'"):
        load_tasks(path, None, ["Q=1"])
    with pytest.raises(UserError, match="expected a value like 16"):
        load_tasks(path, ["mm"], ["M=big"])


def test_examples_all_load(examples_dir):
    names = set()
    for op in ("matmul", "conv2d", "softmax", "dense_gelu", "batch_matmul"):
        names |= {t.workload for t in load_tasks(str(examples_dir / f"{op}.py"))}
    assert {"matmul", "conv2d", "depthwise_conv2d", "softmax", "layer_norm",
            "dense_bias_gelu", "batch_matmul"} <= names
