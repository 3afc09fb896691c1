"""The measuring side of a bundle, as its machine runs it: `python -m
autosched.measure.bundle DIR` in a process (and run workers) where the TVM compiler
cannot be imported, only found, as on a machine with TVM's runtime libraries alone."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Installed with sitecustomize in the measuring processes (and, through PYTHONPATH,
# their run workers): importing `tvm` or any of its modules fails. `find_spec` still
# answers, so code may locate TVM's runtime libraries without importing the package.
NO_COMPILER = '''
import importlib.abc, importlib.machinery, sys

class _Refuse(importlib.abc.Loader):
    def __init__(self, name):
        self.name = name
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        raise ImportError(f"{self.name}: the TVM compiler is not importable here")

class _NoCompiler(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "tvm" and not name.startswith("tvm."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None:
            spec.loader = _Refuse(name)
        return spec

sys.meta_path.insert(0, _NoCompiler())
'''


def measure_env(tmp_path) -> dict:
    """An environment in which the TVM compiler cannot be imported (see NO_COMPILER)."""
    block = tmp_path / "no-compiler"
    block.mkdir(exist_ok=True)
    (block / "sitecustomize.py").write_text(NO_COMPILER)
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(block), str(ROOT)]))


def measure_cmd(bundle) -> list[str]:
    """The command that measures the bundle in `bundle`."""
    return [sys.executable, "-m", "autosched.measure.bundle", str(bundle)]


def measure(bundle, tmp_path):
    """Measure `bundle` as its machine would, from `tmp_path`; the finished process."""
    return subprocess.run(measure_cmd(bundle), cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=measure_env(tmp_path))
