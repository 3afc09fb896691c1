"""Extraction: the operators of a traced model, their shapes and exact counts."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")


def _ops(path, train):
    from autosched.model.extract import extract
    from autosched.model.modelfile import load_model_file

    found = extract(load_model_file(str(path)), train)
    return {(o.workload, tuple(sorted(o.params.items()))): o for o in found.ops}, found


def _get(ops, workload, **params):
    hits = [o for (w, p), o in ops.items() if w == workload and
            all(dict(p).get(k) == v for k, v in params.items())]
    assert len(hits) == 1, (workload, params, sorted(ops))
    return hits[0]


def test_gpt_inference_operators_and_counts(model_file):
    ops, found = _ops(model_file("gpt"), train=False)
    # d_model 32, 2 heads, 2 x 8 tokens: every projection sees 16 rows
    assert _get(ops, "aten_layer_norm", M=16, N=32).count == 3
    assert _get(ops, "aten_linear", M=16, N=96, K=32).count == 1
    # the MLP's GELU is the only user of fc1: fused as its epilogue, not a task of its own
    assert _get(ops, "aten_linear_gelu", M=16, N=128, K=32).count == 1
    assert not [o for o in found.ops if o.workload == "aten_gelu"]
    assert _get(ops, "aten_bmm", B=4, M=8, N=8, K=16).count == 1      # q @ k^T
    assert _get(ops, "aten_softmax", M=32, N=8).count == 1
    assert _get(ops, "aten_mm_nt", M=16, N=64, K=32).count == 1       # head without bias
    assert found.graphs == {"inference": 1}
    assert found.uncovered["aten.embedding"] == 2


def test_gpt_training_adds_backward_operators(model_file):
    ops, found = _ops(model_file("gpt"), train=True)
    assert found.graphs == {"forward": 1, "backward": 1}
    # GELU's input is saved for its backward, so it is not fused in training
    assert _get(ops, "aten_gelu", M=16, N=128).count == 1
    assert _get(ops, "aten_gelu_backward", M=16, N=128).count == 1
    assert _get(ops, "aten_softmax_backward", M=32, N=8).count == 1
    # dW = dY^T X for each of the 5 weight matrices; dX = dY W for the layers below: the
    # backward, split by the min-cut partitioner as inductor splits it, reads 5 weights in
    # place (a plain mm) and one through a transpose (mm_nt)
    assert sum(o.count for o in found.ops if o.workload == "aten_mm_tn") == 5
    assert sum(o.count for o in found.ops if o.workload == "aten_mm") == 5
    assert sum(o.count for o in found.ops if o.workload == "aten_mm_nt") == 1
    # the (B, 8, 16) x (B, 16, 8) shape runs in forward (attention @ v) and twice backward
    assert _get(ops, "aten_bmm", B=4, M=8, N=16, K=8).graphs == {"forward": 1, "backward": 2}
    # layer norm's mean and rstd are saved for backward: torch keeps the forward; the
    # backward reads them, one kernel per gradient (input, gamma, beta) of each of the 3
    assert found.uncovered["aten.native_layer_norm"] == 3
    assert "aten.native_layer_norm_backward" not in found.uncovered
    grads = {part: _get(ops, f"aten_layer_norm_grad_{part}", M=16, N=32)
             for part in ("input", "gamma", "beta")}
    assert all(g.count == 3 for g in grads.values())
    # the three come from one aten call: each names the other two, nothing else does
    for part, g in grads.items():
        assert g.siblings == {o.key for p, o in grads.items() if p != part}
    assert not any(o.siblings for o in found.ops if o not in grads.values())


def test_resnet_convolutions_fuse_bias_and_relu_only_without_batch_norm(model_file):
    ops, found = _ops(model_file("resnet"), train=False)
    # the stem's bias and ReLU are fused; the blocks' convolutions feed batch norm; NHWC,
    # the layout inductor (the backend's default compiler here) runs a CPU conv net in
    assert _get(ops, "aten_conv2d_nhwc_bias_relu", C=3, K=4).count == 1
    assert _get(ops, "aten_conv2d_nhwc", C=4, K=4, stride=1).count == 2
    assert _get(ops, "aten_conv2d_nhwc", R=1, S=1, stride=2, pad=0).count == 1
    assert sum(o.count for o in found.ops if o.workload.startswith("aten_conv2d")) == 6
    assert found.uncovered["aten._native_batch_norm_legit_no_training"] == 5


def test_tasks_of_the_model_are_the_workloads_at_those_shapes(model_file):
    from autosched.model.extract import extract
    from autosched.model.extract import model_tasks
    from autosched.model.modelfile import load_model_file

    found = extract(load_model_file(str(model_file("gpt"))), False)
    tasks = model_tasks(found)
    linear = next(t for t, o in zip(tasks, found.ops) if o.workload == "aten_linear")
    fused = next(t for t, o in zip(tasks, found.ops) if o.workload == "aten_linear_gelu")
    assert fused.flops > 2 * 16 * 128 * 32
    assert [s.shape for s in linear.inputs] == [(16, 32), (96, 32), (96,)]
    assert linear.flops == pytest.approx(2 * 16 * 96 * 32 + 16 * 96, rel=0.01)
    assert len({t.key for t in tasks}) == len(tasks)


CONV1D = '''
import torch

def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv1d(3, 8, 5, padding=2), torch.nn.ReLU(),
        torch.nn.Conv1d(8, 8, 3, stride=2, bias=False),
        torch.nn.Conv1d(8, 8, 3, dilation=2, padding=2))

def make_inputs():
    return (torch.randn(2, 3, 33),)
'''


def test_conv1d_is_a_workload_with_its_epilogue_and_dilated_stays_torch(tmp_path):
    path = tmp_path / "conv1d.py"
    path.write_text(CONV1D)
    ops, found = _ops(path, train=False)
    assert _get(ops, "aten_conv1d_bias_relu", N=2, C=3, L=33, K=8, R=5, stride=1,
                pad=2).count == 1
    assert _get(ops, "aten_conv1d", C=8, L=33, R=3, stride=2, pad=0).count == 1
    assert len(found.ops) == 2
    assert found.uncovered["aten.convolution"] == 1  # dilation 2: no workload


NO_OPS = '''
import torch

def make_model():
    return torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Tanh())

def make_inputs():
    return torch.ones(4, 4)
'''


def test_model_with_no_supported_operator_is_one_line_exit_2(tmp_path, cli):
    path = tmp_path / "pointwise.py"
    path.write_text(NO_OPS)
    done = cli("tune-model", str(path), "--trials", "1", "--db",
               f"sqlite:///{tmp_path}/db.sqlite", "--work-dir", str(tmp_path / "logs"))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "no operator that autosched tunes" in lines[0]
    assert "aten.relu x1" in lines[0] and "aten.tanh x1" in lines[0]
    assert not (tmp_path / "db.sqlite").exists()
