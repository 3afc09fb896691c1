"""plan() -> apply() on a tiny GPT: budgets met as measured, bytes predicted exactly, exact
gradients for exact actions, JSON round trip, and one-line UserErrors for bad input."""
from __future__ import annotations

import pytest
import torch

import autosched.runtime as rt
from autosched.errors import UserError
from autosched.runtime.actions import ACTIONS
from autosched.runtime.document import Plan
from autosched.runtime.model_profile import profile_model
from autosched.runtime.measured_step import measure_step

# Gradient tolerance of plans with memory-efficient GELU/LayerNorm (see memeff/kernels.py):
# per parameter, |error| <= MEMEFF_REL * max |reference gradient|.
MEMEFF_REL = 1e-3


@pytest.fixture(scope="module")
def tiny(gpt):
    model = gpt.make_model(n_layer=2, d_model=32, n_head=2, seq_len=16, vocab=32)
    inputs = gpt.make_inputs(batch=2, seq_len=16, vocab=32)
    return model, inputs, gpt.loss_fn


@pytest.fixture(scope="module")
def tiny_profile(tiny, tmp_path_factory):
    model, inputs, loss_fn = tiny
    return profile_model(model, inputs, loss_fn, allow_offload=True, repeats=2,
                         bandwidth_path=tmp_path_factory.mktemp("bw") / "bw.json")


@pytest.mark.parametrize("spec", ["100%", "60%", "40%", "25%"])
def test_budget_met_bytes_exact_and_gradients(spec, tiny, tiny_profile, grads):
    model, inputs, loss_fn = tiny
    plan = rt.plan(model, inputs, spec, loss_fn, profile=tiny_profile)
    planned = rt.apply(model, plan)
    measured = measure_step(planned, inputs, loss_fn, repeats=1)
    assert measured.saved_bytes <= plan.budget["bytes"]
    assert measured.saved_bytes == plan.predicted["saved_bytes"]
    assert measured.host_bytes == plan.predicted["host_bytes"]
    ref, got = grads(model, model, inputs, loss_fn), grads(model, planned, inputs, loss_fn)
    memeff_used = any(ACTIONS[a].reforms for a in plan.actions)
    for name, r in ref.items():
        if memeff_used:
            assert (got[name] - r).abs().max() <= MEMEFF_REL * r.abs().max(), name
        else:
            torch.testing.assert_close(got[name], r)


def test_every_action_keeps_gradients(tiny, tiny_profile, grads):
    model, inputs, loss_fn = tiny
    ref = grads(model, model, inputs, loss_fn)
    from autosched.runtime.apply_plan import apply_actions

    cores = [layer.attention_cores for layer in tiny_profile.layers]
    fused = [layer.fused_attention for layer in tiny_profile.layers]
    for action in tiny_profile.layers[0].options:
        got = grads(model, apply_actions(model, [action, action], "blocks", cores,
                                         fused_attention=fused), inputs, loss_fn)
        for name, r in ref.items():
            if ACTIONS[action].reforms:
                assert (got[name] - r).abs().max() <= MEMEFF_REL * r.abs().max(), (action, name)
            else:
                torch.testing.assert_close(got[name], r, msg=f"{action} {name}")


def test_every_action_predicted_bytes_equal_measured(tiny, tiny_profile):
    model, inputs, loss_fn = tiny
    from autosched.runtime.prediction import predict
    from autosched.runtime.apply_plan import apply_actions

    cores = [layer.attention_cores for layer in tiny_profile.layers]
    fused = [layer.fused_attention for layer in tiny_profile.layers]
    names = list(tiny_profile.layers[0].options)
    for a, b in zip(names, names[1:] + names[:1]):
        planned = apply_actions(model, [a, b], "blocks", cores, fused_attention=fused)
        measured = measure_step(planned, inputs, loss_fn, repeats=1)
        assert measured.saved_bytes == predict(tiny_profile, [a, b]).saved_bytes, (a, b)


