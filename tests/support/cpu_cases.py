"""Small instances of the example operators and their numpy references (the CPU space tests'
cases)."""
from __future__ import annotations

import math
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _conv(data, weight, pad, depthwise=False):
    padded = np.pad(data, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    r, s = weight.shape[-2:]
    win = np.lib.stride_tricks.sliding_window_view(padded, (r, s), axis=(2, 3))
    if depthwise:
        return np.einsum("ncyxrs,crs->ncyx", win, weight)
    return np.einsum("ncyxrs,fcrs->nfyx", win, weight)


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _dense_gelu(x, w, b):
    v = x @ w.T + b
    return 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))


# name -> (op file, workload, small arguments, numpy reference, sketches offered)
CASES = {
    "matmul": ("matmul.py", "matmul", ["M=64", "N=64", "K=48"],
               lambda a, b: a @ b, ["default", "microkernel", "tile", "tile_pack"]),
    "batch_matmul": ("batch_matmul.py", "batch_matmul", ["B=2", "M=32", "N=48", "K=16"],
                     np.matmul, ["default", "microkernel", "tile", "tile_pack"]),
    "conv2d": ("conv2d.py", "conv2d", ["C=8", "H=10", "W=10", "F=32"],
               lambda d, w: _conv(d, w, 1), ["default", "microkernel", "tile", "tile_pack"]),
    "depthwise_conv2d": ("conv2d.py", "depthwise_conv2d", ["C=32", "H=10", "W=10"],
                         lambda d, w: _conv(d, w, 1, True), ["default", "tile"]),
    "softmax": ("softmax.py", "softmax", ["M=16", "N=64"], _softmax,
                ["default", "rows", "rows_one_pass"]),
    "layer_norm": ("softmax.py", "layer_norm", ["M=16", "N=48"], _layer_norm,
                   ["default", "rows", "rows_one_pass"]),
    "dense_gelu": ("dense_gelu.py", "dense_bias_gelu", ["M=32", "N=64", "K=32"], _dense_gelu,
                   ["default", "microkernel", "tile_pack"]),
}


_TASKS = {}


def small_task(case: str):
    """The Task of one case, loaded once per session."""
    if case not in _TASKS:
        import autosched

        path, name, args, _, _ = CASES[case]
        (task,) = autosched.load_tasks(os.path.join(ROOT, "examples", path), [name], args)
        _TASKS[case] = task
    return _TASKS[case]


_SPACES = {}


def small_space(case: str, target):
    if case not in _SPACES:
        from search_space import generate_space

        _SPACES[case] = generate_space(small_task(case), target)
    return _SPACES[case]


def inputs_for(task, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(t.shape).astype(t.dtype) for t in task.inputs]


def reference(case: str, args: list) -> np.ndarray:
    return CASES[case][3](*args)


def run_module(mod, target, args: list, out_spec) -> np.ndarray:
    """Build `mod` for the CPU, run it once, return the output."""
    import tvm

    rt = tvm.compile(mod, target=target.tvm()).jit()
    dev = tvm.cpu()
    bufs = [tvm.runtime.tensor(a, dev) for a in args]
    bufs.append(tvm.runtime.tensor(np.zeros(out_spec.shape, out_spec.dtype), dev))
    rt["main"](*bufs)
    return bufs[-1].numpy()
