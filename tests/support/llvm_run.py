"""Run a task's module (or a schedule of it) with TVM's llvm backend on given inputs, the
way the CPU-realised GPU sketches are checked bit for bit against the task's own module:
16-bit inputs drawn from the standard normal, bfloat16 held as its upper 16 bits."""
from __future__ import annotations

import numpy as np


def bf16_tensor(x: np.ndarray):
    """A bfloat16 tensor holding `x` truncated (numpy has no bfloat16)."""
    import tvm

    bits = (x.astype("float32").view("uint32") >> 16).astype("uint16")
    return tvm.runtime.tensor(bits, tvm.cpu())._create_view(x.shape, "bfloat16")


def normal_inputs(task, seed: int = 0) -> dict:
    """name -> tensor of each of `task`'s inputs, standard normal in its dtype."""
    import tvm

    rng = np.random.default_rng(seed)
    inputs = {}
    for s in task.inputs:
        x = rng.standard_normal(s.shape).astype("float32")
        inputs[s.name] = bf16_tensor(x) if s.dtype == "bfloat16" else tvm.runtime.tensor(
            x.astype(s.dtype), tvm.cpu())
    return inputs


def run_llvm(mod, task, inputs: dict) -> list[np.ndarray]:
    """`mod` built for llvm and run on `inputs`: the task's outputs (bfloat16 as uint16)."""
    import tvm

    lib = tvm.compile(mod, target="llvm")
    outs = [tvm.runtime.tensor(np.zeros(s.shape, "uint16" if s.dtype == "bfloat16"
                                        else s.dtype), tvm.cpu()) for s in task.outputs]
    views = [o._create_view(s.shape, s.dtype) for o, s in zip(outs, task.outputs)]
    lib["main"](*[inputs[s.name] for s in task.inputs], *views)
    return [o.numpy() for o in outs]
