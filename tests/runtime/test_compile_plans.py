"""Plans under torch.compile: the custom-op memory-efficient forms save exactly their bytes
in a compiled graph, a compiled plan's saved bytes stay within the plan's budget and its
gradients equal eager's, selective-policy decisions are exact, and the measured choice is
Pareto-consistent.

Compiled with the `aot_eager_decomp_partition` backend: AOTAutograd and the min-cut
partitioner that inductor uses (the saved tensors are the same), without code generation.
"""
from __future__ import annotations

import sys

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy

import autosched.runtime as rt
from autosched.runtime.apply_plan import apply_actions
from autosched.runtime.checkpointing import save_compute_heavy, save_compute_heavy_decomposed
from autosched.runtime.compiled_plans import compile_planned, hybrid_actions
from autosched.runtime.measured_choice import MeasuredPlan, fastest_within, pareto_consistent
from autosched.runtime.memeff import MemEffGELU, MemEffLayerNorm
from autosched.runtime.memeff import ops as memeff_ops
from autosched.runtime.memeff.kernels import NEAR_MIN_GRAD_ERR
from autosched.runtime.meter import SavedTensorMeter, model_state
from autosched.runtime.model_profile import profile_model
from autosched.model.training_step import compute_loss
from support.compiled_steps import fresh_dynamo, max_rel_error, saved_bytes  # noqa: F401

BACKEND = "aot_eager_decomp_partition"
MEMEFF_REL = 1e-3          # memory-efficient forms' gradient tolerance (test_plan_api.py)



def test_compiled_memeff_gelu_saves_output_and_one_byte_mask():
    torch.manual_seed(0)
    x = torch.randn(64, 48, requires_grad=True)
    act = torch.compile(MemEffGELU(ops=True), backend=BACKEND)
    assert saved_bytes(act, (x,), None, []) == 64 * 48 * 4 + 64 * 48
    ref = torch.nn.functional.gelu(x)
    torch.testing.assert_close(act(x), ref)
    (gx,) = torch.autograd.grad(act(x).sum(), x)
    (rx,) = torch.autograd.grad(ref.sum(), x)
    torch.testing.assert_close(gx, rx, atol=NEAR_MIN_GRAD_ERR, rtol=0)


