"""context_costs: a compiled profile's action costs come from the whole compiled model,
per group of identical layers, exactly as the step differences and saved bytes say."""
from __future__ import annotations

import pytest

from autosched.runtime.bandwidth import Bandwidth
from autosched.runtime.context_costs import bytes_in_context, context_costs
from autosched.runtime.model_profile import ActionCost, LayerProfile, ModelProfile
from autosched.runtime.prediction import predict


def cost(fwd, bwd, internal=100):
    return ActionCost(fwd_s=fwd, bwd_s=bwd, internal_bytes=internal, shared=frozenset())


def layer(i, with_offload=False):
    options = {"keep": cost(0.010, 0.020), "selective": cost(0.005, 0.015, 60),
               "recompute": cost(0.008, 0.032, 0)}
    if with_offload:
        options["offload"] = cost(0.010, 0.020, 0)
    return LayerProfile(f"blocks.{i}", i, options)


# whole-model step seconds per assignment: two groups ({0, 1, 2} and {3}); inside the
# model a kept layer costs 0.020 (not the 0.030 it took alone), selective 0.021,
# recompute 0.028; layer 3 (the odd one) 0.010 / 0.012 / 0.015; the rest 0.005
PER_LAYER = {0: {"keep": .020, "selective": .021, "recompute": .028},
             3: {"keep": .010, "selective": .012, "recompute": .015}}


def step_s(actions):
    return 0.005 + sum(PER_LAYER[0 if i < 3 else 3][a] for i, a in enumerate(actions))


def test_costs_are_the_keep_time_plus_the_in_model_difference_per_layer():
    built, measured = [], []

    def build(actions):
        built.append(tuple(actions))
        return tuple(actions)

    def measure(actions):
        measured.append(actions)
        return step_s(actions)

    layers = [layer(i, with_offload=True) for i in range(4)]
    found = context_costs(layers, [[0, 1, 2], [3]], build, measure, rounds=3)
    out, keep_s, saved = found.layers, found.keep_s, found.saved
    assert saved == {} and found.once_costs == ()                         # no saved_of: no bytes measured
    assert keep_s == pytest.approx(step_s(["keep"] * 4))
    # one model per group and non-offload action, plus the all-kept one, plus one per
    # action both groups have with it on both; each timed 3 times
    assert built == [("keep",) * 4,
                     ("selective",) * 3 + ("keep",), ("recompute",) * 3 + ("keep",),
                     ("keep",) * 3 + ("selective",), ("keep",) * 3 + ("recompute",),
                     ("selective",) * 4, ("recompute",) * 4]
    assert len(measured) == 7 * 3 and measured[:2] == [built[0], built[1]]
    assert measured[7:9] == [built[1], built[2]]     # the second round starts one later
    for i, lp in enumerate(out):
        own = PER_LAYER[0 if i < 3 else 3]
        for name in ("selective", "recompute"):
            c = lp.options[name]
            assert c.time_s == pytest.approx(.030 + own[name] - own["keep"])
            assert c.internal_bytes == layers[i].options[name].internal_bytes
            old = layers[i].options[name]
            assert c.fwd_s / c.time_s == pytest.approx(old.fwd_s / old.time_s)
        assert lp.options["keep"] == layers[i].options["keep"]
        assert lp.options["offload"] == layers[i].options["offload"]


# whole-model saved bytes: the rest saves 50 where the all-kept prediction says 0; layers
# 0-2 under selective save 90 each between them (a join makes each keep more than the 60
# it keeps alone), recompute 0; layer 3 as alone
SAVED = {"keep": 100, "selective": 90, "recompute": 0}


def saved_of(actions):
    return 50 + sum(SAVED[a] if i < 3 else layer(3).options[a].internal_bytes
                    for i, a in enumerate(actions))


def test_a_uniform_plan_is_predicted_at_what_the_whole_model_measured():
    layers = [layer(i) for i in range(4)]
    found = context_costs(layers, [[0, 1, 2], [3]], list, step_s, rounds=1,
                          saved_of=saved_of)
    out, keep_s, saved = found.layers, found.keep_s, found.saved
    rest_s = keep_s - sum(lp.options["keep"].time_s for lp in out)
    profile = bytes_in_context(
        ModelProfile(out, {}, 0, frozenset(), rest_s, keep_s, 400,
                     Bandwidth(1.0, 1.0, False, "test", "t"), "cpu", "blocks", "test",
                     compiled_with="inductor"), [[0, 1, 2], [3]], saved)
    assert profile.rest_bytes == 50
    assert [lp.options["selective"].internal_bytes for lp in profile.layers] == [90] * 3 + [60]
    for actions in (["selective"] * 3 + ["keep"], ["recompute"] * 4,
                    ["recompute", "selective", "keep", "selective"]):
        assert predict(profile, actions).step_time_s == pytest.approx(step_s(actions))
        assert predict(profile, actions).saved_bytes == saved_of(actions)


def test_a_variant_that_saves_less_than_predicted_does_not_lower_the_prediction():
    # layer 3 under selective saves 20 in the model, not its own 60 (a neighbour kept
    # what it would have saved): one variant's surplus does not add up across layers
    def less(actions):
        return saved_of(actions) - (40 if actions[3] == "selective" else 0)

    layers = [layer(i) for i in range(4)]
    found = context_costs(layers, [[0, 1, 2], [3]], list, step_s, rounds=1, saved_of=less)
    out, keep_s, saved = found.layers, found.keep_s, found.saved
    profile = bytes_in_context(
        ModelProfile(out, {}, 0, frozenset(), 0.0, keep_s, 400,
                     Bandwidth(1.0, 1.0, False, "test", "t"), "cpu", "blocks", "test",
                     compiled_with="inductor"), [[0, 1, 2], [3]], saved)
    assert [lp.options["selective"].internal_bytes for lp in profile.layers] == [90] * 3 + [60]
    actions = ["keep"] * 3 + ["selective"]
    assert predict(profile, actions).saved_bytes == less(actions) + 40


