"""The registered ops compute what the op file says, pass opcheck and gradcheck, and their
gradients run through the library's backward kernels."""
from __future__ import annotations

import contextlib
import importlib
import logging

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import autosched.torch as at

FORWARD = ["linear", "matmul", "gelu", "softmax", "layer_norm"]


def _inputs(entry, requires_grad=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    dtype = {"float32": torch.float32, "float64": torch.float64}
    return [torch.randn(s.shape, generator=g, dtype=dtype[s.dtype], requires_grad=requires_grad)
            for s in entry.inputs]


def _reference(entry):
    module, _, name = entry.meta["torch_reference"].partition(":")
    return getattr(importlib.import_module(module), name)


def _entries(lib, workload=None, dtype=None):
    return [k for k in lib.manifest.kernels
            if (workload is None or k.workload == workload)
            and (dtype is None or k.inputs[0].dtype == dtype)]


@contextlib.contextmanager
def spy_kernel(lib, workload, dtype):
    """Record the data pointers that the workload's `dtype` kernel is called with."""
    (entry,) = _entries(lib, workload, dtype)
    kernels = at.ops.bound_kernels(workload)
    variant = kernels.variants[kernels.key_of(entry)]
    calls, original = [], variant.function
    object.__setattr__(variant, "function",
                       lambda *args: calls.append([t.data_ptr() for t in args]) or original(*args))
    try:
        yield calls
    finally:
        object.__setattr__(variant, "function", original)


class Recorder(TorchDispatchMode):
    """Names of the ops that reach the dispatcher below autograd."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def test_every_kernel_matches_its_torch_reference(nn_ops, references_on_path):
    assert len(nn_ops.ops) == 15
    for entry in nn_ops.manifest.kernels:
        inputs = _inputs(entry)
        out = nn_ops[entry.workload](*inputs)
        want = _reference(entry)(*inputs)
        tol = 1e-5 if entry.inputs[0].dtype == "float32" else 1e-12
        assert out.shape == want.shape and out.dtype == want.dtype, entry.symbol
        torch.testing.assert_close(out, want, rtol=tol, atol=tol, msg=entry.symbol)


def test_one_op_dispatches_over_shape_variants(nn_ops, references_on_path):
    linear = torch.ops.autosched.linear
    shapes = [tuple(e.inputs[0].shape) + (e.outputs[0].shape[1],)
              for e in _entries(nn_ops, "linear", "float32")]
    assert len(shapes) == 4
    torch.manual_seed(0)
    for m, k, n in shapes:
        x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
        torch.testing.assert_close(linear(x, w, b), x @ w.t() + b, rtol=1e-5, atol=1e-5)


def test_opcheck_passes_for_every_registered_op(nn_ops):
    checked = set()
    for entry in nn_ops.manifest.kernels:
        key = (entry.workload, entry.inputs[0].dtype)
        if key in checked:
            continue
        checked.add(key)
        grad = bool(entry.meta.get("backward"))
        result = torch.library.opcheck(nn_ops[entry.workload].default,
                                       tuple(_inputs(entry, requires_grad=grad)))
        assert set(result.values()) == {"SUCCESS"}, (entry.workload, result)
    assert {w for w, _ in checked} == set(nn_ops.ops)


def test_the_graph_overload_runs_the_same_kernels_without_an_autograd_layer(nn_ops):
    for entry in nn_ops.manifest.kernels:
        inputs = _inputs(entry)
        graph = nn_ops.graph_op(entry.workload)
        assert graph is getattr(torch.ops.autosched, entry.workload).graph
        assert torch.equal(graph(*inputs), nn_ops[entry.workload](*inputs)), entry.symbol
        # torch's checks of an op (schema, fake tensors, dispatch), no autograd's
        result = torch.library.opcheck(graph, tuple(inputs),
                                       test_utils=("test_schema", "test_faketensor"))
        assert set(result.values()) == {"SUCCESS"}, (entry.workload, result)
    # the eager op keeps its autograd; the overload's caller (a differentiated graph)
    # needs none: its Python autograd layer is not on the call
    entry = _entries(nn_ops, "linear", "float32")[0]
    x = _inputs(entry, requires_grad=True)
    assert nn_ops["linear"](*x).grad_fn is not None
    plain = _inputs(entry)
    with Recorder() as seen, torch.no_grad():
        nn_ops.graph_op("linear")(*plain)
    assert seen.names == ["autosched.linear"]
    with pytest.raises(KeyError):
        nn_ops.graph_op("no_such_workload")


@pytest.mark.parametrize("workload", FORWARD)
def test_gradcheck_float64(nn_ops, workload):
    (entry,) = _entries(nn_ops, workload, "float64")
    inputs = tuple(_inputs(entry, requires_grad=True))
    assert torch.autograd.gradcheck(nn_ops[workload], inputs, eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("workload,grads", [
    ("linear", {"linear_grad_x", "linear_grad_w", "linear_grad_b"}),
    ("matmul", {"matmul_grad_a", "matmul_grad_b"}),
    ("gelu", {"gelu_grad"}), ("softmax", {"softmax_grad"}),
    ("layer_norm", {"layer_norm_grad_x", "layer_norm_grad_gamma", "layer_norm_grad_beta"}),
])
def test_backward_runs_the_backward_kernels(nn_ops, workload, grads):
    entry = _entries(nn_ops, workload, "float32")[0]
    inputs = _inputs(entry, requires_grad=True)
    out = nn_ops[workload](*inputs)
    with Recorder() as rec:
        out.backward(torch.randn_like(out))
    used = {n.removeprefix("autosched.") for n in rec.names if n.startswith("autosched.")}
    assert used == grads


def test_gradients_equal_torch_autograd(nn_ops, references_on_path):
    torch.manual_seed(0)
    for workload in FORWARD:
        entry = _entries(nn_ops, workload, "float64")[0]
        inputs = _inputs(entry, requires_grad=True)
        ref_inputs = [t.detach().clone().requires_grad_() for t in inputs]
        seed = torch.randn(entry.outputs[0].shape, dtype=torch.float64)
        nn_ops[workload](*inputs).backward(seed)
        _reference(entry)(*ref_inputs).backward(seed)
        for a, b in zip(inputs, ref_inputs):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-10, atol=1e-10, msg=workload)


def test_unseen_shape_raises_naming_both_signatures(nn_ops):
    with pytest.raises(ValueError) as err:
        torch.ops.autosched.matmul(torch.randn(2, 3), torch.randn(3, 4))
    msg = str(err.value)
    assert isinstance(err.value, at.KernelArgumentError)
    assert "(A: float32[2, 3], B: float32[3, 4])" in msg
    assert "(A: float32[8, 6], B: float32[6, 5])" in msg


def test_wrong_dtype_is_a_type_error(nn_ops):
    with pytest.raises(TypeError, match=r"float32\[8, 6\].*got \(A: int32\[8, 6\]"):
        torch.ops.autosched.matmul(torch.ones(8, 6, dtype=torch.int32),
                                   torch.ones(6, 5, dtype=torch.int32))


def test_fallback_runs_reference_and_logs_once_per_shape(nn_ops_fallback, caplog):
    caplog.set_level(logging.INFO, logger="autosched.torch")
    torch.manual_seed(0)
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    for _ in range(3):
        torch.testing.assert_close(torch.ops.autosched.matmul(a, b), a @ b)
    torch.ops.autosched.matmul(torch.randn(5, 3), b)
    logged = [r.getMessage() for r in caplog.records if "torch reference" in r.getMessage()]
    assert len(logged) == 2
    assert "(A: float32[2, 3], B: float32[3, 4])" in logged[0]
    assert "nn_reference:matmul" in logged[0]


def test_fallback_gradients_for_an_unseen_shape(nn_ops_fallback):
    torch.manual_seed(0)
    x = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    gamma = torch.randn(7, dtype=torch.float64, requires_grad=True)
    beta = torch.randn(7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(torch.ops.autosched.layer_norm, (x, gamma, beta))


def test_fallback_keeps_library_kernels_for_known_shapes(nn_ops_fallback):
    with spy_kernel(nn_ops_fallback, "gelu", "float64") as calls:
        torch.ops.autosched.gelu(torch.randn(4, 5, dtype=torch.float64))
    assert len(calls) == 1


def test_explicit_reference_overrides_the_declared_one(nn_library):
    calls = []

    def my_gelu(x):
        calls.append(tuple(x.shape))
        return torch.nn.functional.gelu(x, approximate="tanh")

    at.load_library(nn_library, fallback=True, references={"gelu": my_gelu})
    torch.manual_seed(0)
    x = torch.randn(3, 3)
    torch.testing.assert_close(torch.ops.autosched.gelu(x),
                               torch.nn.functional.gelu(x, approximate="tanh"))
    assert calls == [(3, 3)]


def test_layer_norm_reference_receives_the_library_eps(nn_library):
    seen = {}

    def ln(x, gamma, beta, eps=0.5):
        seen["eps"] = eps
        return torch.nn.functional.layer_norm(x, x.shape[-1:], gamma, beta, eps)

    at.load_library(nn_library, fallback=True, references={"layer_norm": ln})
    torch.ops.autosched.layer_norm(torch.randn(2, 3), torch.ones(3), torch.zeros(3))
    assert seen == {"eps": 1e-5}


def test_inputs_reach_the_kernel_without_copies(nn_ops):
    torch.manual_seed(0)
    a, b = torch.randn(8, 6), torch.randn(5, 6).t()  # b is not contiguous
    with spy_kernel(nn_ops, "matmul", "float32") as calls:
        c = torch.ops.autosched.matmul(a, b)
    (ptrs,) = calls
    assert ptrs[0] == a.data_ptr()          # contiguous input: passed as is
    assert ptrs[1] != b.data_ptr()          # transposed input: a contiguous copy
    assert ptrs[2] == c.data_ptr()          # the kernel wrote into the returned tensor
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)
