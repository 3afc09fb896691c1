"""The GEMM tasks the SIMT sketch's tests schedule, their numpy references and the CUDA
target they are scheduled for: examples' workloads at given shapes, and a dense + bias +
ReLU small enough to emulate."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def simt_target(arch: str = "sm_90"):
    """The CUDA target of `arch` with its default limits (no GPU here)."""
    from autosched.target import resolve_target

    return resolve_target(json.dumps({"kind": "cuda", "arch": arch}))


def _dense_bias_relu(M=19, N=40, K=32, dtype="float32"):
    from tvm import te

    x = te.placeholder((M, K), name="x", dtype=dtype)
    w = te.placeholder((N, K), name="w", dtype=dtype)
    b = te.placeholder((N,), name="b", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    d = te.compute((M, N), lambda i, j: te.sum(x[i, k] * w[j, k], axis=k), name="dense")
    y = te.compute((M, N), lambda i, j: te.max(d[i, j] + b[j], te.const(0, dtype)), name="relu")
    return x, w, b, y


def simt_task(name: str, **args):
    """The task of `name` (an example's workload, or the small dense + bias + ReLU) at `args`."""
    from autosched.workload import WorkloadDef, load_tasks, make_task

    if name == "dense_bias_relu":
        return make_task(WorkloadDef(name, _dense_bias_relu, {"M": 19, "N": 40, "K": 32}),
                         dict(args))
    path = ROOT / "examples" / f"{name}.py"
    items = [f"{k}={v}" for k, v in args.items()]
    return next(t for t in load_tasks(str(path), arg_items=items) if t.workload == name)


def simt_reference(name: str, inputs: dict) -> np.ndarray:
    """numpy's value of the task `name` on `inputs`."""
    if name == "dense_bias_relu":
        return np.maximum(inputs["x"] @ inputs["w"].T + inputs["b"], 0)
    if name == "block_transform":   # T = C X, Y = T C^T: two GEMM kernels in a chain
        c = inputs["C"]
        return c @ inputs["X"] @ c.T
    return inputs["A"] @ inputs["B"]
