"""`autosched.model.backend(DIR, cudagraphs=True)` and the named backend's 'cudagraphs'
option, as far as a machine without a GPU shows them: refused in one line where there is
no CUDA work to capture; the kernels' ops pass torch's own capture checks (no mutation,
no `cudagraph_unsafe` tag); the forward and backward of one captured graph share one
state, with the parameters and saved tensors as static inputs; torch's checks, run on
CPU graphs, leave them uncaptured and running as before.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from support.mlp_library import mlp_and_input, mlp_loss  # noqa: E402


@pytest.fixture(scope="module")
def model_library(tmp_path_factory):
    """DIR of a CPU model library with a kernel for every task of MLP's training step,
    every one chosen by model_ops.json."""
    from support.mlp_library import chosen_mlp_library

    return chosen_mlp_library(tmp_path_factory.mktemp("model") / "lib")


@pytest.fixture
def decisions_only(tmp_path):
    """DIR as export-model writes it where torch won everywhere: model_ops.json alone."""
    from autosched.model.choice import write_choices

    write_choices(str(tmp_path), "mlp.py", True, [])
    return tmp_path


NO_GPU = ("cudagraphs=True needs a CUDA GPU, and torch sees none here; leave cudagraphs "
          "off on the CPU")


def _look_only(gm, kind, channels_last):
    """A graph pass that changes nothing."""



def test_a_cpu_library_is_refused_in_one_line(model_library):
    import autosched.model
    from autosched.errors import UserError

    with pytest.raises(UserError) as e:
        autosched.model.backend(model_library, "eager", cudagraphs=True)
    assert str(e.value) == (f"cudagraphs=True captures CUDA work, and {model_library} holds "
                            "cpu kernels; export the model with --target cuda, or leave "
                            "cudagraphs off")


def test_no_gpu_is_refused_in_one_line(decisions_only):
    import autosched.model
    from autosched.errors import UserError

    with pytest.raises(UserError) as e:
        autosched.model.backend(decisions_only, cudagraphs=True)
    assert str(e.value) == NO_GPU
    with pytest.raises(UserError) as e:
        autosched.model.backend(decisions_only, cudagraphs="yes")
    assert str(e.value) == "cudagraphs is True or False, not 'yes'"


def _first_call_error(options):
    model, x = mlp_and_input()
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as e:
        torch.compile(model, backend="autosched", options=options)(x)
    return e.value.inner_exception


def test_the_named_backend_takes_cudagraphs_as_an_option(decisions_only):
    from autosched.errors import UserError

    error = _first_call_error({"library": str(decisions_only), "cudagraphs": True})
    assert isinstance(error, UserError) and str(error) == NO_GPU
    error = _first_call_error({"library": str(decisions_only), "cudagraphs": 1})
    assert str(error) == "the autosched backend's 'cudagraphs' is True or False, not 1"


def test_reduce_overhead_mode_points_at_the_option():
    from autosched.errors import UserError

    model, x = mlp_and_input()
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as e:
        torch.compile(model, backend="autosched", mode="reduce-overhead")(x)
    assert isinstance(e.value.inner_exception, UserError)
    assert str(e.value.inner_exception) == (
        "the autosched backend takes no mode; for CUDA graphs pass "
        "options={'library': DIR, 'cudagraphs': True}")


def test_graph_inputs_off_the_gpu_are_refused_in_one_line(decisions_only):
    import autosched.model
    from autosched.errors import UserError

    compiled_backend = autosched.model.backend(decisions_only, "eager")
    compiled_backend.cudagraphs = True    # as made on a GPU machine, given a CPU model
    model, x = mlp_and_input()
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as e:
        torch.compile(model, backend=compiled_backend)(x)
    assert isinstance(e.value.inner_exception, UserError)
    assert str(e.value.inner_exception) == (
        "cudagraphs=True captures CUDA work, and this graph's inputs are not on a CUDA "
        "device (move the model and inputs to the GPU, or leave cudagraphs off)")


def _rewritten_graphs(model_library):
    """{kind: (gm, example_inputs)} of one training step as the backend rewrote them."""
    import autosched.model

    compiled_backend = autosched.model.backend(model_library, "eager")
    graphs = {}

    def keep(gm, example_inputs, kind):
        from torch._functorch.aot_autograd import make_boxed_func

        graphs[kind] = (gm, example_inputs)
        return make_boxed_func(gm.forward)

    compiled_backend.compile_graph = keep
    model, x = mlp_and_input()
    torch._dynamo.reset()
    mlp_loss(torch.compile(model, backend=compiled_backend, dynamic=False)(x)).backward()
    return graphs


def test_the_kernels_ops_pass_torchs_capture_checks(model_library):
    from torch._dynamo.backends.cudagraphs import find_input_mutations
    from torch._inductor.utils import get_first_incompatible_cudagraph_node

    graphs = _rewritten_graphs(model_library)
    assert set(graphs) == {"forward", "backward"}
    ours = set()
    for gm, _ in graphs.values():
        for node in gm.graph.nodes:
            if node.op == "call_function" and str(node.target).startswith("autosched."):
                ours.add(str(node.target))
                assert torch._C.Tag.cudagraph_unsafe not in node.target.tags
                assert node.target._schema.is_mutable is False
        assert get_first_incompatible_cudagraph_node(gm) is None
        assert find_input_mutations(gm.graph) == set()
    # the overload without an autograd layer: AOTAutograd differentiated these graphs
    assert ours == {"autosched.aten_linear.graph", "autosched.aten_gelu.graph",
                    "autosched.aten_gelu_backward.graph", "autosched.aten_mm.graph",
                    "autosched.aten_mm_tn.graph"}


def test_forward_and_backward_share_one_state_with_params_and_saved_tensors_static():
    from autosched.model.graphs import aot_backend

    seen = []

    def record(gm, example_inputs, kind, cudagraphs):
        from torch._functorch.aot_autograd import make_boxed_func

        names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        static = cudagraphs.static_inputs(gm, len(example_inputs), kind)
        seen.append((kind, cudagraphs, [names[i] for i in static], len(names)))
        return make_boxed_func(gm.forward)

    model, x = mlp_and_input()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=aot_backend(_look_only, record,
                                                        cudagraphs=True), dynamic=False)
    mlp_loss(compiled(x)).backward()
    (fw, fw_state, fw_static, _), (bw, bw_state, bw_static, bw_inputs) = seen
    assert (fw, bw) == ("forward", "backward") and fw_state is bw_state
    assert fw_static == ["primals_1", "primals_2", "primals_4", "primals_5"]  # x: primals_3
    assert all(not name.startswith("tangents") for name in bw_static)
    assert len(bw_static) == bw_inputs - 1                      # all but the one tangent
    assert fw_state.graph_id is not None and bool(fw_state.enabled)


def test_torchs_checks_leave_a_cpu_graph_uncaptured_and_running():
    from torch._dynamo.utils import counters

    from autosched.model.graphs import aot_backend, eager_graph

    states = []

    def eager_recording(gm, example_inputs, kind, cudagraphs):
        states.append(cudagraphs)
        return eager_graph(gm, example_inputs, kind, cudagraphs=cudagraphs)

    model, x = mlp_and_input()
    expected = model(x)
    torch._dynamo.reset()
    skips = counters["inductor"]["cudagraph_skips"]
    compiled = torch.compile(model, backend=aot_backend(_look_only,
                                                        eager_recording, cudagraphs=True))
    out = compiled(x)
    mlp_loss(out).backward()
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert len(states) == 2 and states[0] is states[1] and not states[0].enabled
    assert counters["inductor"]["cudagraph_skips"] == skips + 1   # the forward's, once


def test_inductor_takes_the_cudagraph_arguments_and_its_checks_refuse_a_cpu_graph():
    from autosched.model.graphs import aot_backend, inductor_graph

    states = []

    def inductor_recording(gm, example_inputs, kind, cudagraphs):
        states.append((kind, cudagraphs))
        return inductor_graph(gm, example_inputs, kind, cudagraphs=cudagraphs)

    model, x = mlp_and_input()
    torch._dynamo.reset()
    compiled = torch.compile(model.fc1, backend=aot_backend(_look_only,
                                                            inductor_recording,
                                                            cudagraphs=True))
    with torch.no_grad():
        out = compiled(x)
        torch.testing.assert_close(out, model.fc1(x), rtol=1e-6, atol=1e-6)
    assert [kind for kind, _ in states] == ["inference"] and not states[0][1].enabled
