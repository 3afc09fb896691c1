"""`autosched plan --device`: what is refused (one line, exit 2) before anything is
profiled, the measured-memory lines of a CUDA choice, and `--device cpu` as before."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from autosched.cli import main
from autosched.cli import plan as cli_plan
from autosched.runtime.choice import Choice

MLP = Path(__file__).resolve().parents[2] / "examples" / "mlp.py"
SMALL_MLP = f"""
import importlib.util
spec = importlib.util.spec_from_file_location("mlp_example", {str(MLP)!r})
mlp = importlib.util.module_from_spec(spec); spec.loader.exec_module(mlp)

def make_model():
    return mlp.make_model(n_layer=2, width=32, hidden=64)

def make_inputs():
    return mlp.make_inputs(batch=16, width=32)

loss_fn = mlp.loss_fn
"""


def _refused(capsys, *argv) -> str:
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


@pytest.mark.parametrize("extra, message", [
    (["--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
    (["--micro-batches", "4"], "--micro-batches only apply to a pipeline plan: add --stages S"),
    (["--no-bpipe"], "--no-bpipe only apply to a pipeline plan: add --stages S"),
    (["--no-interleave"], "--no-interleave only apply to a pipeline plan: add --stages S"),
    (["--micro-batches", "4", "--no-bpipe"],
     "--micro-batches and --no-bpipe only apply to a pipeline plan: add --stages S"),
    (["--device", "cuda", "--clock", "cpu"],
     "--device cuda --clock cpu: a CPU clock does not see the GPU's work; use --clock wall"),
    (["--device", "cuda", "--stages", "2", "--micro-batches", "2"],
     "--device cuda: pipeline plans (--stages) are profiled on the CPU for now"),
])
def test_refused_before_the_model_file_is_read(tmp_path, capsys, extra, message):
    err = _refused(capsys, str(tmp_path / "never_read.py"), "--memory-budget", "40%", *extra)
    assert message in err


def test_cuda_where_torch_sees_no_gpu_is_one_line(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    model = tmp_path / "model.py"
    model.write_text(SMALL_MLP)
    err = _refused(capsys, str(model), "--memory-budget", "40%", "--device", "cuda",
                   "--solver-only")
    assert err.startswith(f"autosched: error: --device cuda: torch {torch.__version__} (")
    assert err.endswith("sees no CUDA GPU here; use --device cpu")


def test_device_cpu_is_the_default_and_plans_as_before(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))            # the bandwidth cache goes here
    model = tmp_path / "model.py"
    model.write_text(SMALL_MLP)
    plans = {}
    for name, extra in (("default", []), ("cpu", ["--device", "cpu"])):
        out = tmp_path / f"{name}.json"
        assert main(["plan", str(model), "--memory-budget", "50%", "--solver-only",
                     "--repeats", "1", "--time-limit", "2", "-o", str(out), *extra]) == 0
        plans[name] = json.loads(out.read_text())
    printed = capsys.readouterr().out
    assert "torch.cuda.max_memory_allocated" not in printed
    for plan in plans.values():
        assert len(plan["layers"]) == 2
        assert not any(lp["action"].startswith("offload") for lp in plan["layers"])
        assert not plan["bandwidth"]["overlap"]
    assert plans["cpu"]["budget"] == plans["default"]["budget"]


def test_peak_memory_lines_name_each_budgets_chosen_point():
    choice = Choice(budgets={"40%": 4000, "25%": 2500}, reference_saved_bytes=10000,
                    points=[{"point": "plan@40%", "peak_allocated": 3 * 2 ** 20},
                            {"point": "compile@0.4", "peak_allocated": 5 * 2 ** 20}],
                    chosen=[{"budget": "40%", "chosen": "plan@40%", "choice_time_s": 0.1}])
    assert cli_plan.peak_memory_lines(choice).splitlines() == [
        "measured memory (torch.cuda.max_memory_allocated over one step):",
        "  40%: plan@40% peaks at 3.00 MiB",
        "  25%: nothing measured fits"]
