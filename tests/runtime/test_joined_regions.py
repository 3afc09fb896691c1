"""Compiled plans' checkpoint regions: a region after a selective one joins it (its input
rebuilt, not kept) when fed by it alone, dropout masks survive the join, and selective
layers leave batch norms to a partitioner that sees them decomposed.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from autosched.runtime.apply_plan import apply_actions
from autosched.runtime.compiled_plans import compile_planned, partitioner_backend
from autosched.runtime.meter import model_state
from autosched.runtime.model_profile import profile_model
from support.compiled_steps import fresh_dynamo, max_rel_error, saved_bytes  # noqa: F401


class _Residual(nn.Module):
    """A ResNet basic block: its input feeds the next block's convolution and residual."""

    def __init__(self, c=8):
        super().__init__()
        self.conv1, self.conv2 = (nn.Conv2d(c, c, 3, padding=1, bias=False) for _ in "12")
        self.bn1, self.bn2 = nn.BatchNorm2d(c), nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(x + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


class _Chain(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.Sequential(*(_Residual() for _ in range(n)))

    def forward(self, x):
        return self.blocks(x).square().mean()


@pytest.mark.parametrize("backend", ["inductor", "aot_backend"])
def test_checkpointed_layers_after_selective_layers_join_their_region(backend, grads):
    from autosched.model.graphs import aot_backend
    from autosched.runtime.compiled_plans import joins_selective_regions, partitioner_backend

    backend = aot_backend(_look_only) if backend == "aot_backend" else backend
    model, inputs = _Chain(), (torch.randn(2, 8, 8, 8, requires_grad=True),)
    boundary = 2 * 8 * 8 * 8 * 4
    state = model_state(model)
    ref = grads(model, model, inputs, None)

    def saved(actions, join):
        if join:
            run = compile_planned(model, actions, layers="blocks", backend=backend)
        else:          # a plain compile of the applied plan: every region keeps its input
            run = torch.compile(apply_actions(model, actions, "blocks", compile=True,
                                              backend=backend),
                                backend=partitioner_backend(1.0, backend))
        assert max_rel_error(ref, grads(model, run, inputs, None)) < 1e-5
        return saved_bytes(run, inputs, None, state)

    # every region after a selective one joins it: its boundary is rebuilt, not kept
    for actions, joined in ((["selective"] * 3, 2), (["selective", "recompute", "selective"], 1),
                            (["recompute", "recompute", "selective"], 0)):
        assert saved(actions, True) == saved(actions, False) - joined * boundary, actions
    assert joins_selective_regions(backend) is (backend == "inductor")


class _Fed(nn.Module):
    """Two residual blocks in two containers; the second is fed a sum made between them."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.down = nn.ModuleList([_Residual(), _Residual()])
        self.up = nn.ModuleList([_Residual(), _Residual()])

    def forward(self, x):
        y = self.down[1](self.down[0](x))
        return self.up[1](self.up[0](y + x)).square().mean()


def _look_only(gm, kind, channels_last):
    """A graph pass that changes nothing."""



def test_a_region_fed_by_work_between_the_layers_is_not_joined(grads, bw_path):
    model, inputs = _Fed(), (torch.randn(2, 8, 8, 8, requires_grad=True),)
    boundary = 2 * 8 * 8 * 8 * 4
    state = model_state(model)

    def saved(actions, join):
        if join:
            run = compile_planned(model, actions, layers="down,up")
        else:
            run = torch.compile(apply_actions(model, actions, "down,up", compile=True),
                                backend=partitioner_backend(1.0))
        assert max_rel_error(grads(model, model, inputs, None),
                             grads(model, run, inputs, None)) < 1e-5
        return saved_bytes(run, inputs, None, state)

    # down.1 and up.1 join the selective region before them; up.0 (fed y + x) does not
    joined = saved(["selective"] * 4, True)
    assert joined == saved(["selective"] * 4, False) - 2 * boundary
    prof = profile_model(model, inputs, actions=["keep", "selective"], repeats=1,
                         bandwidth_path=bw_path, compile=True)
    assert prof.containers == "down,up"
    assert [layer.follows_previous for layer in prof.layers] == [False, True, False, True]


class _DropoutBlock(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.conv, self.drop = nn.Conv2d(c, c, 3, padding=1), nn.Dropout(0.5)

    def forward(self, x):
        return torch.relu(x + self.drop(self.conv(x)))


@pytest.mark.parametrize("backend", ["inductor", "aot_backend"])
def test_joined_regions_rebuild_dropout_boundaries_with_the_forward_masks(backend):
    from autosched.model.graphs import aot_backend

    backend = aot_backend(_look_only) if backend == "aot_backend" else backend
    torch.manual_seed(0)
    model = nn.Sequential(*(_DropoutBlock() for _ in range(3)))
    x = torch.randn(2, 8, 8, 8)

    def grads(actions):
        run = compile_planned(model, actions, backend=backend)
        model.zero_grad(set_to_none=True)
        torch.manual_seed(123)          # the same masks in every forward
        run(x).square().mean().backward()
        return [p.grad.clone() for p in model.parameters()]

    kept = grads(["keep"] * 3)
    for actions in (["selective"] * 3, ["selective", "recompute", "recompute"]):
        for got, ref in zip(grads(actions), kept):
            assert torch.equal(got, ref), actions


@pytest.mark.parametrize("built_for, recomputed", [("inductor", 0), ("aot_backend", 6)])
def test_selective_layers_leave_batch_norms_to_a_decomposing_partitioner(built_for, recomputed):
    """Built for a backend that decomposes batch norms before partitioning, selective
    layers let the partitioner keep each batch norm's statistics: the backward reduces
    no batch again. Built for one that partitions them whole, the policy recomputes each
    batch norm whole (3 blocks x 2 batch norms: 6 reductions), as it must there (left
    unmarked, a whole batch norm's output would be kept)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch._inductor.decomposition import select_decomp_table

    from autosched.model.graphs import aot_backend

    backend = aot_backend(_look_only) if built_for == "aot_backend" else built_for
    graphs = {}

    def keeping(kind):
        def compiler(gm, example_inputs):
            graphs[kind] = gm
            return make_boxed_func(gm.forward)
        return compiler
    decomposing = aot_autograd(fw_compiler=keeping("forward"), bw_compiler=keeping("backward"),
                               decompositions=select_decomp_table(),
                               partition_fn=min_cut_rematerialization_partition)
    model = _Chain()
    planned = apply_actions(model, ["selective"] * 3, "blocks", compile=True, backend=backend)
    torch.compile(planned, backend=decomposing)(torch.randn(2, 8, 8, 8)).backward()
    reductions = [n for n in graphs["backward"].graph.nodes
                  if n.target is torch.ops.aten.var_mean.correction]
    assert len(reductions) == recomputed
