"""Model files and `autosched plan` (run(args)): results on disk, one-line UserErrors."""
from __future__ import annotations

import argparse
import json
import textwrap

import pytest

from autosched.cli import plan as cli_plan
from autosched.errors import UserError
from autosched.model.modelfile import load_model_file

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


def _small_mlp(model_file, tmp_path, monkeypatch) -> str:
    from pathlib import Path

    monkeypatch.setenv("HOME", str(tmp_path))          # the bandwidth cache goes here
    mlp_path = Path(__file__).resolve().parents[2] / "examples" / "mlp.py"
    return model_file(SMALL_MLP.format(path=str(mlp_path)))


def test_solver_only_prints_the_table_and_writes_the_plan(model_file, tmp_path, capsys,
                                                          monkeypatch):
    path = _small_mlp(model_file, tmp_path, monkeypatch)
    out = tmp_path / "plan.json"
    args = parse(path, "--memory-budget", "50%", "-o", str(out), "--repeats", "1",
                 "--solver-only")
    assert cli_plan.run(args) == 0
    printed = capsys.readouterr().out
    assert "blocks.0" in printed and "blocks.1" in printed and "step time" in printed
    plan = json.loads(out.read_text())
    assert plan["format"] == "autosched.plan" and len(plan["layers"]) == 2
    assert plan["predicted"]["saved_bytes"] <= plan["budget"]["bytes"]
    assert not plan["bandwidth"]["overlap"]            # the CPU has no copy engine
    assert all(not a.startswith("offload") for a in (lp["action"] for lp in plan["layers"]))


def test_plan_command_writes_the_measured_choice(model_file, tmp_path, capsys, monkeypatch):
    path = _small_mlp(model_file, tmp_path, monkeypatch)
    out = tmp_path / "choice.json"
    args = parse(path, "--memory-budget", "100%,40%", "-o", str(out), "--repeats", "1",
                 "--rounds", "2")
    assert cli_plan.run(args) == 0
    printed = capsys.readouterr().out
    assert "plan@40%" in printed and f"wrote {out}" in printed
    choice = json.loads(out.read_text())
    assert choice["format"] == "autosched.choice"
    assert set(choice["answers"]) == {"100%", "40%"}
    points = {p["point"]: p for p in choice["points"]}
    for spec, answer in choice["answers"].items():
        assert answer["chosen"] in points and answer["method"] == "plan*"
        assert answer["saved"] == points[answer["chosen"]]["saved"] <= \
            choice["budgets"][spec]
    assert choice["budgets"]["40%"] == int(choice["reference_saved_bytes"] * 0.4)


def test_a_bad_budget_exits_2_with_one_line(tmp_path, capsys):
    from autosched.cli import main

    assert main(["plan", str(tmp_path / "never_read.py"), "--memory-budget", "40%,half"]) == 2
    err = capsys.readouterr().err.strip()
    assert "memory budget 'half' is not understood" in err and "\n" not in err


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
    (["--memory-budget", "1GiB,2GiB", "--solver-only"], "one --memory-budget"),
    (["--memory-budget", "1GiB", "--rounds", "1"], "--rounds must be >= 2"),
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
        cli_plan.run(parse(path, "--memory-budget", "90%", "-o", str(target), "--repeats", "1",
                           "--solver-only"))
    assert not target.exists()
