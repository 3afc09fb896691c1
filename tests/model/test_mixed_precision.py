"""The model path in bfloat16 and float16: graphs of a model cast with `model.to(dtype)`
and under `torch.autocast` match the same workloads as in float32 at their dtype, the
half workloads compute in float32 inside and equal their torch twins, and a bf16 model
tuned, exported and compiled on the backend trains as eager torch does.

Tolerances (autosched/model/dtypes.py, TWIN_TOLERANCE): a kernel against its twin rtol =
atol = 1e-4 (float32), 2e-3 (float16), 1.6e-2 (bfloat16): about two rounding steps of
the half type, since ours and torch's outputs are each rounded once from float32. A
model's output or gradient against eager: |ours - eager| <= rtol |eager| + atol
max|eager| per tensor, with the same numbers (gradients span magnitudes, so the absolute
part scales with the tensor's largest value).
"""
from __future__ import annotations

import copy
import inspect
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from support.mixed_model_files import write_mixed_model_file

from autosched.model.dtypes import TWIN_TOLERANCE

TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _extract(path, train=True):
    from autosched.model.extract import extract
    from autosched.model.modelfile import load_model_file

    return extract(load_model_file(str(path)), train)


def _tasks(found) -> list:
    """(workload, shape parameters, count) of every task in order, and their dtypes."""
    rows = [(op.workload, tuple((k, v) for k, v in sorted(op.params.items()) if k != "dtype"),
             op.count) for op in found.ops]
    return rows, [op.params["dtype"] for op in found.ops]


# CPU autocast runs softmax and layer norm in float32 (torch's autocast lists): their
# tasks, the backward ones too, stay float32; every matmul and convolution is half
AUTOCAST_FLOAT32 = {"aten_softmax", "aten_softmax_backward", "aten_layer_norm_grad_input",
                    "aten_layer_norm_grad_gamma", "aten_layer_norm_grad_beta"}


@pytest.mark.parametrize("name, tasks", [("gpt", 25), ("resnet", 18)])
def test_extraction_lists_the_float32_tasks_at_each_dtype(tmp_path, name, tasks):
    fp32, fp32_dtypes = _tasks(_extract(write_mixed_model_file(tmp_path, name, "float32")))
    assert len(fp32) == tasks and set(fp32_dtypes) == {"float32"}
    for dtype in ("bfloat16", "float16"):
        rows, dtypes = _tasks(_extract(write_mixed_model_file(tmp_path, name, dtype)))
        assert rows == fp32 and dtypes == [dtype] * tasks, dtype
    rows, dtypes = _tasks(_extract(write_mixed_model_file(tmp_path, name, "bfloat16", True)))
    assert rows == fp32
    assert dtypes == ["float32" if w in AUTOCAST_FLOAT32 else "bfloat16" for w, _, _ in rows]


def test_autocast_casts_stay_torch_and_the_linear_reads_the_half_weight(tmp_path):
    """Under autocast a linear layer is addmm(bias', x', w'.t()) of `_to_copy` casts:
    the casts stay torch's (listed nowhere: they move data) and the kernel is the
    half linear, taking the cast weight untransposed."""
    found = _extract(write_mixed_model_file(tmp_path, "gpt", "bfloat16", True), train=False)
    linears = [op for op in found.ops if op.workload == "aten_linear"]
    assert [(op.params["N"], op.params["K"], op.params["dtype"]) for op in linears] == [
        (96, 32, "bfloat16"), (32, 32, "bfloat16"), (32, 128, "bfloat16")]
    assert "aten._to_copy" not in found.uncovered


# one binding of every tensor expression (te_ops.py), at small odd sizes
TWINS = ["aten_mm", "aten_mm_nt", "aten_mm_tn", "aten_bmm", "aten_linear_gelu",
         "aten_softmax", "aten_softmax_backward", "aten_layer_norm",
         "aten_layer_norm_grad_input", "aten_layer_norm_grad_gamma",
         "aten_layer_norm_grad_beta", "aten_gelu", "aten_gelu_backward_tanh",
         "aten_conv2d_bias_relu", "aten_conv1d_bias_gelu", "aten_conv2d_grad_input",
         "aten_conv2d_grad_weight", "aten_conv2d_grad_bias"]
SIZES = {"M": 13, "N": 21, "K": 11, "B": 3, "C": 5, "H": 9, "W": 7, "L": 17, "P": 5, "Q": 3,
         "stride": 2}


def _run(task, args):
    """The unscheduled kernel of `task` built for the CPU, run on torch tensors."""
    import tvm

    from autosched.target import resolve_target

    out = torch.zeros(task.outputs[-1].shape, dtype=TORCH[task.outputs[-1].dtype])
    built = tvm.compile(task.mod, target=resolve_target("llvm").tvm()).jit()
    built["main"](*[tvm.runtime.from_dlpack(a) for a in (*args, out)])
    return out


def _task(name, **params):
    from autosched.model.workloads import WORKLOADS
    from autosched.workload import make_task

    workload = WORKLOADS[name]
    defaults = {k: p.default for k, p in inspect.signature(workload.te_func).parameters.items()
                if k not in workload.fixed and p.default is not None}
    params = {**defaults, **{k: v for k, v in SIZES.items() if k in defaults}, **params}
    return workload, params, make_task(workload.definition(), params)


def _inputs(task):
    g = torch.Generator().manual_seed(1)
    args = [torch.randn(s.shape, generator=g).to(TORCH[s.dtype]) for s in task.inputs]
    if task.workload.startswith("aten_layer_norm_grad_") and len(args) > 3:
        args[3] = args[3].abs() + 0.5   # rstd > 0
    return args


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", TWINS)
def test_half_workload_equals_its_torch_twin(name, dtype):
    workload, params, task = _task(name, dtype=dtype)
    assert task.outputs[-1].dtype == dtype
    args = _inputs(task)
    theirs = workload.torch_call(args, params)
    assert theirs.dtype == TORCH[dtype]
    torch.testing.assert_close(_run(task, args), theirs, **TWIN_TOLERANCE[dtype])


