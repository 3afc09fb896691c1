"""The small model files of the examples in bf16 / fp16: cast (`model.to(dtype)`, the
floating inputs cast too) or run under `torch.autocast` on the CPU."""
from __future__ import annotations

from pathlib import Path

from support.model_files import EXAMPLES, MODEL_FILE, SMALL

MIXED = '''
import torch

DTYPE = getattr(torch, {dtype!r})
AUTOCAST = {autocast!r}
_make_model, _make_inputs = make_model, make_inputs


class Autocast(torch.nn.Module):
    """The model's forward under CPU autocast at DTYPE."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        with torch.autocast("cpu", dtype=DTYPE):
            return self.inner(*args)


def make_model():
    model = _make_model()
    return Autocast(model) if AUTOCAST else model.to(DTYPE)


def make_inputs(**overrides):
    inputs = _make_inputs(**overrides)
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    if AUTOCAST:
        return inputs
    return tuple(t.to(DTYPE) if t.is_floating_point() else t for t in inputs)
'''


def write_mixed_model_file(directory: Path, name: str, dtype: str, autocast: bool = False,
                           **model_overrides) -> Path:
    """A model file of examples/<name>.py at its small config in `dtype` ("float32",
    "bfloat16", "float16"), cast or under autocast."""
    model, inputs = SMALL[name]
    model = dict(model, **model_overrides)
    path = directory / f"small_{name}_{dtype}{'_autocast' if autocast else ''}.py"
    path.write_text(MODEL_FILE.format(example=str(EXAMPLES / f"{name}.py"), model=model,
                                      inputs=inputs)
                    + MIXED.format(dtype=dtype, autocast=autocast))
    return path
