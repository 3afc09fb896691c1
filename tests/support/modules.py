"""Import a Python file by path (test folders and examples are not packages)."""
from __future__ import annotations

import importlib.util
from pathlib import Path


def load_by_path(path, name: str):
    """The module that executing `path` makes, named `name` (not put in sys.modules)."""
    spec = importlib.util.spec_from_file_location(name, Path(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
