"""The fused attention core: offered only where a core is softmax(q kᵀ / sqrt(d) [+ causal]) v,
equal to it in outputs and gradients, and saving exactly the probabilities less one
log-sum-exp per row; carried by plans (JSON included) and kept under torch.compile."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from autosched.runtime.actions import ACTIONS, FUSED
from autosched.runtime.apply_plan import apply, apply_actions
from autosched.runtime.compiled_plans import compile_planned
from autosched.runtime.document import Plan
from autosched.runtime.make_plan import plan
from autosched.runtime.memeff import FusedAttention, fusable_cores
from autosched.runtime.memeff.attention import fused_form
from autosched.runtime.meter import model_state
from autosched.runtime.model_profile import profile_model
from autosched.runtime.planned_layer import build_body
from autosched.runtime.measured_step import measure_step
from support.compiled_steps import fresh_dynamo, max_rel_error, saved_bytes  # noqa: F401

BACKEND = "aot_eager_decomp_partition"


def _scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


class Unmasked(nn.Module):
    def forward(self, q, k, v):
        return torch.softmax(_scores(q, k), dim=-1) @ v


class Unscaled(nn.Module):
    def forward(self, q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v


class WithDropout(nn.Module):
    def forward(self, q, k, v):
        return nn.functional.dropout(torch.softmax(_scores(q, k), dim=-1), 0.1) @ v


class PositionBias(nn.Module):          # ALiBi-like: a bias growing with distance
    def forward(self, q, k, v):
        t = q.size(-2)
        pos = torch.arange(t)
        return torch.softmax(_scores(q, k) - 0.1 * (pos[:, None] - pos).abs(), dim=-1) @ v


def _qkv(shape=(2, 3, 16, 8), seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(shape, generator=g) for _ in range(3))


def test_only_cores_of_the_fused_function_are_accepted(gpt):
    block = gpt.make_model(n_layer=1, d_model=32, n_head=2, seq_len=16).blocks[0]
    assert fusable_cores(block, ["attn.core"], (torch.randn(2, 16, 32),), {}) == \
        {"attn.core": True}
    qkv = _qkv()
    assert fused_form(Unmasked(), qkv) is False
    for other in (Unscaled(), WithDropout(), PositionBias()):
        assert fused_form(other, qkv) is None, type(other).__name__
    assert fused_form(Unmasked(), qkv[:2]) is None                  # not (q, k, v)
    assert fused_form(Unmasked(), qkv, {"mask": None}) is None
    assert fused_form(Unmasked(), tuple(x.long() for x in qkv)) is None


@pytest.mark.parametrize("causal", [True, False])
def test_the_fused_form_equals_the_core_in_outputs_and_gradients(gpt, causal):
    core = gpt.CoreAttention(16, 8) if causal else Unmasked()
    results = []
    for fn in (core, FusedAttention(causal)):
        leaves = [x.clone().requires_grad_(True) for x in _qkv(seed=1)]
        out = fn(*leaves)
        out.backward(torch.ones_like(out))
        results.append([out.detach(), *(x.grad for x in leaves)])
    for ref, got in zip(*results):
        assert (ref - got).abs().max() <= 1e-5 * ref.abs().max()


def test_the_fused_core_saves_the_probabilities_less_one_log_sum_exp_per_row(tiny_gpt,
                                                                             grads):
    model, inputs, loss_fn = tiny_gpt
    profile = profile_model(model, inputs, loss_fn, repeats=1,
                            actions=["keep", FUSED, f"selective+{FUSED}"])
    layer = profile.layers[0]
    assert layer.fused_attention == {"attn.core": True}
    assert set(layer.options) == {"keep", FUSED, f"selective+{FUSED}"}
    cores = [p.attention_cores for p in profile.layers]
    fused = [p.fused_attention for p in profile.layers]
    run = apply_actions(model, [FUSED, "keep"], profile.containers, cores,
                        fused_attention=fused)
    batch, seq = inputs[0].shape
    heads = model.blocks[0].attn.n_head
    probs, lse = batch * heads * seq * seq * 4, batch * heads * seq * 4
    kept = measure_step(model, inputs, loss_fn, repeats=1).saved_bytes
    assert measure_step(run, inputs, loss_fn, repeats=1).saved_bytes == kept - probs + lse
    assert layer.options["keep"].internal_bytes - layer.options[FUSED].internal_bytes == \
        probs - lse
    ref = grads(model, model, inputs, loss_fn)
    for actions in ([FUSED, FUSED], [f"selective+{FUSED}", FUSED]):
        run = apply_actions(model, actions, profile.containers, cores, fused_attention=fused)
        assert max_rel_error(grads(model, run, inputs, loss_fn), ref) < 1e-5


def test_a_plan_carries_its_fused_cores_through_json(tiny_gpt, grads, bw_path):
    model, inputs, loss_fn = tiny_gpt
    profile = profile_model(model, inputs, loss_fn, repeats=1, bandwidth_path=bw_path,
                            actions=["keep", FUSED])
    needed = profile.keep_saved_bytes - profile.layers[0].options["keep"].internal_bytes \
        + profile.layers[0].options[FUSED].internal_bytes
    p = plan(model, inputs, needed, loss_fn, profile=profile)
    assert FUSED in p.actions
    again = Plan.from_json(p.to_json())
    assert [lp.fused_attention for lp in again.layers] == [{"attn.core": True}] * 2
    run = apply(model, again)
    assert measure_step(run, inputs, loss_fn, repeats=1).saved_bytes <= needed
    assert max_rel_error(grads(model, run, inputs, loss_fn),
                         grads(model, model, inputs, loss_fn)) < 1e-5


def test_compiled_the_fused_core_still_saves_less_and_keeps_gradients(tiny_gpt, grads):
    model, inputs, loss_fn = tiny_gpt
    fused = [{"attn.core": True}] * 2
    kept = compile_planned(model, ["keep"] * 2, backend=BACKEND)
    run = compile_planned(model, [FUSED] * 2, backend=BACKEND, fused_attention=fused)
    state = model_state(model)
    batch, seq = inputs[0].shape
    probs = batch * model.blocks[0].attn.n_head * seq * seq * 4
    assert saved_bytes(run, inputs, loss_fn, state) <= \
        saved_bytes(kept, inputs, loss_fn, state) - 2 * probs * 3 // 4
    assert max_rel_error(grads(model, run, inputs, loss_fn),
                         grads(model, model, inputs, loss_fn)) < 1e-5


def test_a_fusing_action_without_a_fusable_core_is_refused(gpt):
    block = gpt.make_model(n_layer=1, d_model=32, n_head=2, seq_len=16).blocks[0]
    with pytest.raises(ValueError, match="no attention core of the fused form"):
        build_body(block, ACTIONS[FUSED], ["attn.core"], fused_attention={})


def test_a_core_is_fused_only_if_every_call_of_it_is_the_fused_function():
    class MaskableCore(nn.Module):
        def forward(self, q, k, v, bias=None):
            scores = _scores(q, k) if bias is None else _scores(q, k) + bias
            return torch.softmax(scores, dim=-1) @ v

    class Block(nn.Module):           # calls its core plain, then with a bias
        def __init__(self, biased: bool):
            super().__init__()
            self.core, self.biased = MaskableCore(), biased

        def forward(self, q, k, v):
            out = self.core(q, k, v)
            if self.biased:
                out = out + self.core(q, k, v, bias=torch.ones(q.size(-2), k.size(-2)).tril())
            return out

    qkv = _qkv()
    assert fusable_cores(Block(biased=False), ["core"], qkv, {}) == {"core": False}
    assert fusable_cores(Block(biased=True), ["core"], qkv, {}) == {}
