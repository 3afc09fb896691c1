"""A small residual conv block and what the channels_last and inductor-layout tests do
with it: its model and input, its extracted training tasks, a library with a kernel for
each (chosen by model_ops.json), one training step, the comparison against eager, and a
backend that keeps the graphs it rewrote.

Tolerances: autosched/model/dtypes.py, TWIN_TOLERANCE (float32 1e-4, float16 2e-3,
bfloat16 1.6e-2); a model's output or gradient against eager is |ours - eager| <= rtol
|eager| + atol max|eager| per tensor (tests/model/test_mixed_precision.py explains why).
"""
from __future__ import annotations

import torch
from torch import nn

from autosched.model.dtypes import TWIN_TOLERANCE

TORCH = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
CL = torch.channels_last


class Block(nn.Module):
    """A small residual block: 3x3 conv + ReLU, a strided 3x3 conv without bias, and a
    strided 1x1 projection of the input as the shortcut."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(4, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, padding=1, bias=False)
        self.skip = nn.Conv2d(4, 8, 1, stride=2)

    def forward(self, x):
        return torch.relu(self.conv2(torch.relu(self.conv1(x))) + self.skip(x))


def block_loss(out):
    """The loss of one step: the mean square of the output."""
    return out.float().square().mean()


def model_and_input(dtype: str, channels_last: bool = True):
    """The block and an input (2, 4, 8, 8) of `dtype`, channels_last where asked."""
    torch.manual_seed(0)
    model, x = Block().to(TORCH[dtype]), torch.randn(2, 4, 8, 8).to(TORCH[dtype])
    if channels_last:
        model, x = model.to(memory_format=CL), x.to(memory_format=CL)
    return model, x


def extract_block(dtype: str, channels_last: bool = True, compiler: str = "eager"):
    """The tasks of one training step of the block, as the backend compiling with
    `compiler` matches them."""
    from autosched.model.extract import extract
    from autosched.model.modelfile import ModelSpec

    model, x = model_and_input(dtype, channels_last)
    return extract(ModelSpec("block.py", model, (x,), block_loss), train=True, compiler=compiler)


C3 = {"C": 4, "H": 8, "W": 8, "K": 8, "R": 3, "S": 3, "stride": 1, "pad": 1}      # conv1
C2 = {"C": 8, "H": 8, "W": 8, "K": 8, "R": 3, "S": 3, "stride": 2, "pad": 1}      # conv2
C1 = {"C": 4, "H": 8, "W": 8, "K": 8, "R": 1, "S": 1, "stride": 2, "pad": 0}      # skip
# one training step of Block in NCHW: (workload, parameters but N=2 and dtype)
NCHW_TASKS = [
    ("aten_conv2d_bias_relu", C3), ("aten_conv2d", C2), ("aten_conv2d_bias", C1),
    ("aten_conv2d_grad_weight", C1), ("aten_conv2d_grad_bias", {"K": 8, "P": 4, "Q": 4}),
    ("aten_conv2d_grad_input", C2), ("aten_conv2d_grad_weight", C2),
    ("aten_conv2d_grad_weight", C3), ("aten_conv2d_grad_bias", {"K": 8, "P": 8, "Q": 8}),
]


def block_library(directory, dtype: str):
    """A model library with a kernel for every task of Block's channels_last training
    step, each chosen by model_ops.json (torch "recorded" at 1 s, the kernels at 1 ns)."""
    from support.torch_library import write_chosen_model_library

    return write_chosen_model_library(directory, extract_block(dtype), "block.py")


def train_step(run, model, x):
    """(loss, gradients of `model`'s parameters) of one step of `run` (it or compiled)."""
    for p in model.parameters():
        p.grad = None
    loss = block_loss(run(x))
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


def close_to_eager(ours, eager, what, dtype):
    """Assert `ours` equals `eager` within the twins' tolerance of `dtype`."""
    tol = TWIN_TOLERANCE[dtype]
    atol = tol["atol"] * float(eager.detach().abs().max())
    torch.testing.assert_close(ours, eager, rtol=tol["rtol"], atol=atol, msg=what)


def recording_backend(library, compiler: str = "eager"):
    """The backend over `library` (compiling with `compiler`), keeping each rewritten
    aten graph and the inputs dynamo gave it."""
    from autosched.model.compile_backend import AutoschedBackend

    class Recording(AutoschedBackend):
        def __init__(self, *args):
            super().__init__(*args)
            self.graphs, self.inputs = {}, []

        def __call__(self, gm, example_inputs):
            self.inputs.extend(example_inputs)
            return super().__call__(gm, example_inputs)

        def rewrite(self, gm, kind, channels_last=False):
            super().rewrite(gm, kind, channels_last)
            self.graphs[kind] = gm

    return Recording(library, compiler)
