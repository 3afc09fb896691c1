"""Layer discovery, the one-call rule, rest accounting, autosched custom ops and the
examples' library hook."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from autosched.errors import UserError
from autosched.runtime.layers import find_layers, signature
from autosched.runtime.model_profile import profile_model
from autosched.runtime.measured_step import measure_step


def test_layers_are_the_children_of_the_largest_block_container(gpt, mlp):
    model = gpt.make_model(n_layer=3, d_model=32, n_head=2, seq_len=8, vocab=16)
    assert [layer.name for layer in find_layers(model)] == ["blocks.0", "blocks.1", "blocks.2"]
    assert [layer.name for layer in find_layers(mlp.make_model(n_layer=2, width=8, hidden=8))] \
        == ["blocks.0", "blocks.1"]
    seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    assert [layer.name for layer in find_layers(seq)] == ["0", "1", "2"]
    assert [layer.name for layer in find_layers(model, "blocks.0.attn")] == \
        ["blocks.0.attn.qkv", "blocks.0.attn.core", "blocks.0.attn.proj"]


def test_no_container_or_a_wrong_path_is_a_user_error():
    with pytest.raises(UserError, match="no nn.ModuleList"):
        find_layers(nn.Linear(2, 2))
    with pytest.raises(UserError, match="no submodule"):
        find_layers(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), "missing")


class _Stages(nn.Module):
    """A ResNet's shape: stages side by side, defined last-run-first, and an unused list
    of heads (one runs per step)."""

    def __init__(self):
        super().__init__()
        self.late = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
        self.early = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
        self.heads = nn.ModuleList([nn.Linear(4, 2), nn.Linear(4, 2)])

    def forward(self, x):
        return self.heads[0](self.late(self.early(x) * 2))


def test_the_layers_span_every_outermost_container_that_runs_once_in_run_order(bw_path):
    model = _Stages()
    # statically: the outermost containers, in definition order
    assert [layer.name for layer in find_layers(model)] == \
        ["late.0", "late.1", "early.0", "early.1", "early.2", "heads.0", "heads.1"]
    assert [layer.name for layer in find_layers(model, "early, late")] == \
        ["early.0", "early.1", "early.2", "late.0", "late.1"]
    # profiled: the heads (one of them never runs) are left out, the stages run in order
    prof = profile_model(model, (torch.randn(3, 4),), actions=["keep"], repeats=1,
                         bandwidth_path=bw_path)
    assert prof.containers == "early,late"
    assert [(p.name, p.index) for p in prof.layers] == \
        [("early.0", 0), ("early.1", 1), ("early.2", 2), ("late.0", 3), ("late.1", 4)]
    assert [p.follows_previous for p in prof.layers] == [False, True, True, False, True]
    assert find_layers(model, prof.containers)[3].name == "late.0"


def test_named_containers_must_be_disjoint_and_distinct():
    model = _Stages()
    for spec in ("early,early", "early,early.0", "early,missing"):
        with pytest.raises(UserError, match="named twice|no submodule"):
            find_layers(model, spec)
    shared = nn.Linear(4, 4)
    with pytest.raises(UserError, match="same module"):
        find_layers(nn.Sequential(nn.Sequential(shared, nn.ReLU()),
                                  nn.Sequential(shared, nn.ReLU())), "0,1")


class Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

    def forward(self, x):
        return self.blocks[1](self.blocks[0](self.blocks[0](x)))


def test_a_layer_that_runs_twice_is_refused(bw_path):
    with pytest.raises(UserError, match="ran 2 times"):
        profile_model(Twice(), (torch.randn(2, 4),), repeats=1, bandwidth_path=bw_path)


def test_rest_and_layers_add_up_to_the_measured_step(tiny_gpt, bw_path):
    model, inputs, loss_fn = tiny_gpt
    prof = profile_model(model, inputs, loss_fn, actions=["keep", "recompute"], repeats=1,
                         bandwidth_path=bw_path)
    assert prof.keep_saved_bytes == measure_step(model, inputs, loss_fn, repeats=1).saved_bytes
    # the final LayerNorm saves the last block's output: a shared storage of the rest
    assert len(prof.rest_shared) == 1 and prof.rest_bytes > 0
    assert sum(p.options["keep"].time_s for p in prof.layers) + prof.rest_time_s == \
        pytest.approx(prof.keep_step_time_s)
    assert set(prof.layers[0].options) == {"keep", "recompute"}
    assert prof.layers[0].attention_cores == ["attn.core"]
    assert prof.layers[0].memeff_modules == ["ln1", "ln2", "act"]
    from autosched.runtime.model_profile import applicable_actions
    from autosched.runtime.trace import trace_ops

    call = _call(model, inputs)
    assert applicable_actions(model.blocks[0], trace_ops(model.blocks[0], call.args,
                                                         call.kwargs), True) == [
        "keep", "recompute", "memeff_ln", "memeff", "recompute_attention",
        "recompute_attention+memeff_ln", "recompute_attention+memeff", "selective",
        "selective_dense", "selective_narrow", "offload", "offload+memeff_ln", "offload+memeff"]
    assert applicable_actions(model.blocks[0], trace_ops(model.blocks[0], call.args,
                                                         call.kwargs), False, fused=True) == [
        "keep", "recompute", "memeff_ln", "memeff", "recompute_attention",
        "recompute_attention+memeff_ln", "recompute_attention+memeff", "selective",
        "selective_dense", "selective_narrow", "fused_attention", "selective+fused_attention",
        "selective_dense+fused_attention", "selective_narrow+fused_attention"]
    assert prof.layers[0].fused_attention == {"attn.core": True}
    assert signature(model.blocks[0], _call(model, inputs)) == \
        signature(model.blocks[1], _call(model, inputs, 1))


def _call(model, inputs, index=0):
    from autosched.runtime.layers import CallCapture

    layers = find_layers(model)
    with CallCapture(layers) as cap:
        model(*inputs)
    return cap.single_calls()[layers[index].name]


@pytest.fixture(scope="module")
def autosched_op():
    """A kernel registered in the autosched namespace, as a loaded library would."""
    name = "runtime_test_matmul"
    if not hasattr(torch.ops.autosched, name):
        lib = torch.library.Library("autosched", "FRAGMENT")
        lib.define(f"{name}(Tensor a, Tensor b) -> Tensor")
        lib.impl(name, lambda a, b: a @ b, "CPU")
        autosched_op.lib = lib                 # keep the registration alive
    return name


def test_custom_ops_are_found_by_namespace_and_named_in_the_plan(autosched_op, tmp_path, mlp,
                                                                  bw_path, grads):
    import autosched.runtime as rt
    from autosched.runtime.library_modules import swap_modules_for_library
    from autosched.torch.library import KernelLibrary
    from autosched.torch.manifest import KernelEntry, Manifest

    entry = KernelEntry(symbol=autosched_op, workload="matmul", args={"M": 16, "N": 32, "K": 32},
                        task_key="", inputs=(), outputs=(), record_id="rec-7")
    manifest = Manifest(tmp_path, "", {"kind": "llvm"}, "", {}, {}, (entry,))
    # what load_library returns for such a library: its manifest and ops by workload
    library = KernelLibrary(tmp_path, manifest,
                            {"matmul": getattr(torch.ops.autosched, autosched_op)}, False)

    model = mlp.make_model(n_layer=2, width=32, hidden=32)
    reference = mlp.make_model(n_layer=2, width=32, hidden=32)
    swapped = swap_modules_for_library(model, library)
    assert set(swapped) == {"blocks.0.fc1", "blocks.0.fc2", "blocks.1.fc1", "blocks.1.fc2"}
    inputs = mlp.make_inputs(batch=16, width=32)
    got, ref = grads(model, model, inputs, mlp.loss_fn), grads(reference, reference, inputs,
                                                               mlp.loss_fn)
    for name, r in ref.items():
        torch.testing.assert_close(got[name], r)
    assert library.record_ids() == {"autosched::matmul": "rec-7"}
    # the real loader names the op after the workload; this test op has its own name
    plan = rt.plan(model, inputs, "100%", mlp.loss_fn, repeats=1, bandwidth_path=bw_path,
                   kernel_ids={f"autosched::{autosched_op}": "rec-7"})
    for layer in plan.layers:
        assert layer.custom_ops == [f"autosched::{autosched_op}"]
        assert layer.kernel == f"autosched::{autosched_op}=rec-7"
