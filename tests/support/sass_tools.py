"""Helpers for tests that read SASS without a GPU: nvcc compiles, cuobjdump disassembles
(the pip package nvidia-cuda-cuobjdump, found by autosched.measure.cuda.sass)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def skip_without_cuobjdump() -> None:
    """Skip the calling test where cuobjdump cannot be found."""
    from autosched.measure.cuda import sass

    if not sass.available():
        pytest.skip("needs cuobjdump (pip install nvidia-cuda-cuobjdump)")


def run_compile_script(script: str, tests_dir, *args: str) -> list:
    """Run `script` (Python source taking the tests folder as argv[1], then `args`) in a
    subprocess -- a process that compiled CUDA keeps TVM's CUDA runtime registered -- and return
    the JSON list it prints on its line starting "RESULT ". The repository and its tests
    folder are on its path, so a test module it imports finds `support` as under pytest."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    run = subprocess.run([sys.executable, "-c", script, str(tests_dir), *args], env=env,
                         capture_output=True, text=True, timeout=600, cwd=ROOT, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    line = next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])
