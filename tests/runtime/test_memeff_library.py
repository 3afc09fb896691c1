"""The fused memory-efficient GELU backward from a library made by `autosched tune` +
`autosched export`: same numerics as the torch kernel, torch for shapes it lacks, and a
plan that measures, names and applies it."""
from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
import torch.nn.functional as F

import autosched.runtime as rt
from autosched.cli import main
from autosched.runtime.memeff.kernels import gelu_backward, gelu_forward, gelu_tables
from autosched.runtime.memeff.library import OP_FILE
from autosched.runtime.measured_step import measure_step
from autosched.torch import LibraryError, load_library

ROWS, WIDTH = 2 * 16, 4 * 32   # the MLP activation of the tiny GPT (conftest.tiny_gpt)


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """Tuned (2 trials) and exported like a user does, for the tiny GPT's GELU shape."""
    work = tmp_path_factory.mktemp("memeff")
    url = f"sqlite:///{work}/db.sqlite"
    args = ["--arg", f"M={ROWS}", "--arg", f"N={WIDTH}", "--db", url]
    assert main(["tune", OP_FILE, "--trials", "2", "--work-dir", str(work), *args]) == 0
    assert main(["export", OP_FILE, "-o", str(work / "lib"), *args]) == 0
    return work / "lib"


@pytest.fixture(scope="module")
def fused(library):
    return rt.memeff_library_kernels(load_library(library))


def _case(rows, width, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=g) * 3
    return x, torch.randn(rows, width, generator=g)


def test_fused_backward_matches_the_stated_tolerance(fused):
    kernel = fused["gelu"]
    assert kernel.id.startswith("memeff_gelu_grad#") and "unrecorded" not in kernel.id
    x, grad = _case(ROWS, WIDTH)
    y, mask = kernel.forward(x, "none")
    got = kernel.backward(grad, y, mask, "none")
    xr = x.double().requires_grad_()
    F.gelu(xr).backward(grad.double())
    exact = xr.grad.float()
    near_min = (x - gelu_tables("none").x_min).abs() < 0.1
    err = (got - exact).abs() / grad.abs().clamp_min(1e-30)
    assert err[~near_min].max() <= 5e-6 * 2     # table error plus fp32 rounding of the kernel
    assert near_min.any() and err[near_min].max() <= 2e-4 * 2
    torch.testing.assert_close(got, gelu_backward(grad, y, mask, "none"), rtol=1e-4, atol=1e-4)


def test_shapes_and_variants_the_library_lacks_run_torch(fused):
    kernel = fused["gelu"]
    for rows, width, approximate in ((ROWS + 1, WIDTH, "none"), (ROWS, WIDTH, "tanh")):
        x, grad = _case(rows, width, seed=1)
        y, mask = gelu_forward(x, approximate)
        assert torch.equal(kernel.backward(grad, y, mask, approximate),
                           gelu_backward(grad, y, mask, approximate))


def test_three_d_activations_use_the_kernel_by_rows(fused):
    x, grad = _case(ROWS, WIDTH, seed=2)
    y, mask = gelu_forward(x)
    flat = fused["gelu"].backward(grad, y, mask)
    shaped = fused["gelu"].backward(grad.view(2, -1, WIDTH), y.view(2, -1, WIDTH),
                                      mask.view(2, -1, WIDTH))
    assert shaped.shape == (2, ROWS // 2, WIDTH)
    assert torch.equal(shaped.reshape(ROWS, WIDTH), flat)


def test_a_plan_measures_names_and_applies_the_fused_kernel(fused, tiny_gpt, grads, bw_path):
    model, inputs, loss_fn = tiny_gpt
    plan = rt.plan(model, inputs, "80%", loss_fn, actions=["keep", "memeff"], repeats=1,
                   bandwidth_path=bw_path, kernels=fused)
    assert set(plan.actions) <= {"keep", "memeff"} and "memeff" in plan.actions
    for layer in plan.layers:
        named = f"memeff_gelu={fused['gelu'].id}" in layer.kernel
        assert named == (layer.action == "memeff"), layer.kernel
    planned = rt.apply(model, plan, fused)
    measured = measure_step(planned, inputs, loss_fn, repeats=1)
    assert measured.saved_bytes == plan.predicted["saved_bytes"] <= plan.budget["bytes"]
    ref, got = grads(model, model, inputs, loss_fn), grads(model, planned, inputs, loss_fn)
    for name, r in ref.items():
        assert (got[name] - r).abs().max() <= 1e-3 * r.abs().max(), name
    assert math.isfinite(plan.predicted["step_time_s"])


def test_plan_cli_rejects_a_folder_without_a_library(tmp_path, capsys):
    (tmp_path / "m.py").write_text("def make_model(): pass\ndef make_inputs(): pass\n")
    code = main(["plan", str(tmp_path / "m.py"), "--memory-budget", "50%",
                 "--memeff-library", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--memeff-library" in err[0] and "manifest" in err[0]


def test_a_library_from_another_definition_is_refused(library, tmp_path):
    stale = tmp_path / "lib"
    shutil.copytree(library, stale)
    manifest = json.loads((stale / "manifest.json").read_text())
    manifest["kernels"][0]["task_key"] = "0" * 32          # built from an older formula
    (stale / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(LibraryError, match="another definition"):
        rt.memeff_library_kernels(load_library(stale))
