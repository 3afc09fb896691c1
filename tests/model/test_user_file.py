"""One loader of users' Python files (autosched/user_file.py) for op files and model files:
each way a file fails to load is one exact UserError line naming the file and its line."""
from __future__ import annotations

import sys

import pytest

from autosched.errors import UserError
from autosched.user_file import run_user_file


def _error(path, kind="model file"):
    with pytest.raises(UserError) as info:
        run_user_file(str(path), kind, "autosched_test_")
    return str(info.value)


@pytest.mark.parametrize("source, line", [
    ("x = 1\ndef f(:\n", "{path}:2: syntax error: invalid syntax"),
    ("import os\nimport no_such_module_here\n",
     "{path}:2: imports module 'no_such_module_here', which is not installed"),
    ("x = 1\nexit(3)\n", "{path}:2: the model file called exit(3) while loading"),
    ("def f():\n    raise ValueError('bad width\\nmore')\n\nf()\n",
     "{path}: error while loading (line 2): ValueError: bad width"),
])
def test_each_load_failure_is_one_exact_line(tmp_path, source, line):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert _error(path) == line.format(path=path)


def test_a_missing_file_names_its_kind(tmp_path):
    assert _error(tmp_path / "absent.py", "op file") == f"op file not found: {tmp_path}/absent.py"


def test_an_error_raised_outside_the_file_has_no_line_of_it(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import json\njson.loads('{')\n")
    assert _error(path).startswith(f"{path}: error while loading (line 2): JSONDecodeError: ")
    path.write_text("raise KeyError('k')\n")
    assert _error(path) == f"{path}: error while loading (line 1): KeyError: 'k'"


def test_the_namespace_is_returned_and_registered_on_request(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("class Net:\n    pass\nWIDTH = 4\n")
    plain = run_user_file(str(path), "model file", "autosched_test_")
    assert plain["WIDTH"] == 4 and plain["__name__"] not in sys.modules
    named = run_user_file(str(path), "model file", "autosched_test_", register=True)
    module = sys.modules.pop(named["__name__"])
    assert module.Net is named["Net"] and named["__name__"].startswith("autosched_test_")


def test_op_files_and_model_files_fail_with_the_same_lines(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("tvm")
    from autosched.model.modelfile import load_model_file
    from autosched.workload import load_op_file

    path = tmp_path / "f.py"
    path.write_text("import no_such_module_here\n")
    expected = f"{path}:1: imports module 'no_such_module_here', which is not installed"
    for load in (load_op_file, load_model_file):
        with pytest.raises(UserError) as info:
            load(str(path))
        assert str(info.value) == expected
    path.write_text("exit(1)\n")
    with pytest.raises(UserError, match=r"^.*:1: the op file called exit\(1\) while loading$"):
        load_op_file(str(path))
    with pytest.raises(UserError, match=r"^.*:1: the model file called exit\(1\) while"):
        load_model_file(str(path))
