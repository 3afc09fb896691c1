"""Channels_last (NHWC) convolutions on the model path: a model converted with
``model.to(memory_format=torch.channels_last)`` (its input too) matches the
``aten_conv2d_nhwc*`` workloads, whose kernels read the tensors' memory through permuted
views (no copy), and trains on the backend as eager torch does; the same model in NCHW
matches the NCHW workloads as it always did.

Tolerances: autosched/model/dtypes.py, TWIN_TOLERANCE (float32 1e-4, float16 2e-3,
bfloat16 1.6e-2);
a model's output or gradient against eager is |ours - eager| <= rtol |eager| + atol
max|eager| per tensor (test_mixed_precision.py explains why).
"""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from autosched.model.dtypes import TWIN_TOLERANCE  # noqa: E402
from support.conv_block import (  # noqa: E402
    CL, NCHW_TASKS, TORCH, block_library, close_to_eager, extract_block, model_and_input,
    recording_backend, train_step)


def _rows(found) -> list:
    return [(op.workload, op.params, op.count) for op in found.ops]


def _expected(dtype: str, nhwc: bool) -> list:
    name = (lambda w: w.replace("aten_conv2d", "aten_conv2d_nhwc")) if nhwc else str
    return [(name(w), {"N": 2, **p, "dtype": dtype}, 1) for w, p in NCHW_TASKS]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_extraction_lists_nhwc_tasks_for_channels_last_and_nchw_ones_otherwise(dtype):
    found = extract_block(dtype)
    assert _rows(found) == _expected(dtype, nhwc=True)
    assert _rows(extract_block(dtype, channels_last=False)) == _expected(dtype, nhwc=False)


@pytest.mark.parametrize("channels_last", [False, True])
def test_extraction_for_inductor_lists_nhwc_tasks_of_any_model_inductor_lays_out_so(
        channels_last):
    """Inductor runs a CPU conv net channels_last whatever the model's layout, so the
    tasks it will call are the NHWC ones (the same tasks a channels_last model gives);
    the same model's graphs for the eager compiler keep NCHW."""
    found = extract_block("float32", channels_last, compiler="inductor")
    assert _rows(found) == _expected("float32", nhwc=True)