def test_compiled_memeff_layer_norm_saves_output_and_rstd():
    torch.manual_seed(0)
    ln = nn.LayerNorm(48)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-0.5, 0.5)
    lean = torch.compile(MemEffLayerNorm(ln, ops=True), backend=BACKEND)
    x = torch.randn(64, 48, requires_grad=True)
    assert saved_bytes(lean, (x,), None, [ln.weight, ln.bias]) == 64 * 48 * 4 + 64 * 4
    grads = torch.autograd.grad(lean(x).square().sum(), (x, ln.weight, ln.bias))
    refs = torch.autograd.grad(ln(x).square().sum(), (x, ln.weight, ln.bias))
    for g, r in zip(grads, refs):
        torch.testing.assert_close(g, r, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_custom_ops_pass_opcheck(layout):
    """Fake and real outputs agree (shapes, strides), forward and backward ops alike; a
    transposed input (a ViT's patch embedding feeds its blocks one) once gave a real
    LayerNorm output whose strides the fake did not describe, failing inductor's check."""
    torch.manual_seed(0)
    x = torch.randn(4, 16, 6)
    x = (x if layout == "contiguous" else x.transpose(1, 2).contiguous().transpose(1, 2))
    x.requires_grad_()
    w, b = torch.rand(6) + 0.5, torch.randn(6)
    k_gelu = memeff_ops.kernel_id("gelu", rt.memeff.TORCH_GELU)
    k_ln = memeff_ops.kernel_id("layer_norm", rt.memeff.TORCH_LAYER_NORM)
    y, mask = memeff_ops.gelu_op(x.detach(), "none", k_gelu)
    grad = torch.randn(4, 6, 16).transpose(1, 2)
    torch.library.opcheck(memeff_ops.gelu_op, (x, "none", k_gelu))
    torch.library.opcheck(memeff_ops.gelu_backward_op, (grad, y, mask, "none", k_gelu))
    torch.library.opcheck(memeff_ops.layer_norm_op,
                          (x, [6], w.requires_grad_(), b.requires_grad_(), 1e-5, k_ln))
    y, rstd = memeff_ops.layer_norm_op(x.detach(), [6], w.detach(), b.detach(), 1e-5, k_ln)
    torch.library.opcheck(memeff_ops.layer_norm_backward_op,
                          (grad, y, rstd, w.detach(), b.detach(), [6], [True, True, True],
                           k_ln))


def test_compiled_mixed_plan_keeps_its_memory_and_gradients(tiny_gpt, grads):
    model, inputs, loss_fn = tiny_gpt
    actions = ["memeff", "selective"]
    cores = [["attn.core"]] * 2
    eager_plan = apply_actions(model, actions, attention_cores=cores)
    compiled = torch.compile(apply_actions(model, actions, attention_cores=cores, compile=True),
                             backend=BACKEND)
    state = model_state(model)
    keep = saved_bytes(model, inputs, loss_fn, state)
    planned = saved_bytes(eager_plan, inputs, loss_fn, state)
    got = saved_bytes(compiled, inputs, loss_fn, state)
    assert got <= planned < keep
    ref = grads(model, model, inputs, loss_fn)
    assert max_rel_error(ref, grads(model, compiled, inputs, loss_fn)) < MEMEFF_REL


@pytest.mark.slow
def test_plan_costed_compiled_stays_within_budget_under_compile(tiny_gpt, grads, bw_path, gpt,
                                                               monkeypatch):
    # dynamo imports a traced function's module by name: the example must be importable
    monkeypatch.setitem(sys.modules, gpt.__name__, gpt)
    model, inputs, loss_fn = tiny_gpt
    eager = profile_model(model, inputs, loss_fn, repeats=1, bandwidth_path=bw_path)
    profile = profile_model(model, inputs, loss_fn, repeats=1, bandwidth_path=bw_path,
                            compile=True, backend=BACKEND)
    assert profile.compiled_with == BACKEND and eager.compiled_with is None
    for a, b in zip(eager.layers, profile.layers):
        # the same actions; compiled bytes are the compiled body's: the same where the
        # partitioner has nothing to choose (a layer kept whole, or recomputed whole)
        assert set(a.options) == set(b.options)
        for name in ("keep", "recompute"):
            assert (a.options[name].internal_bytes, a.options[name].shared) == \
                (b.options[name].internal_bytes, b.options[name].shared)
        assert b.options["keep"].fwd_s > 0 and b.options["keep"].bwd_s > 0
        # another action's time is keep's plus its measured step difference, which a
        # busy machine's noise can take to zero, never below (context_costs._with_time)
        assert all(c.fwd_s >= 0 and c.bwd_s >= 0 for c in b.options.values())
    # profiling compiled dozens of variants and forgot them: 8 more compiles of the model
    # (dynamo's recompile_limit) each still reach their backend, none runs eager
    traced = []
    for _ in range(8):
        torch.compile(model, backend=lambda gm, _: traced.append(gm) or gm.forward)(*inputs)
    assert len(traced) == 8
    ref = grads(model, model, inputs, loss_fn)
    state = model_state(model)
    for spec in ("60%", "25%"):
        plan = rt.plan(model, inputs, spec, loss_fn, profile=profile, backend=BACKEND)
        assert plan.model["compiled_with"] == BACKEND
        assert plan.model["layout"] == "inductor"   # no convolutions: one layout costed
        run = compile_planned(model, plan, backend=BACKEND)
        # the plan was fitted by measuring it compiled (make_plan._fit_compiled)
        assert plan.solver["measured_saved_bytes"] <= plan.budget["bytes"]
        assert saved_bytes(run, inputs, loss_fn, state) <= plan.budget["bytes"]
        tol = MEMEFF_REL if any("memeff" in a for a in plan.actions) else 1e-5
        assert max_rel_error(ref, grads(model, run, inputs, loss_fn)) < tol


@pytest.mark.parametrize("op, decision", [
    (torch.ops.aten.addmm.default, CheckpointPolicy.MUST_SAVE),
    (torch.ops.aten.bmm.default, CheckpointPolicy.MUST_SAVE),
    (torch.ops.aten.gelu.default, CheckpointPolicy.PREFER_RECOMPUTE),
    (torch.ops.aten.native_layer_norm.default, CheckpointPolicy.PREFER_RECOMPUTE),
    (torch.ops.aten._softmax.default, CheckpointPolicy.PREFER_RECOMPUTE),
])
def test_selective_policy_decisions(op, decision):
    assert save_compute_heavy(None, op) is decision
    # compiled: the same, but batch norms are left to the partitioner (no mark)
    assert save_compute_heavy_decomposed(None, op) is decision
    batch_norm = torch.ops.aten._native_batch_norm_legit.default
    assert save_compute_heavy(None, batch_norm) is CheckpointPolicy.PREFER_RECOMPUTE
    assert save_compute_heavy_decomposed(None, batch_norm) is CheckpointPolicy.PREFER_SAVE


def test_pareto_consistent_choice():
    mib = 1 << 20
    plans = [MeasuredPlan(100 * mib, 90 * mib, 0.150),     # 100%
             MeasuredPlan(60 * mib, 58 * mib, 0.170),      # 60%: slower than the 40% plan
             MeasuredPlan(40 * mib, 39 * mib, 0.160),      # 40%
             MeasuredPlan(25 * mib, 26 * mib, 0.140)]      # 25%: measured over its budget
    assert pareto_consistent(plans) == [3, 3, 3, None]
    plans[3] = MeasuredPlan(25 * mib, 24 * mib, 0.200)
    assert pareto_consistent(plans) == [0, 2, 2, 3]


def test_fastest_within_ignores_what_each_plan_was_made_for():
    plans = [MeasuredPlan(0, 30, 0.10), MeasuredPlan(0, 20, 0.12), MeasuredPlan(0, 20, 0.11)]
    assert [fastest_within(plans, b) for b in (10, 20, 25, 30)] == [None, 2, 2, 0]


def test_hybrid_takes_the_most_freeing_form_within_the_slowdown():
    from types import SimpleNamespace as NS

    saves = {"keep": 100, "memeff": 60, "memeff_ln": 80, "fused_attention": 70,
             "recompute": 0}

    def layer(**times):
        return NS(options={n: NS(time_s=t, internal_bytes=saves[n]) for n, t in times.items()})

    profile = NS(layers=[layer(keep=1.0, memeff=1.04, memeff_ln=1.01, fused_attention=1.0),
                         layer(keep=1.0, memeff=1.30, memeff_ln=1.02, fused_attention=1.0),
                         layer(keep=1.0, memeff=1.30, memeff_ln=1.02),
                         layer(keep=1.0, memeff=1.30, memeff_ln=1.20, fused_attention=1.1),
                         layer(keep=1.0, recompute=1.3)])
    assert hybrid_actions(profile) == ["memeff", "fused_attention", "memeff_ln", "keep",
                                       "keep"]


def test_memeff_with_partitioner_budget_saves_less_and_keeps_gradients(tiny_gpt, grads,
                                                                       bw_path):
    model, inputs, loss_fn = tiny_gpt
    profile = profile_model(model, inputs, loss_fn, repeats=1, bandwidth_path=bw_path,
                            actions=["keep", "memeff", "memeff_ln"])
    hybrid = hybrid_actions(profile, max_slowdown=float("inf"))
    assert hybrid == ["memeff", "memeff"]
    state = model_state(model)
    keep = saved_bytes(compile_planned(model, ["keep"] * 2, backend=BACKEND), inputs,
                       loss_fn, state)
    full = compile_planned(model, hybrid, backend=BACKEND)
    half = compile_planned(model, hybrid, memory_budget=0.5, backend=BACKEND)
    at_full, at_half = (saved_bytes(m, inputs, loss_fn, state) for m in (full, half))
    assert at_half < at_full < keep
    ref = grads(model, model, inputs, loss_fn)
    assert max_rel_error(ref, grads(model, half, inputs, loss_fn)) < MEMEFF_REL


def test_offloaded_layer_runs_outside_the_graph_and_keeps_gradients(tiny_gpt, grads):
    model, inputs, loss_fn = tiny_gpt
    cores = [["attn.core"]] * 2
    run = compile_planned(model, ["offload", "keep"], backend=BACKEND, attention_cores=cores)
    kept = compile_planned(model, ["keep", "keep"], backend=BACKEND)
    state = model_state(model)
    with SavedTensorMeter(state) as meter:
        loss = compute_loss(run, inputs, loss_fn)
    loss.backward()
    meter.release()
    assert meter.host_bytes > 0
    assert meter.device_bytes < saved_bytes(kept, inputs, loss_fn, state)
    ref = grads(model, model, inputs, loss_fn)
    torch.testing.assert_close(grads(model, run, inputs, loss_fn), ref)
