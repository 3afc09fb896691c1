"""A residual MLP for `autosched plan` (fp32): blocks of LayerNorm -> Linear -> GELU -> Linear.

    autosched plan examples/mlp.py --memory-budget 50%

The blocks live in `model.blocks` (an nn.Sequential): those are the layers a plan decides
about. `make_model(..., kernel_library=DIR)` uses autosched kernels where the library has
them (see examples/gpt.py).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

CONFIG = dict(n_layer=4, width=256, hidden=1024, batch=512, classes=10)


class Residual(nn.Module):
    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class MLP(nn.Module):
    def __init__(self, n_layer: int, width: int, hidden: int, classes: int):
        super().__init__()
        self.blocks = nn.Sequential(*(Residual(width, hidden) for _ in range(n_layer)))
        self.head = nn.Linear(width, classes)

    def forward(self, x, labels=None):
        logits = self.head(self.blocks(x))
        return logits if labels is None else F.cross_entropy(logits, labels)


def make_model(n_layer=CONFIG["n_layer"], width=CONFIG["width"], hidden=CONFIG["hidden"],
               classes=CONFIG["classes"], kernel_library=None, seed=0):
    torch.manual_seed(seed)
    model = MLP(n_layer, width, hidden, classes)
    if kernel_library is not None:
        from autosched.runtime.library_modules import swap_modules_for_library
        from autosched.torch import load_library

        swap_modules_for_library(model, load_library(kernel_library))
    return model


def make_inputs(batch=CONFIG["batch"], width=CONFIG["width"], classes=CONFIG["classes"], seed=0):
    """(features, labels): the model returns the cross-entropy loss."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, width, generator=g), torch.randint(0, classes, (batch,),
                                                                  generator=g)


def loss_fn(output):
    return output
