"""A small MLP (8 -> 16 -> GELU -> 4) and a CPU model library as `autosched export-model`
writes it for one training step of it (kernels.so, manifest.json, model_ops.json), every
kernel lightly scheduled and chosen (torch "recorded" at 1 s, each kernel at 1 ns), so that
every one of them runs: what the backend's tests compile models against."""
from __future__ import annotations

from pathlib import Path


def mlp_class():
    """The MLP's class (defined on first use: torch is imported only by tests that have it)."""
    from torch import nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)

        def forward(self, x):
            import torch

            return self.fc2(torch.nn.functional.gelu(self.fc1(x)))
    return MLP


def mlp_loss(out):
    return out.square().mean()


def mlp_and_input():
    """A fresh MLP and its input batch (8 x 8), the same for every call (seed 0)."""
    import torch

    torch.manual_seed(0)
    return mlp_class()(), torch.randn(8, 8)


def chosen_mlp_library(directory: Path) -> Path:
    """Write the library of the MLP's training step into `directory` (see the module
    docstring) and return it."""
    from support.torch_library import write_chosen_model_library

    from autosched.model.extract import extract
    from autosched.model.modelfile import ModelSpec

    model, x = mlp_and_input()
    found = extract(ModelSpec("mlp.py", model, (x,), mlp_loss), train=True)
    return write_chosen_model_library(directory, found, "mlp.py")
