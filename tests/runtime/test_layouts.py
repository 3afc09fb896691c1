"""Layouts of compiled plans: every graph contiguous when the plan says so, inductor's own
choice otherwise; plans of convolution models compiled on inductor are costed under both
and carry their layout to compile_planned."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import autosched.runtime as rt
from autosched.runtime.compiled_plans import LAYOUTS, compile_planned, graph_compiler
from autosched.runtime.meter import model_state
from autosched.runtime.model_profile import profile_model
from support.compiled_steps import fresh_dynamo, max_rel_error, saved_bytes  # noqa: F401


def test_unknown_layouts_and_the_contiguous_layout_off_inductor_are_refused():
    with pytest.raises(ValueError, match="unknown layout 'nhwc'"):
        graph_compiler("inductor", "nhwc")
    with pytest.raises(ValueError, match="inductor setting"):
        graph_compiler("aot_eager", "contiguous")
    with pytest.raises(ValueError, match="compiled profile"):
        profile_model(_Convs(), (torch.randn(2, 4, 8, 8),), layout="contiguous")


class _Block(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.conv, self.norm = nn.Conv2d(c, c, 3, padding=1), nn.GroupNorm(2, c)

    def forward(self, x):
        return x + torch.nn.functional.silu(self.norm(self.conv(x)))


class _Convs(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(4, 8, 1)
        self.blocks = nn.Sequential(*(_Block() for _ in range(n)))

    def forward(self, x):
        return self.blocks(self.stem(x)).square().mean()


def saved_layouts(run, inputs) -> set:
    """Of the 4-d tensors one step saves for backward: 'channels_last' and/or
    'contiguous'."""
    seen = set()

    def pack(t):
        if t.dim() == 4 and t.shape[1] > 1 and t.shape[2] * t.shape[3] > 1:
            seen.add("contiguous" if t.is_contiguous() else
                     "channels_last" if t.is_contiguous(memory_format=torch.channels_last)
                     else "other")
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = run(*inputs)
    loss.backward()
    return seen


def test_the_contiguous_layout_keeps_every_graph_contiguous(grads):
    model, inputs = _Convs(), (torch.randn(2, 4, 8, 8),)
    ref = grads(model, model, inputs, None)
    for actions in (["keep"] * 3, ["recompute", "keep", "selective"]):
        own = compile_planned(model, actions, layers="blocks")
        flat = compile_planned(model, actions, layers="blocks", layout="contiguous")
        # inductor runs this CPU's convolutions channels-last (oneDNN) and saves them so
        assert "channels_last" in saved_layouts(own, inputs), actions
        assert saved_layouts(flat, inputs) == {"contiguous"}, actions
        for run in (own, flat):
            assert max_rel_error(ref, grads(model, run, inputs, None)) < 1e-5, actions


def test_layouts_are_worth_trying_only_where_inductor_compiles_convolutions():
    from autosched.runtime.compiled_plans import layouts_worth_trying

    convs, x = _Convs(), (torch.randn(2, 4, 8, 8),)
    mlp = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 1))
    assert layouts_worth_trying(convs, x, "inductor") == LAYOUTS
    assert layouts_worth_trying(convs, x, "aot_eager") == ("inductor",)
    assert layouts_worth_trying(mlp, (torch.randn(2, 4),), "inductor") == ("inductor",)


@pytest.mark.slow
def test_compiled_plans_of_conv_models_keep_the_fastest_layout_and_carry_it(bw_path, grads):
    model, inputs = _Convs(), (torch.randn(2, 4, 8, 8),)
    state = model_state(model)
    profiles = [profile_model(model, inputs, actions=["keep", "recompute"], repeats=1,
                              bandwidth_path=bw_path, compile=True, layout=layout)
                for layout in LAYOUTS]
    assert [p.layout for p in profiles] == list(LAYOUTS)
    ref = grads(model, model, inputs, None)
    for spec in ("100%", "70%"):
        plan = rt.plan(model, inputs, spec, profile=profiles)
        # each layout's plan predicted; the fastest kept, its layout recorded
        predicted = plan.solver["layouts"]
        assert set(predicted) == set(LAYOUTS)
        assert plan.predicted["step_time_s"] == min(t for t in predicted.values() if t)
        assert predicted[plan.model["layout"]] == plan.predicted["step_time_s"]
        again = rt.Plan.from_json(plan.to_json())
        assert again.model["layout"] == plan.model["layout"] and "layout" in again.table()
        run = compile_planned(model, again)        # compiled under the plan's layout
        layouts = saved_layouts(run, inputs)
        assert (layouts == {"contiguous"}) is (plan.model["layout"] == "contiguous")
        assert saved_bytes(run, inputs, None, state) == plan.solver["measured_saved_bytes"]
        assert max_rel_error(ref, grads(model, run, inputs, None)) < 1e-5
    # one layout's plan alone: the same as the choice restricted to it
    alone = rt.plan(model, inputs, "70%", profile=profiles[1])
    assert alone.model["layout"] == "contiguous" and "layouts" not in alone.solver