@pytest.mark.parametrize("name", ["aten_layer_norm_grad_input", "aten_layer_norm_grad_gamma"])
def test_layer_norm_backward_with_float32_statistics(name):
    """torch's CUDA layer norm saves float32 mean / rstd for half inputs: the variant
    takes them as they are."""
    workload, params, task = _task(name, dtype="bfloat16", stats_dtype="float32")
    assert [s.dtype for s in task.inputs][2:4] == ["float32", "float32"]
    args = _inputs(task)
    torch.testing.assert_close(_run(task, args), workload.torch_call(args, params),
                               **TWIN_TOLERANCE["bfloat16"])


@pytest.mark.parametrize("name, params, rows", [
    ("aten_mm", {"M": 2, "N": 3, "K": 256}, None),
    ("aten_layer_norm_grad_beta", {"M": 256, "N": 3}, 256)])
def test_half_sums_accumulate_in_float32(name, params, rows):
    """1 + 255 terms of 2^-8: a bfloat16 running sum stays 1 (its step at 1 is 2^-7), a
    float32 one reaches 1.996, 2.0 once rounded to bfloat16."""
    _, params, task = _task(name, dtype="bfloat16", **params)
    terms = torch.full((256,), 2.0 ** -8)
    terms[0] = 1
    if rows is None:   # A's rows are the terms, B is ones
        args = [terms.expand(2, 256).to(torch.bfloat16),
                torch.ones(256, 3, dtype=torch.bfloat16)]
    else:              # dy's columns are the terms
        args = [terms[:, None].expand(256, 3).contiguous().to(torch.bfloat16)]
    out = _run(task, args)
    assert out.float().unique().tolist() == [2.0]


TINY_MLP = '''
import torch
from torch import nn

def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU()).to(torch.bfloat16)

def make_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(4, 16, generator=g).to(torch.bfloat16),)

def loss_fn(output):
    return output.float().square().mean()
'''


def _force_kernels(db_url, path):
    """Newer torch baseline records, 1 s each: every task with a kernel record chooses
    it (our CPU kernels rarely beat torch at these sizes; the decision is export's, what
    is checked here is what the kernels compute)."""
    from autosched.db import open_database
    from autosched.model.baseline import record_baseline
    from autosched.model.baseline import baseline_threads
    from autosched.model.extract import model_tasks
    from autosched.target import resolve_target
    from autosched.versions import current_versions
    from search_space import SPACE_VERSION

    found = _extract(path)
    target, versions = resolve_target("llvm"), current_versions(SPACE_VERSION)
    with open_database(db_url) as db:
        for task in model_tasks(found):
            record_baseline(db, task, target, versions, [1.0], baseline_threads(target))
    return found


def _close(ours, eager, what, dtype="bfloat16"):
    tol = TWIN_TOLERANCE[dtype]
    atol = tol["atol"] * float(eager.detach().abs().max())
    torch.testing.assert_close(ours, eager, rtol=tol["rtol"], atol=atol, msg=what)


@pytest.mark.slow
def test_bf16_model_tunes_exports_and_trains_as_eager(tmp_path):
    from conftest import run_cli

    import autosched.model
    from autosched.model.modelfile import load_model_file
    from autosched.model.training_step import training_step

    path = tmp_path / "tiny_mlp_bf16.py"
    path.write_text(TINY_MLP)
    db = f"sqlite:///{tmp_path}/db.sqlite"
    # 4 tasks, one trial each: the linear and the GELU; GELU's backward and the
    # linear's weight gradient (the input needs none)
    done = run_cli("tune-model", str(path), "--train", "--trials", "4", "--db", db,
                   "--work-dir", str(tmp_path / "logs"), "--min-repeat-ms", "1")
    assert done.returncode == 0, done.stderr
    assert "torch baselines measured: 4" in done.stdout
    found = _force_kernels(db, path)
    assert [(op.workload, op.params["dtype"]) for op in found.ops] == [
        ("aten_linear", "bfloat16"), ("aten_gelu", "bfloat16"),
        ("aten_gelu_backward", "bfloat16"), ("aten_mm_tn", "bfloat16")]
    library = tmp_path / "lib"
    done = run_cli("export-model", str(path), "--train", "--db", db, "-o", str(library),
                   "--decide-on", "records", "--step-check", "off")
    assert done.returncode == 0, done.stderr

    spec = load_model_file(str(path))
    eager = spec.model.train()
    model = copy.deepcopy(eager)
    torch._dynamo.reset()
    backend = autosched.model.backend(str(library), "inductor")
    compiled = torch.compile(model, backend=backend, dynamic=False)
    loss = training_step(compiled, spec.inputs, spec.loss_fn)
    _close(loss, training_step(eager, spec.inputs, spec.loss_fn), "loss")
    for (n, p), (_, q) in zip(model.named_parameters(), eager.named_parameters()):
        assert p.grad.dtype == torch.bfloat16
        _close(p.grad, q.grad, f"gradient of {n}")
    ran = {(d.graph, d.workload) for d in backend.decisions if d.chosen == "autosched"}
    assert ran == {("forward", "aten_linear"), ("forward", "aten_gelu"),
                   ("backward", "aten_gelu_backward"), ("backward", "aten_mm_tn")}
    with torch.no_grad():
        out = compiled(*spec.inputs)
    _close(out, eager(*spec.inputs), "output")
