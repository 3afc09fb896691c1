"""Model files for `autosched plan`: Python files defining make_model() and make_inputs().

    def make_model() -> torch.nn.Module
    def make_inputs() -> tensor or tuple of arguments for model(*inputs)
    def loss_fn(output) -> scalar tensor            # optional

Every failure to provide these is a UserError with one line.
"""
from __future__ import annotations

import os
import runpy
import sys
import traceback
import types
from dataclasses import dataclass
from typing import Callable

from ..errors import UserError


@dataclass(frozen=True)
class ModelSpec:
    path: str
    model: object
    inputs: tuple
    loss_fn: Callable | None


def _run(path: str) -> dict:
    if not os.path.isfile(path):
        raise UserError(f"model file not found: {path}")
    name = f"autosched_model_{abs(hash(path))}"
    try:
        namespace = runpy.run_path(path, run_name=name)
    except SyntaxError as e:
        raise UserError(f"{path}:{e.lineno}: syntax error: {e.msg}") from None
    except UserError:
        raise
    except Exception as e:
        raise UserError(f"{path}: error while loading ({_where(e)}): "
                        f"{type(e).__name__}: {_first_line(e)}") from None
    # torch.compile imports the module a traced class was defined in by its name.
    module = types.ModuleType(name)
    module.__dict__.update(namespace)
    sys.modules[name] = module
    return namespace


def _where(e: BaseException) -> str:
    frame = traceback.extract_tb(e.__traceback__)[-1]
    return f"{os.path.basename(frame.filename)} line {frame.lineno}"


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def _call(path: str, name: str, fn):
    try:
        return fn()
    except UserError:
        raise
    except Exception as e:
        raise UserError(f"{path}: {name}() failed ({_where(e)}): {type(e).__name__}: "
                        f"{_first_line(e)}") from None


def load_model_file(path: str) -> ModelSpec:
    """Run the file and call make_model() and make_inputs()."""
    import torch

    ns = _run(path)
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
