"""An NCHW conv net on the backend compiling with inductor: inductor runs it channels_last,
so every convolution goes to its NHWC kernel, reading each tensor in the kernel's layout
with no copy of its own, and each convolution is computed once."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from support.conv_block import (  # noqa: E402
    NCHW_TASKS, block_library, close_to_eager, model_and_input, recording_backend, train_step)


def _dense(shape, strides) -> bool:
    """Whether a tensor of `shape` with `strides` is contiguous (size-1 axes aside)."""
    expected = 1
    for size, stride in reversed(list(zip(shape, strides))):
        if size > 1 and stride != expected:
            return False
        expected *= size
    return True


def _profiled_inductor_step(library):
    """(backend, profile, the compiled model, its gradients, the eager model, the input):
    one profiled training step of the NCHW block on the backend over `library` compiling
    with inductor, after a step that compiles; its loss and gradients are checked
    against eager's."""
    eager_model, x = model_and_input("float32", channels_last=False)
    eager_loss, eager_grads = train_step(eager_model, eager_model, x)
    model, _ = model_and_input("float32", channels_last=False)
    torch._dynamo.reset()
    backend = recording_backend(library, "inductor")
    compiled = torch.compile(model, backend=backend, dynamic=False)
    train_step(compiled, model, x)    # compiles
    with torch.profiler.profile(record_shapes=True) as prof:
        loss, grads = train_step(compiled, model, x)
    close_to_eager(loss, eager_loss, "loss", "float32")
    for name, g in eager_grads.items():
        close_to_eager(grads[name], g, f"gradient of {name}", "float32")
    return backend, prof, compiled, grads, eager_model, x


def _copied(calls) -> list:
    """The kernel arguments that did not reach their kernel dense in its layout."""
    return [(e.name, tuple(shape)) for e in calls for shape, strides in
            zip(e.input_shapes, e.structured_input_strides) if not _dense(shape, strides)]


def test_inductor_backend_trains_an_nchw_block_on_nhwc_kernels_copying_no_activation(
        tmp_path):
    """Inductor lays the NCHW block out channels_last, so the backend gives every
    convolution of both graphs to its NHWC kernel (extraction listed those tasks), the
    step equals eager's, and every tensor reaches its kernel contiguous in the kernel's
    layout: activations and output gradients as inductor laid them out, the user's NCHW
    input and the NCHW weights made channels_last in the graph (inductor's copy, fused
    with its own work), so the op copies nothing."""
    library = block_library(tmp_path / "lib", "float32")
    backend, prof, compiled, grads, eager_model, x = _profiled_inductor_step(library)
    for name, g in grads.items():
        assert g.is_contiguous(), name   # as the parameter is laid out
    ran = sorted(d.workload for d in backend.decisions if d.chosen == "autosched")
    assert ran == sorted(w.replace("aten_conv2d", "aten_conv2d_nhwc") for w, _ in NCHW_TASKS)
    calls = [e for e in prof.events() if e.name.startswith("autosched::")]
    assert sorted(e.name.removeprefix("autosched::") for e in calls) == ran
    # each convolution is computed once, by its kernel: none is left to torch, and the
    # second conv reads the first's kernel output (not a torch recomputation of it)
    for kind in ("forward", "backward"):
        assert not [n for n in backend.graphs[kind].graph.nodes if n.target in (
            torch.ops.aten.convolution.default,
            torch.ops.aten.convolution_backward.default)], kind
    # nothing reaches a kernel in another layout than its own
    assert _copied(calls) == []
    assert not [e for e in prof.events() if e.name == "aten::clone"]
    with torch.no_grad():
        close_to_eager(compiled(x), eager_model(x), "output", "float32")


def test_a_kernel_after_a_convolution_left_to_torch_reads_it_in_the_kernels_layout(
        tmp_path):
    """The first convolution (with its ReLU) stays torch's: inductor computes it
    channels_last, though the graph's strides say NCHW. The next convolution's NHWC
    kernel reads that value through a channels_last copy in the graph (which inductor
    fuses with the ReLU), so it reaches the kernel dense in the kernel's layout and the
    op copies nothing; the step equals eager's."""
    from autosched.model.choice import OpChoice, read_choices, write_choices

    library = block_library(tmp_path / "lib", "float32")
    kept = "aten_conv2d_nhwc_bias_relu"
    write_choices(str(library), "block.py", True, [
        OpChoice.from_json(dict(c.to_json(), excluded="left to torch by the test"))
        if c.workload == kept else c for c in read_choices(library)])
    backend, prof, _, _, _, _ = _profiled_inductor_step(library)
    ran = [d.workload for d in backend.decisions if d.chosen == "autosched"]
    assert kept not in ran and "aten_conv2d_nhwc" in ran
    assert [n for n in backend.graphs["forward"].graph.nodes
            if n.target == torch.ops.aten.convolution.default]   # conv1: torch's
    calls = [e for e in prof.events() if e.name.startswith("autosched::")]
    assert _copied(calls) == []
