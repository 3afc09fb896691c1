"""torch.compile traces autosched ops through their fake implementations: one graph, no
breaks, same numbers as eager, gradients through the backward kernels."""
from __future__ import annotations

import torch


def two_ops(x, w, b):
    h = torch.ops.autosched.linear(x, w, b)
    return torch.ops.autosched.gelu(h) * 2.0


class GraphRecorder:
    """A torch.compile backend that keeps each graph's op targets and runs it eagerly."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        return gm.forward


def _mlp_inputs(requires_grad=False):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 8, generator=g)
    w = torch.randn(12, 8, generator=g, requires_grad=requires_grad)
    b = torch.randn(12, generator=g, requires_grad=requires_grad)
    return x, w, b


def test_fullgraph_compile_with_inductor_matches_eager(nn_ops):
    torch._dynamo.reset()
    x, w, b = _mlp_inputs()
    compiled = torch.compile(two_ops, fullgraph=True)
    torch.testing.assert_close(compiled(x, w, b), two_ops(x, w, b), rtol=1e-6, atol=1e-6)


def test_two_autosched_ops_land_in_one_graph(nn_ops):
    torch._dynamo.reset()
    rec = GraphRecorder()
    compiled = torch.compile(two_ops, fullgraph=True, backend=rec)
    x, w, b = _mlp_inputs()
    torch.testing.assert_close(compiled(x, w, b), two_ops(x, w, b))
    assert len(rec.graphs) == 1
    assert [t for t in rec.graphs[0] if t.startswith("autosched.")] == [
        "autosched.linear", "autosched.gelu"]


def test_compiled_training_step_matches_eager_gradients(nn_ops):
    torch._dynamo.reset()
    x, w, b = _mlp_inputs(requires_grad=True)
    compiled = torch.compile(two_ops, fullgraph=True, backend="aot_eager")
    compiled(x, w, b).square().sum().backward()
    grads = w.grad.clone(), b.grad.clone()
    w.grad = b.grad = None
    two_ops(x, w, b).square().sum().backward()
    torch.testing.assert_close(grads, (w.grad, b.grad), rtol=1e-6, atol=1e-6)


def test_a_second_shape_recompiles_onto_its_own_kernel(nn_ops):
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w, b: torch.ops.autosched.linear(x, w, b),
                             fullgraph=True, backend="aot_eager", dynamic=True)
    torch.manual_seed(0)
    for m, n, k in [(16, 12, 8), (16, 4, 12), (8, 6, 4)]:
        x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
        torch.testing.assert_close(compiled(x, w, b), x @ w.t() + b, rtol=1e-5, atol=1e-5)


def test_compile_traces_the_fallback_for_unseen_shapes(nn_ops_fallback):
    torch._dynamo.reset()
    rec = GraphRecorder()
    compiled = torch.compile(two_ops, fullgraph=True, backend=rec)
    torch.manual_seed(0)
    x, w, b = torch.randn(5, 3), torch.randn(7, 3), torch.randn(7)  # no kernel has these
    torch.testing.assert_close(compiled(x, w, b), two_ops(x, w, b))
    expected = torch.nn.functional.gelu(x @ w.t() + b, approximate="tanh") * 2.0
    torch.testing.assert_close(compiled(x, w, b), expected, rtol=1e-6, atol=1e-6)
    assert len(rec.graphs) == 1
