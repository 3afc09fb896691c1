"""Bad input through the real CLI: one line on stderr, exit code 2, nothing written.
The CLI's `main(argv)` runs in this process, except where the process's own stderr is
the point (the traceback --debug lets through)."""
from __future__ import annotations

import os

import pytest

GOOD = """
from tvm import te
import autosched

@autosched.workload
def add(M=8):
    A = te.placeholder((M,), name="A")
    return A, te.compute((M,), lambda i: A[i] + 1.0, name="B")
"""


@pytest.mark.parametrize("case", [
    "missing_file", "syntax_error", "no_workload", "not_tensors", "unknown_arg",
    "unknown_target", "bad_trials", "unknown_workload", "bad_arg_value", "bad_db_url",
])
def test_bad_input_is_one_line_exit_2_and_no_database(case, cli_here, write_op, tmp_path):
    db = tmp_path / "db.sqlite"
    good = write_op(GOOD, "good.py")
    argv = {
        "missing_file": [str(tmp_path / "absent.py")],
        "syntax_error": [write_op("def broken(:\n", "syntax.py")],
        "no_workload": [write_op("x = 1\n", "empty.py")],
        "not_tensors": [write_op("import autosched\n@autosched.workload\ndef f(M=2):\n"
                                 "    return [1, 2]\n", "nottensors.py")],
        "unknown_arg": [good, "--arg", "Q=3"],
        "unknown_target": [good, "--target", "opencl"],
        "bad_trials": [good, "--trials", "many"],
        "unknown_workload": [good, "--workload", "nope"],
        "bad_arg_value": [good, "--arg", "M=eight"],
        "bad_db_url": [good, "--db", "mysql://x/y"],
    }[case]
    if case != "bad_db_url":
        argv += ["--db", f"sqlite:///{db}"]
    proc = cli_here("tune", *argv, "--work-dir", str(tmp_path / "logs"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autosched: error:"), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not db.exists()
    assert not (tmp_path / "logs" / "autosched.db").exists()


def test_debug_shows_the_traceback(cli, tmp_path):
    proc = cli("--debug", "tune", str(tmp_path / "absent.py"))
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_cuda_without_gpu_names_the_remedies(cli_here, write_op, tmp_path):
    from autosched.target import local_gpu

    if local_gpu() is not None:
        pytest.skip("this machine has a GPU")
    proc = cli_here("tune", write_op(GOOD), "--target", "cuda", "--db",
                    f"sqlite:///{tmp_path}/d.db", cwd=tmp_path)
    assert proc.returncode == 2
    assert "--dry-run" in proc.stderr and "--runner rpc://" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "d.db")
