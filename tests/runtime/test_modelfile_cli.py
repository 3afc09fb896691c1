"""Model files and `autosched plan` (run(args)): results on disk, one-line UserErrors."""
from __future__ import annotations

import argparse
import json
import textwrap

import pytest

from autosched.cli import plan as cli_plan
from autosched.errors import UserError
from autosched.runtime.modelfile import load_model_file

SMALL_MLP = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("mlp_example", {path!r})
mlp = importlib.util.module_from_spec(spec); spec.loader.exec_module(mlp)

def make_model():
    return mlp.make_model(n_layer=2, width=32, hidden=64)

def make_inputs():
    return mlp.make_inputs(batch=16, width=32)

loss_fn = mlp.loss_fn
"""


def parse(*argv):
    parser = argparse.ArgumentParser(prog="autosched")
    sub = parser.add_subparsers(dest="command", required=True)
    cli_plan.add_parser(sub)
    return parser.parse_args(["plan", *argv])


@pytest.fixture
def model_file(tmp_path):
    def write(source: str, name: str = "model.py") -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(source))
        return str(path)
    return write


def test_plan_command_prints_the_table_and_writes_the_plan(model_file, tmp_path, capsys,
                                                           monkeypatch):
    from pathlib import Path

    monkeypatch.setenv("HOME", str(tmp_path))          # the bandwidth cache goes here
    mlp_path = Path(__file__).resolve().parents[2] / "examples" / "mlp.py"
    path = model_file(SMALL_MLP.format(path=str(mlp_path)))
    out = tmp_path / "plan.json"
    args = parse(path, "--memory-budget", "50%", "-o", str(out), "--repeats", "1")
    assert cli_plan.run(args) == 0
    printed = capsys.readouterr().out
    assert "blocks.0" in printed and "blocks.1" in printed and "step time" in printed
    plan = json.loads(out.read_text())
    assert plan["format"] == "autosched.plan" and len(plan["layers"]) == 2
    assert plan["predicted"]["saved_bytes"] <= plan["budget"]["bytes"]
    assert not plan["bandwidth"]["overlap"]            # the CPU has no copy engine
    assert all(not a.startswith("offload") for a in (lp["action"] for lp in plan["layers"]))


@pytest.mark.parametrize("source, match", [
    ("def make_inputs():\n    return 1\n", "defines no make_model"),
    ("import torch\ndef make_model():\n    return torch.nn.Linear(2, 2)\n",
     "defines no make_inputs"),
    ("def make_model(:\n", "syntax error"),
    ("raise RuntimeError('boom')\n", "RuntimeError: boom"),
    ("def make_model():\n    return 3\ndef make_inputs():\n    return 1\n",
     "not a torch.nn.Module"),
    ("import torch\ndef make_model():\n    raise ValueError('bad width')\n"
     "def make_inputs():\n    return 1\n", "make_model\\(\\) failed"),
])
def test_bad_model_files_are_one_line_user_errors(model_file, source, match):
    with pytest.raises(UserError, match=match) as info:
        load_model_file(model_file(source))
    assert "\n" not in str(info.value)


def test_missing_model_file(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_model_file(str(tmp_path / "absent.py"))


@pytest.mark.parametrize("argv, match", [
    (["--memory-budget", "two gigs"], "not understood"),
    (["--memory-budget", "1GiB", "--time-limit", "0"], "time-limit"),
    (["--memory-budget", "1GiB", "--gap", "2"], "gap"),
    (["--memory-budget", "1GiB", "--repeats", "0"], "repeats"),
    (["--memory-budget", "1GiB", "--clock", "thread"], "--threads 1"),
    (["--memory-budget", "1GiB", "--clock", "thread", "--threads", "2"], "--threads 1"),
    (["--memory-budget", "1GiB", "--model-library", "."], "add --compile"),
    (["--memory-budget", "1GiB", "--compile", "--model-library", "."], "no model_ops.json"),
])
def test_bad_arguments_fail_before_loading_anything(argv, match, tmp_path):
    args = parse(str(tmp_path / "never_read.py"), *argv)
    with pytest.raises(UserError, match=match):
        cli_plan.run(args)


def test_output_into_a_missing_folder_is_refused_and_nothing_written(model_file, tmp_path,
                                                                     monkeypatch):
    from pathlib import Path

    monkeypatch.setenv("HOME", str(tmp_path))
    mlp_path = Path(__file__).resolve().parents[2] / "examples" / "mlp.py"
    path = model_file(SMALL_MLP.format(path=str(mlp_path)))
    target = tmp_path / "nowhere" / "plan.json"
    with pytest.raises(UserError, match="does not exist"):
        cli_plan.run(parse(path, "--memory-budget", "90%", "-o", str(target), "--repeats", "1"))
    assert not target.exists()
