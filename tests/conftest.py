"""Shared test helpers: run the real CLI in a subprocess or in this process, small op
files, and the `serial` marker of the tests that must not share the CPUs."""
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


# Tests whose outcome depends on having the machine to themselves: they compare times,
# speeds or timeouts against the clock, race processes, or kill them mid-run. The README's
# test command runs the rest on every core (pytest-xdist), then these one at a time
# (`-m serial -p no:xdist`). An entry is a file or one test of it, relative to tests/.
SERIAL = (
    "core/test_time_budget.py",
    "core/test_shared_work_dir.py",
    "core/test_tune_e2e.py::test_kill_9_keeps_completed_records_and_a_rerun_resumes",
    "core/test_target.py::test_without_nvidia_smi_there_is_no_gpu_and_nothing_is_started",
    "db/test_concurrency.py",
    "db/test_fault_soak.py",
    "db/test_team_flow.py::test_four_concurrent_tuning_runs_all_finish_with_all_records",
    "measure/test_lifecycle.py",
    "measure/test_scratch.py",
    "measure/test_measurer.py",
    "measure/test_bundle.py::test_a_killed_measurement_resumes_and_nothing_is_recorded_twice",
    "measure/test_bundle.py::test_crashing_hanging_and_wrong_kernels_are_their_own_results",
    "rpc/test_faults.py",
    "rpc/test_runner.py",
    "runtime/test_prediction.py::test_predicted_slowdown_over_keeping_everything_is_close",
    "runtime/test_pipeline_run.py",
)


def is_serial(nodeid: str) -> bool:
    """Whether the test `nodeid` (tests/FILE::NAME[PARAMS]) is listed in SERIAL."""
    path, _, name = nodeid.partition("[")[0].partition("::")
    return any(entry in (path, f"{path}::{name}") for entry in
               (f"tests/{e}" for e in SERIAL))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if is_serial(item.nodeid):
            item.add_marker(pytest.mark.serial)


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
def cli_here(capfd, monkeypatch):
    """`autosched ARGS...` through `autosched.cli.main` in this process, for a test that
    needs no process boundary (no time limit, signal or crash of its own): the exact exit
    code, and stdout / stderr captured at the file descriptors, as a CompletedProcess like
    `run_cli`'s. `env` is set for the call; `cwd` is the working directory."""

    def run(*args: str, cwd: str | os.PathLike | None = None,
            env: dict | None = None) -> subprocess.CompletedProcess:
        from autosched.cli import main

        with monkeypatch.context() as patch:
            if cwd is not None:
                patch.chdir(cwd)
            for name, value in (env or {}).items():
                patch.setenv(name, value)
            capfd.readouterr()  # what came before is not this command's
            code = main(list(args))
            out, err = capfd.readouterr()
        return subprocess.CompletedProcess(["autosched", *args], code, out, err)

    return run


@pytest.fixture
def write_op(tmp_path):
    """Write an op file from source text; returns its path as a string."""

    def write(source: str, name: str = "op.py") -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(source))
        return str(path)

    return write