def test_plan_round_trips_through_json_and_applies_the_same(tiny, tiny_profile):
    model, inputs, loss_fn = tiny
    plan = rt.plan(model, inputs, "40%", loss_fn, profile=tiny_profile)
    again = Plan.from_json(plan.to_json())
    assert again == plan and again.format == "autosched.plan" and again.version == 1
    for layer in again.layers:
        assert layer.kernel == "torch" and layer.stream["compute"] == "default"
        assert set(layer.choices) == set(tiny_profile.layers[layer.index].options)
        assert layer.predicted["saved_bytes"] >= 0 and layer.predicted["time_s"] > 0
    assert again.solver["status"] == "optimal" and "HiGHS" in again.solver["name"]
    a = measure_step(rt.apply(model, plan), inputs, loss_fn, repeats=1).saved_bytes
    b = measure_step(rt.apply(model, again), inputs, loss_fn, repeats=1).saved_bytes
    assert a == b


def test_apply_leaves_the_original_model_alone(tiny, tiny_profile):
    model, inputs, loss_fn = tiny
    plan = rt.plan(model, inputs, "25%", loss_fn, profile=tiny_profile)
    before = [type(m).__name__ for m in model.modules()]
    planned = rt.apply(model, plan)
    assert [type(m).__name__ for m in model.modules()] == before
    assert {id(p) for p in planned.parameters()} == {id(p) for p in model.parameters()}
    with torch.no_grad():
        torch.testing.assert_close(planned(*inputs), model(*inputs), rtol=0, atol=0)


def test_plan_for_another_model_is_refused(tiny, tiny_profile, gpt):
    model, inputs, loss_fn = tiny
    plan = rt.plan(model, inputs, "60%", loss_fn, profile=tiny_profile)
    other = gpt.make_model(n_layer=2, d_model=48, n_head=2, seq_len=16, vocab=32)
    with pytest.raises(UserError, match="different model"):
        rt.apply(other, plan)
    with pytest.raises(UserError, match="layers"):
        rt.apply(gpt.make_model(n_layer=3, d_model=32, n_head=2, seq_len=16, vocab=32), plan)


@pytest.mark.parametrize("text, match", [("{", "invalid JSON"), ("[]", "not an autosched plan"),
                                         ('{"format": "autosched.plan", "version": 99}',
                                          "version 99")])
def test_bad_plan_json_is_a_user_error(text, match):
    with pytest.raises(UserError, match=match):
        Plan.from_json(text)


def test_infeasible_budget_names_the_smallest_feasible(tiny, tiny_profile):
    model, inputs, loss_fn = tiny
    with pytest.raises(UserError) as info:
        rt.plan(model, inputs, "1%", loss_fn, profile=tiny_profile)
    msg = str(info.value)
    assert "\n" not in msg and "smallest feasible budget" in msg and "%" in msg


def test_malformed_budget_fails_before_profiling(tiny):
    model, inputs, loss_fn = tiny
    with pytest.raises(UserError, match="not understood"):
        rt.plan(model, inputs, "lots", loss_fn)


@pytest.mark.slow
def test_six_layer_gpt_at_40_percent(gpt, bw_path, grads):
    """The bench model (6 layers, width 256, seq 128, batch 8, fp32): budget met as measured,
    bytes predicted exactly, gradients within the memeff_ln tolerance."""
    model, inputs = gpt.make_model(), gpt.make_inputs()
    prof = profile_model(model, inputs, gpt.loss_fn, repeats=1, bandwidth_path=bw_path,
                         actions=["keep", "memeff_ln", "recompute"])
    plan = rt.plan(model, inputs, "40%", gpt.loss_fn, profile=prof)
    planned = rt.apply(model, plan)
    measured = measure_step(planned, inputs, gpt.loss_fn, repeats=1)
    assert measured.saved_bytes <= plan.budget["bytes"] == int(0.4 * prof.keep_saved_bytes)
    assert measured.saved_bytes == plan.predicted["saved_bytes"]
    ref, got = grads(model, model, inputs, gpt.loss_fn), grads(model, planned, inputs,
                                                               gpt.loss_fn)
    for name, r in ref.items():
        assert (got[name] - r).abs().max() <= MEMEFF_REL * r.abs().max(), name
