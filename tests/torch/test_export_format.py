"""A manifest written by `autosched export`'s own code loads, and its ops run and train."""
from __future__ import annotations

import shutil

import torch

import autosched.torch as at
from autosched import exporting as export
from autosched.target import resolve_target
from autosched.versions import current_versions


def test_manifest_from_export_loads(nn_library, tmp_path):
    from support.torch_library import TEST_SELECTION, make_tasks

    lib_dir = tmp_path / "lib"
    shutil.copytree(nn_library, lib_dir)
    tasks, metas = make_tasks(TEST_SELECTION)
    choices = [export.KernelChoice({"decisions": []}, i, 1e-3) for i in range(len(tasks))]
    manifest = export.build_manifest(tasks, choices, export.kernel_symbols(tasks),
                                     resolve_target("llvm"), current_versions("1"), metas)
    export.write_manifest(str(lib_dir / export.MANIFEST_NAME), manifest)

    lib = at.load_library(lib_dir)
    assert set(lib.ops) == set(TEST_SELECTION)
    assert len(lib.manifest.kernels) == len(tasks)
    torch.manual_seed(0)
    x = torch.randn(8, 4, requires_grad=True)
    w = torch.randn(6, 4, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    h = torch.randn(8, 16)
    torch.testing.assert_close(torch.ops.autosched.gelu(h),
                               torch.nn.functional.gelu(h, approximate="tanh"))
    torch.ops.autosched.linear(x, w, b).sum().backward()
    torch.testing.assert_close(w.grad, torch.ones(8, 6).t() @ x.detach(), rtol=1e-5, atol=1e-5)
