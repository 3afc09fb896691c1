"""`torch.compile(model, backend="autosched", options={"library": DIR})`: the backend torch
finds through autosched's `torch_dynamo_backends` entry point is `autosched.model.backend(DIR)`
under a name: the same kernels, outputs and gradients; bad options are one clear error.

The library is a model library as `autosched export-model` writes it (kernels.so,
manifest.json, model_ops.json) of every operator of one training step of a small MLP,
lightly scheduled, with model_ops.json choosing every kernel (so that all of them run).
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from support.mlp_library import mlp_and_input, mlp_loss  # noqa: E402

TOL = {"rtol": 1e-4, "atol": 1e-5}  # kernels reduce in another order than torch


@pytest.fixture(scope="module")
def model_library(tmp_path_factory):
    """DIR of a CPU model library with a kernel for every task of MLP's training step,
    every one chosen by model_ops.json."""
    from support.mlp_library import chosen_mlp_library

    return chosen_mlp_library(tmp_path_factory.mktemp("model") / "lib")


def _training_step(backend, options=None):
    """(loss, gradients) of one step of a fresh MLP compiled with `backend`."""
    model, x = mlp_and_input()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, options=options, dynamic=False)
    loss = mlp_loss(compiled(x))
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def test_autosched_is_a_listed_backend():
    assert "autosched" in torch._dynamo.list_backends()


def test_named_backend_runs_the_same_kernels_as_backend_dir(model_library):
    import autosched.model

    options = {"library": str(model_library), "compiler": "eager"}
    named_loss, named_grads = _training_step("autosched", dict(options))
    named = autosched.model.backend_of(options)
    explicit = autosched.model.backend(model_library, "eager")
    loss, grads = _training_step(explicit)
    assert named is not explicit and named.decisions == explicit.decisions
    ran = {(d.graph, d.workload) for d in named.decisions if d.chosen == "autosched"}
    assert ran == {("forward", "aten_linear"), ("forward", "aten_gelu"),
                   ("backward", "aten_gelu_backward"), ("backward", "aten_mm"),
                   ("backward", "aten_mm_tn")}
    torch.testing.assert_close(named_loss, loss, rtol=0, atol=0)
    assert named_grads.keys() == grads.keys() == {"fc1.weight", "fc1.bias", "fc2.weight",
                                                  "fc2.bias"}
    for name, g in grads.items():
        torch.testing.assert_close(named_grads[name], g, rtol=0, atol=0, msg=name)
    # and both are eager torch's numbers
    eager_loss, eager_grads = _training_step(lambda gm, inputs: gm.forward)
    torch.testing.assert_close(named_loss, eager_loss, **TOL)
    for name, g in eager_grads.items():
        torch.testing.assert_close(named_grads[name], g, msg=name, **TOL)


def test_backend_of_a_loaded_library_runs_the_same_kernels_without_loading_again(
        model_library, tmp_path):
    import shutil

    import autosched.model
    from autosched.torch import load_library

    copy_dir = shutil.copytree(model_library, tmp_path / "lib")
    library = load_library(copy_dir)
    for name in ("manifest.json", "kernels.so"):   # a second load would find no kernels
        (copy_dir / name).unlink()
    loaded = autosched.model.backend(library, "eager")
    assert loaded.directory == copy_dir
    loss, grads = _training_step(loaded)
    by_dir = autosched.model.backend(model_library, "eager")
    dir_loss, dir_grads = _training_step(by_dir)
    assert loaded.decisions == by_dir.decisions
    assert sum(d.chosen == "autosched" for d in loaded.decisions) == 7   # calls on kernels
    torch.testing.assert_close(loss, dir_loss, rtol=0, atol=0)
    for name, g in dir_grads.items():
        torch.testing.assert_close(grads[name], g, rtol=0, atol=0, msg=name)


def test_equal_options_share_one_backend_until_dynamo_resets(model_library):
    import autosched.model

    options = {"library": str(model_library), "compiler": "eager"}
    torch._dynamo.reset()
    first = autosched.model.backend_of(options)
    assert autosched.model.backend_of({"library": model_library, "compiler": "eager"}) is first
    assert autosched.model.backend_of({"library": str(model_library)}) is not first  # "auto"
    model, x = mlp_and_input()
    with torch.no_grad():
        torch.compile(model.eval(), backend="autosched", options=dict(options))(x)
    assert {d.graph for d in first.decisions} == {"inference"}
    torch._dynamo.reset()
    assert autosched.model.backend_of(options) is not first


def _first_call_error(options, mode=None):
    model, x = mlp_and_input()
    torch._dynamo.reset()
    kwargs = {"options": options} if mode is None else {"mode": mode}
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as e:
        torch.compile(model, backend="autosched", **kwargs)(x)
    return e.value.inner_exception


USAGE = ("torch.compile(model, backend='autosched', options={'library': DIR}) with DIR "
         "what `autosched export-model` wrote")


@pytest.mark.parametrize("options, mode, kind, message", [
    (None, "max-autotune", "UserError",
     f"the autosched backend takes no mode (got 'max-autotune'); use {USAGE}"),
    ({"compiler": "eager"}, None, "LibraryError",
     f"the autosched backend needs a library: {USAGE}"),
    ({"library": 3}, None, "LibraryError",
     "the autosched backend's 'library' is a directory path, not 3"),
    ({"library": "lib", "threads": 2}, None, "UserError",
     "the autosched backend has no option 'threads'; it takes 'library' (required), "
     "'compiler' (auto, inductor, eager) and 'cudagraphs' (True, False)"),
    ({"library": "lib", "compiler": "tvm"}, None, "UserError",
     "the autosched backend's 'compiler' is one of auto, inductor, eager, not 'tvm'"),
])
def test_bad_options_are_one_clear_error(options, mode, kind, message):
    from autosched.errors import UserError

    error = _first_call_error(options, mode)
    assert isinstance(error, UserError) and type(error).__name__ == kind
    assert str(error) == message


def test_a_missing_library_directory_is_a_library_error(tmp_path):
    from autosched.torch import LibraryError

    error = _first_call_error({"library": str(tmp_path / "nowhere")})
    assert isinstance(error, LibraryError)
    assert str(error) == (f"model library not found: {tmp_path / 'nowhere'} is not a "
                          "directory")