def test_what_the_groups_differences_miss_of_an_action_everywhere_raises_its_layers():
    # under selective, each layer next to another selective one runs 0.003 s slower than
    # beside kept ones (two neighbours: 0.003 more for the pair); recompute adds up
    def joined(actions):
        pairs = sum(1 for a, b in zip(actions, actions[1:]) if a == b == "selective")
        return step_s(actions) + 0.003 * pairs

    layers = [layer(i) for i in range(4)]
    found = context_costs(layers, [[0, 1, 2], [3]], list, joined, rounds=1)
    out, profile = found.layers, in_context_profile(found)
    assert found.once_costs == ()
    for actions in (["selective"] * 4, ["recompute"] * 4, ["keep"] * 4,
                    ["recompute"] * 3 + ["keep"]):
        assert predict(profile, actions).step_time_s == pytest.approx(joined(actions))
    # the group of three alone measured two pairs (0.006); everywhere adds the third
    # pair's 0.003, a quarter of it on each layer
    assert out[3].options["selective"].time_s == pytest.approx(
        .030 + PER_LAYER[3]["selective"] - PER_LAYER[3]["keep"] + .003 / 4)
    assert out[0].options["selective"].time_s == pytest.approx(
        .030 + PER_LAYER[0]["selective"] - PER_LAYER[0]["keep"] + .006 / 3 + .003 / 4)


def in_context_profile(found):
    """A compiled profile of what context_costs found (no bytes)."""
    rest_s = found.keep_s - sum(lp.options["keep"].time_s for lp in found.layers)
    return ModelProfile(found.layers, {}, 0, frozenset(), rest_s, found.keep_s, 400,
                        Bandwidth(1.0, 1.0, False, "test", "t"), "cpu", "blocks", "test",
                        compiled_with="inductor", once_costs=found.once_costs)


def charged(found) -> dict:
    """{actions: seconds} of the once costs context_costs found."""
    return {c.actions: c.time_s for c in found.once_costs}


MIXED_PLANS = (["recompute"] * 4, ["keep"] * 4, ["recompute"] + ["keep"] * 3,
               ["keep"] * 3 + ["recompute"], ["selective", "recompute", "keep", "selective"],
               ["selective"] * 3 + ["recompute"], ["recompute", "keep", "keep", "selective"])


def test_an_action_that_costs_once_for_any_layer_is_a_once_cost_of_the_profile():
    # recompute anywhere costs 0.009 once (a compiler's choice for the whole graph), so
    # everywhere measures less than the groups' differences add up to
    def once(actions):
        return step_s(actions) + (0.009 if "recompute" in actions else 0)

    built = []
    found = context_costs([layer(i) for i in range(4)], [[0, 1, 2], [3]],
                          lambda a: built.append(tuple(a)) or tuple(a), once, rounds=1)
    assert charged(found) == pytest.approx({frozenset({"recompute"}): 0.009})
    assert len(built) == 7                     # one charged action: no pair timed
    out = found.layers
    for i in (0, 3):                           # each layer keeps its own difference
        own = PER_LAYER[i]
        assert out[i].options["recompute"].time_s == pytest.approx(
            .030 + own["recompute"] - own["keep"])
    profile = in_context_profile(found)
    for actions in MIXED_PLANS:
        assert predict(profile, actions).step_time_s == pytest.approx(once(actions))


def test_two_actions_that_share_a_once_cost_pay_it_once_between_them():
    # a recomputing action anywhere costs 0.009 once, for either or both; selective
    # alone costs 0.002 once more
    def shared(actions):
        return (step_s(actions) + (0.009 if {"recompute", "selective"} & set(actions) else 0)
                + (0.002 if "selective" in actions else 0))

    built = []
    found = context_costs([layer(i) for i in range(4)], [[0, 1, 2], [3]],
                          lambda a: built.append(tuple(a)) or tuple(a), shared, rounds=1)
    # the pair is timed on two groups: recompute on the first, selective on the second
    assert built[7:] == [("recompute",) * 3 + ("selective",)]
    assert charged(found) == pytest.approx({frozenset({"recompute", "selective"}): 0.009,
                                            frozenset({"selective"}): 0.002})
    profile = in_context_profile(found)
    for actions in MIXED_PLANS:
        assert predict(profile, actions).step_time_s == pytest.approx(shared(actions))


def test_two_actions_that_each_cost_once_pay_both_where_they_do_not_share():
    def apart(actions):
        return (step_s(actions) + (0.009 if "recompute" in actions else 0)
                + (0.004 if "selective" in actions else 0))

    found = context_costs([layer(i) for i in range(4)], [[0, 1, 2], [3]], list, apart,
                          rounds=1)
    assert charged(found) == pytest.approx({frozenset({"recompute"}): 0.009,
                                            frozenset({"selective"}): 0.004})
    profile = in_context_profile(found)
    for actions in MIXED_PLANS:
        assert predict(profile, actions).step_time_s == pytest.approx(apart(actions))


def test_one_group_is_not_timed_again_as_everywhere():
    built = []
    context_costs([layer(i) for i in range(3)], [[0, 1, 2]],
                  lambda a: built.append(tuple(a)) or tuple(a), step_s, rounds=1)
    assert built == [("keep",) * 3, ("selective",) * 3, ("recompute",) * 3]


def test_rounds_must_be_positive():
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        context_costs([layer(0)], [[0]], list, step_s, rounds=0)
