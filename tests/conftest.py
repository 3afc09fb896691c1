"""Shared test helpers: run the real CLI in a subprocess, small op files."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def run_cli(*args: str, cwd: str | os.PathLike | None = None, timeout: float = 600,
            env: dict | None = None) -> subprocess.CompletedProcess:
    """`autosched ARGS...` as a user runs it, in a fresh interpreter."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = str(ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "autosched.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=full_env)


@pytest.fixture(scope="session")
def target():
    """This machine's llvm target (a TargetSpec)."""
    from autosched.target import resolve_target

    return resolve_target("llvm")


@pytest.fixture(scope="session")
def synthetic():
    """The synthetic test device (tests/support/synthetic.py)."""
    from support import synthetic

    return synthetic


@pytest.fixture(scope="session")
def matmul_space(synthetic):
    """The synthetic tiling space of the 256^3 matmul."""
    return synthetic.make_space(synthetic.matmul_task())


@pytest.fixture(scope="session")
def tiny_task():
    """The 64^3 matmul of the tiny, fully measured space (tests/support/tiny_space.py)."""
    from autosched.workload import load_tasks
    from support import tiny_space

    return load_tasks(str(EXAMPLES / "matmul.py"), None,
                      [f"{k}={v}" for k, v in tiny_space.SHAPE.items()])[0]


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    return EXAMPLES


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def write_op(tmp_path):
    """Write an op file from source text; returns its path as a string."""

    def write(source: str, name: str = "op.py") -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(source))
        return str(path)

    return write
