"""bench/training_plans.py on a user's model file: what it refuses (exit 2, one line) and
how the files are named."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import training_plans  # noqa: E402


def test_model_files_are_named_by_their_stem_after_the_named_models(tmp_path):
    mine = tmp_path / "my_encoder.py"
    mine.write_text("")
    paths = training_plans.model_files(["mlp"], [str(mine)], tmp_path)
    assert list(paths) == ["mlp", "my_encoder"]
    assert paths["my_encoder"] == mine.resolve()
    assert paths["mlp"].is_file() and "examples" in paths["mlp"].read_text()


def test_bad_model_file_arguments_exit_2_with_one_line(tmp_path, capsys):
    one, other, mlp = (tmp_path / d / f for d, f in (("a", "net.py"), ("b", "net.py"),
                                                      ("c", "mlp.py")))
    for f in (one, other, mlp):
        f.parent.mkdir()
        f.write_text("")
    cases = [(["--model-file", str(tmp_path / "absent.py")], "no such file"),
             (["--models", "", "--model-file", str(one), "--model-file", str(other)],
              "two models named 'net'"),
             (["--model-file", str(mlp)], "two models named 'mlp'"),
             (["--models", ""], "no model to run"),
             (["--candidate-budgets", "50%,half"], "--candidate-budgets: memory budget 'half'")]
    for argv, message in cases:
        assert training_plans.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err


def test_a_model_file_that_does_not_load_exits_2_with_its_error(tmp_path, capsys):
    broken = tmp_path / "broken.py"
    broken.write_text("def make_model():\n    return 1\n\ndef make_inputs():\n    return ()\n")
    assert training_plans.main(["--models", "", "--model-file", str(broken)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {broken}: make_model() returned int, not a torch.nn.Module"]