def _conv_node(channels_last: bool, shape=(2, 4, 8, 8), weight_too: bool = True):
    """A traced aten.convolution of a (K=8, 3x3) conv on an input of `shape`, with meta;
    input and (where `weight_too`) weight channels_last where asked."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    conv = nn.Conv2d(shape[1], 8, 3, padding=1)
    x = torch.randn(*shape)
    if channels_last:
        x = x.to(memory_format=CL)
        conv = conv.to(memory_format=CL) if weight_too else conv
    with FakeTensorMode(allow_non_fake_inputs=True):
        gm = make_fx(lambda x, w, b: torch.ops.aten.convolution(
            x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
            tracing_mode="fake")(x, conv.weight.detach(), conv.bias.detach())
    return next(n for n in gm.graph.nodes if n.target == torch.ops.aten.convolution.default)


def test_match_gives_permuted_views_in_and_the_output_permutation_back():
    from autosched.model.aten_match import match

    (m,) = match(_conv_node(True))
    assert m.workload == "aten_conv2d_nhwc_bias"
    assert m.input_shapes == ((2, 8, 8, 4), (8, 3, 3, 4), (8,))
    assert m.input_perms == ((0, 2, 3, 1), (0, 2, 3, 1), None)
    assert (m.output_perm, m.output_shape) == ((0, 3, 1, 2), (2, 8, 8, 8))
    (plain,) = match(_conv_node(False))
    assert (plain.workload, plain.input_shapes, plain.input_perms, plain.output_perm) == (
        "aten_conv2d_bias", ((2, 4, 8, 8), (8, 4, 3, 3), (8,)), (), None)
    assert plain.params == m.params
    # one channel: the input is plain contiguous too, and the NCHW kernel reads it as is
    (one,) = match(_conv_node(True, (2, 1, 8, 8)))
    assert one.workload == "aten_conv2d_bias" and one.input_perms == ()
    # a channels_last input with a plain weight: NCHW, as before
    (mixed,) = match(_conv_node(True, weight_too=False))
    assert mixed.workload == "aten_conv2d_bias" and mixed.input_perms == ()


SIZES = {"N": 2, "C": 5, "H": 9, "W": 7, "K": 6, "R": 3, "S": 3, "stride": 2, "pad": 1,
         "P": 5, "Q": 4}
NHWC = ["aten_conv2d_nhwc_bias_relu", "aten_conv2d_nhwc", "aten_conv2d_nhwc_grad_input",
        "aten_conv2d_nhwc_grad_weight", "aten_conv2d_nhwc_grad_bias"]


def _task(name, dtype):
    import inspect

    from autosched.model.workloads import WORKLOADS
    from autosched.workload import make_task

    workload = WORKLOADS[name]
    keys = [k for k in inspect.signature(workload.te_func).parameters
            if k not in workload.fixed and k != "dtype"]
    params = {k: SIZES[k] for k in keys} | {"dtype": dtype}
    return workload, params, make_task(workload.definition(), params)


def _run(task, args):
    """The unscheduled kernel of `task` built for the CPU, run on torch tensors."""
    import tvm

    from autosched.target import resolve_target

    out = torch.zeros(task.outputs[-1].shape, dtype=TORCH[task.outputs[-1].dtype])
    built = tvm.compile(task.mod, target=resolve_target("llvm").tvm()).jit()
    built["main"](*[tvm.runtime.from_dlpack(a) for a in (*args, out)])
    return out


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("name", NHWC)
def test_nhwc_kernel_equals_its_twin(name, dtype):
    workload, params, task = _task(name, dtype)
    g = torch.Generator().manual_seed(1)
    args = [torch.randn(s.shape, generator=g).to(TORCH[dtype]) for s in task.inputs]
    theirs = workload.torch_call(args, params)
    assert theirs.dtype == TORCH[dtype] and tuple(theirs.shape) == task.outputs[-1].shape
    torch.testing.assert_close(_run(task, args), theirs, **TWIN_TOLERANCE[dtype])


def test_twins_compute_torchs_convolution_of_the_channels_last_tensors():
    """Each NHWC twin on memory-order views equals the NCHW twin (torch's convolution and
    its gradients) on the logical tensors, permuted into memory order."""
    from autosched.model.workloads import WORKLOADS

    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(2, 5, 9, 7, generator=g), torch.randn(6, 5, 3, 3, generator=g)
    b, dy = torch.randn(6, generator=g), torch.randn(2, 6, 5, 4, generator=g)
    x, w, dy = (t.to(memory_format=CL) for t in (x, w, dy))
    params = {k: v for k, v in SIZES.items() if k not in ("P", "Q")} | {"dtype": "float32"}

    def nhwc(t):
        return t.permute(0, 2, 3, 1)

    y = WORKLOADS["aten_conv2d_nhwc_bias_relu"].torch_call((nhwc(x), nhwc(w), b), params)
    assert y.is_contiguous()   # torch's output is channels_last: its memory order is y
    torch.testing.assert_close(y.permute(0, 3, 1, 2), torch.relu(
        torch.nn.functional.conv2d(x, w, b, 2, 1)), rtol=0, atol=0)
    for name, nchw_in, nhwc_in, back in [
            ("grad_input", (dy, w), (nhwc(dy), nhwc(w)), nhwc),
            ("grad_weight", (dy, x), (nhwc(dy), nhwc(x)), nhwc),
            ("grad_bias", (dy,), (nhwc(dy),), lambda t: t)]:
        ours = WORKLOADS[f"aten_conv2d_nhwc_{name}"].torch_call(nhwc_in, params)
        reference = WORKLOADS[f"aten_conv2d_{name}"].torch_call(nchw_in, params)
        torch.testing.assert_close(ours, back(reference), rtol=1e-5, atol=1e-5, msg=name)


class KernelCalls(TorchDispatchMode):
    """Records every `torch.ops.autosched` call with its tensor arguments as they reach
    the op (what the kernel gets: the op copies only a non-contiguous tensor)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "autosched":
            name = func.name().split("::")[-1].split(".")[0]  # the workload
            self.calls.append((name, [(t.is_contiguous(), t.data_ptr()) for t in args]))
        return func(*args, **(kwargs or {}))


