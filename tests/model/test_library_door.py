"""One door from a kernel library to a torch model: `autosched.torch.load_library(DIR)`
loads it once, and the module swap (runtime/library_modules.py) and the memory-efficient
GELU (runtime.memeff_library_kernels) take that object; neither reads the directory again.
(The torch.compile backend taking it: test_backend_entry_point.py.)"""
from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

ROWS, WIDTH, K, N = 8, 16, 6, 5
RECORD_IDS = {"matmul": 11, "layer_norm": 12, "memeff_gelu_grad": 13}


@pytest.fixture(scope="module")
def library_dir(tmp_path_factory):
    """One library: examples/nn_ops.py's matmul and layer_norm, and the fused GELU
    backward of runtime/memeff/workloads.py, lightly scheduled, with record ids."""
    from support.torch_library import compile_kernels, kernel_entry, make_tasks, write_manifest

    from autosched.runtime.memeff.library import OP_FILE

    nn_tasks, nn_metas = make_tasks({"matmul": [{"M": ROWS, "N": N, "K": K}],
                                     "layer_norm": [{"M": ROWS, "N": WIDTH}]})
    gelu_tasks, gelu_metas = make_tasks({"memeff_gelu_grad": [{"M": ROWS, "N": WIDTH}]},
                                        OP_FILE)
    tasks, metas = nn_tasks + gelu_tasks, nn_metas + gelu_metas
    directory = tmp_path_factory.mktemp("door") / "lib"
    target, symbols = compile_kernels(directory, tasks)
    entries = [dict(kernel_entry(t, s, m), record_id=RECORD_IDS[t.workload])
               for t, s, m in zip(tasks, symbols, metas)]
    write_manifest(directory, target, entries)
    return directory


@pytest.fixture
def library(library_dir, tmp_path):
    """The library loaded once from a copy whose files are then deleted: what uses it
    afterwards cannot have loaded the directory again."""
    from autosched.torch import load_library

    copy_dir = Path(shutil.copytree(library_dir, tmp_path / "lib"))
    loaded = load_library(copy_dir)
    for name in ("manifest.json", "kernels.so"):
        (copy_dir / name).unlink()
    return loaded


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(K, N)        # the matmul kernel's N, K
        self.norm = nn.LayerNorm(WIDTH)  # the layer_norm kernel's N
        self.out = nn.Linear(N, 3)       # no kernel of this shape

    def forward(self, x, h):
        return self.out(self.fc(x)).sum() + self.norm(h).square().sum()


def _inputs(rows=ROWS, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, K, generator=g), torch.randn(rows, WIDTH, generator=g)


def _step(model, inputs):
    loss = model(*inputs)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    return loss.detach(), grads


def test_the_module_swap_runs_the_loaded_librarys_kernels(library):
    from autosched.runtime.library_modules import (AutoschedLayerNorm, AutoschedLinear,
                                                   swap_modules_for_library)

    torch.manual_seed(0)
    model = Net()
    reference = copy.deepcopy(model)
    swapped = swap_modules_for_library(model, library)
    assert swapped == {"fc": library.entries("matmul")[0].symbol,
                       "norm": library.entries("layer_norm")[0].symbol}
    assert isinstance(model.fc, AutoschedLinear) and model.fc.record_id == 11
    assert isinstance(model.norm, AutoschedLayerNorm) and model.norm.record_id == 12
    assert type(model.out) is nn.Linear
    loss, grads = _step(model, _inputs())
    ref_loss, ref_grads = _step(reference, _inputs())
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-5)
    assert grads.keys() == ref_grads.keys()
    for name, r in ref_grads.items():
        torch.testing.assert_close(grads[name], r, rtol=1e-5, atol=1e-5)
    # another row count than the kernels': torch's own operators, bit for bit
    other = _inputs(rows=ROWS + 1, seed=1)
    assert torch.equal(model(*other), reference(*other))


def test_the_memeff_gelu_comes_from_the_same_loaded_library(library):
    import autosched.runtime as rt
    from autosched.runtime.memeff.kernels import gelu_backward, gelu_forward

    kernels = rt.memeff_library_kernels(library)
    assert set(kernels) == {"gelu"} and kernels["gelu"].id == "memeff_gelu_grad#13"
    g = torch.Generator().manual_seed(2)
    x, grad = torch.randn(ROWS, WIDTH, generator=g) * 3, torch.randn(ROWS, WIDTH, generator=g)
    y, mask = gelu_forward(x)
    torch.testing.assert_close(kernels["gelu"].backward(grad, y, mask),
                               gelu_backward(grad, y, mask), rtol=1e-4, atol=1e-4)
    x, grad = x[:-1], grad[:-1]          # a shape the library lacks: torch's kernel
    y, mask = gelu_forward(x)
    assert torch.equal(kernels["gelu"].backward(grad, y, mask), gelu_backward(grad, y, mask))


def test_the_library_names_its_records_by_op(library):
    assert library.record_ids() == {"autosched::matmul": "11", "autosched::layer_norm": "12",
                                    "autosched::memeff_gelu_grad": "13"}
    assert [e.args for e in library.entries("layer_norm")] == [
        {"M": ROWS, "N": WIDTH, "eps": 1e-5, "dtype": "float32"}]
    assert library.entries("softmax") == []
