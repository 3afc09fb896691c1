"""Model files for `autosched plan`: Python files defining make_model() and make_inputs().

    def make_model() -> torch.nn.Module
    def make_inputs() -> tensor or tuple of arguments for model(*inputs)
    def loss_fn(output) -> scalar tensor            # optional

Every failure to provide these is a UserError with one line (loading the file:
autosched/user_file.py, shared with op files).
"""
from __future__ import annotations

import os
import traceback
from dataclasses import dataclass
from typing import Callable

from ..errors import UserError
from ..user_file import first_line, run_user_file


@dataclass(frozen=True)
class ModelSpec:
    path: str
    model: object
    inputs: tuple
    loss_fn: Callable | None


def _call(path: str, name: str, fn):
    try:
        return fn()
    except UserError:
        raise
    except Exception as e:
        frame = traceback.extract_tb(e.__traceback__)[-1]
        raise UserError(f"{path}: {name}() failed ({os.path.basename(frame.filename)} line "
                        f"{frame.lineno}): {type(e).__name__}: {first_line(e)}") from None


def load_model_file(path: str) -> ModelSpec:
    """Run the file and call make_model() and make_inputs()."""
    import torch

    ns = run_user_file(path, "model file", "autosched_model_", register=True)
    for name in ("make_model", "make_inputs"):
        if not callable(ns.get(name)):
            raise UserError(f"{path}: defines no {name}(); a model file needs make_model() "
                            "and make_inputs() (and optionally loss_fn(output))")
    loss_fn = ns.get("loss_fn")
    if loss_fn is not None and not callable(loss_fn):
        raise UserError(f"{path}: loss_fn is not a function")
    model = _call(path, "make_model", ns["make_model"])
    if not isinstance(model, torch.nn.Module):
        raise UserError(f"{path}: make_model() returned {type(model).__name__}, "
                        "not a torch.nn.Module")
    inputs = _call(path, "make_inputs", ns["make_inputs"])
    if not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)
    return ModelSpec(path, model, tuple(inputs), loss_fn)