def _kernel_args(gm) -> list:
    """(workload, [the node each argument is]) of every kernel call in `gm`."""
    return [(str(n.target).split(".")[-2], list(n.args)) for n in gm.graph.nodes
            if n.op == "call_function" and str(n.target).startswith("autosched.")]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_backend_trains_the_channels_last_block_as_eager_reading_views(tmp_path, dtype):
    library = block_library(tmp_path / "lib", dtype)
    eager_model, x = model_and_input(dtype)
    eager_loss, eager_grads = train_step(eager_model, eager_model, x)
    model, _ = model_and_input(dtype)
    torch._dynamo.reset()
    backend = recording_backend(library)
    compiled = torch.compile(model, backend=backend, dynamic=False)
    loss, grads = train_step(compiled, model, x)
    close_to_eager(loss, eager_loss, "loss", dtype)
    for name, g in eager_grads.items():
        assert grads[name].dtype == g.dtype and grads[name].shape == g.shape
        # a channels_last weight gets a channels_last gradient, as in eager
        assert grads[name].stride() == g.stride(), name
        close_to_eager(grads[name], g, f"gradient of {name}", dtype)
    ran = sorted(d.workload for d in backend.decisions if d.chosen == "autosched")
    assert ran == sorted(w.replace("aten_conv2d", "aten_conv2d_nhwc") for w, _ in NCHW_TASKS)
    # in both graphs each 4-d argument of a kernel is a (0, 2, 3, 1) permute of a
    # channels_last value, a contiguous view; nothing is copied on the way. A value an
    # earlier kernel computed is that kernel's output itself, permuted back and forth
    calls = _kernel_args(backend.graphs["forward"]) + _kernel_args(backend.graphs["backward"])
    assert sorted(w for w, _ in calls) == ran
    for workload, args in calls:
        for a in args:
            if a.target == torch.ops.aten.permute.default:
                assert list(a.args[1]) == [0, 2, 3, 1], workload
                value = a.args[0]
                if "val" in value.meta:
                    assert value.meta["val"].is_contiguous(memory_format=CL), workload
                else:
                    assert value.target == torch.ops.aten.permute.default and \
                        list(value.args[1]) == [0, 3, 1, 2], workload
                    assert str(value.args[0].target).startswith("autosched."), workload
            else:
                assert a.meta["val"].dim() == 1, workload   # a bias
    # run on the real tensors, the forward graph hands the kernels the user's input and
    # the weights themselves (no copy: the op copies only what is not contiguous)
    with torch.no_grad(), KernelCalls() as seen:
        backend.graphs["forward"](*backend.inputs)
    assert len(seen.calls) == 3
    assert all(contiguous for _, tensors in seen.calls for contiguous, _ in tensors)
    ptrs = {name: [p for _, p in t] for name, t in seen.calls}
    assert ptrs["aten_conv2d_nhwc_bias_relu"][:2] == [x.data_ptr(),
                                                      model.conv1.weight.data_ptr()]
    assert ptrs["aten_conv2d_nhwc"][1] == model.conv2.weight.data_ptr()
    assert ptrs["aten_conv2d_nhwc_bias"][:2] == [x.data_ptr(), model.skip.weight.data_ptr()]
    with torch.no_grad():
        out = compiled(x)
    assert out.is_contiguous(memory_format=CL) and not out.is_contiguous()
    close_to_eager(out, eager_model(x), "output", dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cuda_tensor_core_sketch_takes_the_nhwc_convolution(dtype):
    """For sm_80 the forward NHWC convolution and its weight gradient are GEMMs for the
    tensor-core sketch, their staged rows contiguous along C (runs of C elements where the
    NCHW convolution has runs of 1); the input gradient, whose product is guarded by the
    stride's divisibility, is not (as in NCHW)."""
    from tvm import s_tir

    from autosched.target import resolve_target
    from search_space import generate_space
    from search_space.cuda.gemm_form import gemm_roles

    target = resolve_target(json.dumps({"kind": "cuda", "arch": "sm_80"}))
    params = {"N": 2, "C": 16, "H": 8, "W": 8, "K": 32, "R": 3, "S": 3, "stride": 1,
              "pad": 1, "dtype": dtype}

    def task(name):
        from autosched.model.workloads import WORKLOADS
        from autosched.workload import make_task

        return make_task(WORKLOADS[name].definition(), params)

    def roles(name, block):
        sch = s_tir.Schedule(task(name).mod)
        return gemm_roles(sch, sch.get_sblock(block))

    for name in ("aten_conv2d_nhwc_bias_relu", "aten_conv2d_nhwc_grad_weight"):
        assert "tensor_core" in generate_space(task(name), target).sketches, name
    assert "tensor_core" not in generate_space(task("aten_conv2d_nhwc_grad_input"),
                                               target).sketches
    nhwc, nchw = roles("aten_conv2d_nhwc_bias_relu", "conv"), roles("aten_conv2d_bias_relu",
                                                                    "conv")
    assert nhwc.groups == {"m": (0, 1, 2), "n": (3,), "k": (4, 5, 6)} and not nhwc.b_kn
    assert nhwc.extents == nchw.extents == {"m": 128, "n": 32, "k": 144}
    assert (nhwc.runs, nchw.runs) == ((16, 16), (1, 3))
