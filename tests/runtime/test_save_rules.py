"""The selective actions' save rules: which compute-heavy outputs each keeps (exact bytes
in a GPT block and under torch.compile), where each is offered, and gradients equal to
keeping everything."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy

from autosched.runtime.actions import ACTIONS, is_selective, selective_action
from autosched.runtime.apply_plan import apply_actions
from autosched.runtime.checkpointing import compiled_policy, eager_policy, save_by_rule
from autosched.runtime.compiled_plans import compile_planned
from autosched.runtime.meter import SavedTensorMeter, model_state
from autosched.runtime.model_profile import applicable_actions
from autosched.runtime.planned_layer import PlannedLayer
from autosched.runtime.save_rules import RULES, distinct_rules, keeps
from autosched.runtime.trace import trace_ops
from autosched.model.training_step import compute_loss
from support.compiled_steps import fresh_dynamo, max_rel_error, saved_bytes  # noqa: F401

MM = torch.ops.aten.mm.default
ADDMM = torch.ops.aten.addmm.default
BMM = torch.ops.aten.bmm.default


def test_every_rule_has_its_selective_action():
    assert [selective_action(r) for r in RULES] == \
        ["selective", "selective_dense", "selective_narrow"]
    for rule in RULES:
        action = ACTIONS[selective_action(rule)]
        assert is_selective(action.name) and action.saves == rule
    assert not is_selective("recompute") and not is_selective("keep")
    with pytest.raises(ValueError, match="unknown save rule 'some'"):
        keeps("some", "mm", 1, 1)


@pytest.mark.parametrize("ctx_has_output", [True, False])
def test_narrow_recomputes_contractions_wider_than_their_operand(ctx_has_output):
    # torch before 2.12 asks the policy before the op runs (no op_output): the output's
    # size then comes from a run on meta tensors
    def decide(func, *args):
        ctx = SimpleNamespace(op_output=func(*args) if ctx_has_output else None)
        return save_by_rule("narrow", ctx, func, *args)

    a, up, down = torch.randn(4, 8), torch.randn(8, 16), torch.randn(8, 2)
    assert decide(MM, a, up) is CheckpointPolicy.PREFER_RECOMPUTE      # 64 > 32 elements
    assert decide(MM, a, down) is CheckpointPolicy.MUST_SAVE           # 8 <= 32
    # addmm's first argument is the bias, not the operand
    assert decide(ADDMM, torch.randn(16), a, up) is CheckpointPolicy.PREFER_RECOMPUTE
    assert decide(ADDMM, torch.randn(2), a, down) is CheckpointPolicy.MUST_SAVE
    # cheap ops are recomputed under every rule
    assert save_by_rule("narrow", SimpleNamespace(op_output=None), torch.ops.aten.gelu.default,
                        a) is CheckpointPolicy.PREFER_RECOMPUTE


def test_dense_recomputes_batched_products_only():
    ctx = SimpleNamespace(op_output=None)
    q = torch.randn(2, 4, 3)
    assert save_by_rule("dense", ctx, BMM, q, q.transpose(1, 2)) is \
        CheckpointPolicy.PREFER_RECOMPUTE
    assert save_by_rule("all", ctx, BMM, q, q.transpose(1, 2)) is CheckpointPolicy.MUST_SAVE
    assert save_by_rule("dense", ctx, MM, torch.randn(4, 8), torch.randn(8, 16)) is \
        CheckpointPolicy.MUST_SAVE
    # compiled by inductor, batch norms are left to the partitioner under every rule
    bn = torch.ops.aten._native_batch_norm_legit.default
    for rule in RULES:
        assert compiled_policy("inductor", rule)(ctx, bn) is CheckpointPolicy.PREFER_SAVE
        assert eager_policy(rule)(ctx, bn) is CheckpointPolicy.PREFER_RECOMPUTE


def _block_and_input(gpt):
    model = gpt.make_model(n_layer=1, d_model=32, n_head=2, seq_len=16, vocab=32)
    return model.blocks[0], torch.randn(3, 16, 32, requires_grad=True)


def test_rules_are_offered_only_where_they_keep_something_else(gpt):
    block, x = _block_and_input(gpt)
    trace = trace_ops(block, (x,), {})
    # in elements of the block's input: qkv (wider than its input), scores (head dim =
    # sequence length here: as wide as q), weighted sum, proj, fc1 (wider), fc2
    unit = x.numel()
    assert [(n, out / unit, operand / unit) for n, out, operand in trace.heavy] == \
        [("addmm", 3, 1), ("bmm", 1, 1), ("bmm", 1, 1), ("addmm", 1, 1), ("addmm", 4, 1),
         ("addmm", 1, 4)]
    assert distinct_rules(trace.heavy) == ["dense", "narrow"]
    assert {"selective", "selective_dense", "selective_narrow"} <= \
        set(applicable_actions(block, trace, allow_offload=False))
    # an MLP block has no batched product: dense would keep what selective keeps
    mlp = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32))
    assert distinct_rules(trace_ops(mlp, (torch.randn(8, 32),), {}).heavy) == ["narrow"]
    # convolutions that keep their channels: every rule keeps every output
    conv = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1))
    assert distinct_rules(trace_ops(conv, (torch.randn(2, 8, 8, 8),), {}).heavy) == []
    assert "selective_narrow" not in applicable_actions(
        conv, trace_ops(conv, (torch.randn(2, 8, 8, 8),), {}), allow_offload=False)


def _eager_bytes_and_grads(block, x, action):
    layer = PlannedLayer(block, ACTIONS[action], 0)
    block.zero_grad(set_to_none=True)
    x.grad = None
    with SavedTensorMeter(model_state(block)) as meter:
        out = layer(x)
    (out * out).sum().backward()
    meter.release()
    grads = {n: p.grad.clone() for n, p in block.named_parameters()}
    return meter.device_bytes, dict(grads, x=x.grad.clone())


def test_each_rule_saves_exactly_its_outputs_and_gradients_stay_exact(gpt):
    block, x = _block_and_input(gpt)
    unit = x.numel() * x.element_size()       # one (batch, seq, width) tensor
    _, ref = _eager_bytes_and_grads(block, x, "keep")
    saved = {}
    for action in ("selective", "selective_dense", "selective_narrow"):
        saved[action], grads = _eager_bytes_and_grads(block, x, action)
        assert max_rel_error(ref, grads) == 0.0
    # input, qkv, scores, weighted sum, proj, fc1, fc2 (test above), as each rule keeps
    assert saved == {"selective": (1 + 3 + 1 + 1 + 1 + 4 + 1) * unit,
                     "selective_dense": (1 + 3 + 1 + 4 + 1) * unit,
                     "selective_narrow": (1 + 1 + 1 + 1 + 1) * unit}


def test_compiled_rules_keep_fewer_bytes_in_order_and_exact_gradients(tiny_gpt):
    model, inputs, loss_fn = tiny_gpt

    def grads(run):
        model.zero_grad(set_to_none=True)
        compute_loss(run, inputs, loss_fn).backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    ref = grads(model)
    state = model_state(model)
    measured = {}
    for action in ("selective", "selective_dense", "selective_narrow"):
        run = compile_planned(model, [action] * 2, backend="aot_eager_decomp_partition")
        measured[action] = saved_bytes(run, inputs, loss_fn, state)
        assert max_rel_error(ref, grads(run)) < 1e-5
        eager = apply_actions(model, [action] * 2)
        assert max_rel_error(ref, grads(eager)) < 1e-6
    assert measured["selective"] > measured["selective_dense"] > measured["selective_narrow"]
