"""once_costs: a charge from group and all-groups differences, shared charges, and what a
plan pays."""
from __future__ import annotations

import pytest

from autosched.runtime.once_costs import OnceCost, charge, combined, paid


def test_charge_is_what_the_groups_paid_each_beyond_the_all_groups_variant():
    # three groups paying F = 5 each beside own costs 1, 2, 3: all at once 5 + 6
    assert charge([6.0, 7.0, 8.0], 11.0, noise_s=0.5) == pytest.approx(5.0)
    # additive (no charge) and within the noise: nothing
    assert charge([6.0, 7.0, 8.0], 21.0, noise_s=0.5) == 0.0
    assert charge([6.0, 7.0, 8.0], 20.5, noise_s=0.5) == 0.0
    assert charge([6.0, 7.0, 8.0], 24.0, noise_s=0.5) == 0.0      # costs more together
    # never more than the smallest group paid: no layer's own cost goes below keeping
    assert charge([2.0, 9.0], 1.0, noise_s=0.0) == pytest.approx(2.0)
    assert charge([-1.0, 9.0], 1.0, noise_s=0.0) == 0.0
    with pytest.raises(ValueError, match="two or more"):
        charge([3.0], 1.0, noise_s=0.0)


def test_actions_that_all_share_pairwise_pay_the_common_part_once():
    charges = {"a": (9.0, 0.1), "b": (8.0, 0.2), "c": (7.0, 0.3), "d": (4.0, 0.0)}
    shared = {frozenset("ab"): 7.0, frozenset("ac"): 6.5, frozenset("bc"): 6.0}
    out = {c.actions: c.time_s for c in combined(charges, shared)}
    assert out == pytest.approx({frozenset("abc"): 6.0, frozenset("a"): 3.0,
                                 frozenset("b"): 2.0, frozenset("c"): 1.0,
                                 frozenset("d"): 4.0})


def test_a_chain_of_sharing_pairs_is_not_one_charge():
    # a shares with b and b with c, but a and c do not share: a and c on two layers pay
    # both charges, so they are not put in one set
    charges = {"a": (9.0, 0.0), "b": (9.0, 0.0), "c": (9.0, 0.0)}
    out = {c.actions: c.time_s for c in combined(charges, {frozenset("ab"): 9.0,
                                                           frozenset("bc"): 9.0})}
    assert out == pytest.approx({frozenset("ab"): 9.0, frozenset("c"): 9.0})


def test_a_plan_pays_each_once_cost_it_touches_once():
    once = (OnceCost(frozenset({"recompute", "selective_narrow"}), 0.009),
            OnceCost(frozenset({"memeff_ln"}), 0.001))
    assert paid(once, ["keep", "keep"]) == []
    assert paid(once, ["recompute", "recompute", "selective_narrow"]) == [once[0]]
    # an offloaded layer runs its base action's compute, and pays its once costs
    assert paid(once, ["offload+memeff_ln", "selective_narrow"]) == list(once)
    assert paid(once, ["offload", "selective"]) == []
