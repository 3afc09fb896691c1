"""Small model files of the examples, written where a test can point the CLI at them."""

from __future__ import annotations

from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# Each small config keeps every kind of operator of its example but few distinct shapes.
# The example is imported as a module of its own (not run_path'd): torch.compile imports
# the module of every class it traces to read its globals.
MODEL_FILE = '''
import importlib.util
import os
import sys

_path = {example!r}
_spec = importlib.util.spec_from_file_location(
    "example_" + os.path.splitext(os.path.basename(_path))[0], _path)
_module = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _module
_spec.loader.exec_module(_module)
_ns = vars(_module)
CONFIG = {model!r}
INPUTS = {inputs!r}

def make_model():
    return _ns["make_model"](**CONFIG)

def make_inputs(**overrides):
    return _ns["make_inputs"](**dict(INPUTS, **overrides))

loss_fn = _ns["loss_fn"]
'''

SMALL = {
    "gpt": ({"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 8, "vocab": 64},
            {"batch": 2, "seq_len": 8, "vocab": 64}),
    "resnet": ({"width": 4, "stages": 2, "blocks": 1, "classes": 5}, {"batch": 2, "image": 8}),
}


def write_model_file(directory: Path, name: str, **model_overrides) -> Path:
    """A model file running examples/<name>.py at its small config (with overrides)."""
    model, inputs = SMALL[name]
    model = dict(model, **model_overrides)
    path = directory / f"small_{name}.py"
    path.write_text(MODEL_FILE.format(example=str(EXAMPLES / f"{name}.py"), model=model,
                                      inputs=inputs))
    return path
