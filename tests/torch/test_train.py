"""examples/train_mlp.py: training with autosched kernels forward and backward follows eager
torch's loss curve."""
from __future__ import annotations

from support.torch_library import MLP_SHAPES as MLP


def test_loss_curve_matches_eager_torch(nn_ops, train_mlp):
    shapes = train_mlp.Shapes(**MLP)
    ours, _ = train_mlp.train(train_mlp.autosched_ops(), shapes, steps=150)
    eager, _ = train_mlp.train(train_mlp.eager_ops(), shapes, steps=150)
    assert ours[-1] < 0.5 * ours[0]  # it learns
    assert abs(ours[-1] - eager[-1]) / eager[-1] < 1e-4
    assert max(abs(a - b) / b for a, b in zip(ours, eager)) < 1e-4


def test_script_reports_losses_and_step_times(nn_library, train_mlp, capsys):
    args = ["--library", str(nn_library), "--steps", "20", "--batch", str(MLP["batch"]),
            "--d-in", str(MLP["d_in"]), "--hidden", str(MLP["hidden"]),
            "--d-out", str(MLP["d_out"])]
    assert train_mlp.main(args) == 0
    out = capsys.readouterr().out
    assert "final loss relative difference" in out
    rel = float(out.split("final loss relative difference:")[1].split()[0])
    assert rel < 1e-4
    assert "step time: autosched" in out and "eager torch" in out
